"""A Spark standalone cluster on loopback for tests: a master and workers started with PySpark's
own `bin/spark-class`, so no Spark download is needed, yet tasks run in executor JVMs (and
Python workers) apart from the driver, as on a real cluster."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyspark

from jobledger.services.broker import LOOPBACK, free_port

from .processes import stop_process

SPARK_HOME = Path(pyspark.__file__).parent
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


@dataclass(frozen=True)
class StandaloneCluster:
    master_url: str
    """`spark://127.0.0.1:<port>`, for `--master`."""
    web_url: str
    """The master's web UI; `<web_url>/json/` is its state."""
    logs: Path
    worker_pids: tuple[int, ...] = ()
    """The worker JVMs, for tests that kill one."""

    def state(self) -> dict[str, Any]:
        """The master's own account: workers, their state and cores, running and finished
        applications."""
        with urllib.request.urlopen(f"{self.web_url}/json/", timeout=5) as response:
            return json.load(response)


def _daemon_env() -> dict[str, str]:
    return {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        # Loopback only: the daemons would otherwise advertise the host's first interface.
        "SPARK_LOCAL_IP": LOOPBACK,
        # The master's REST submission server listens on the fixed port 6066, which two
        # clusters on one machine would fight over; nothing here submits through it.
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
    }


def _spawn(stack: ExitStack, log: Path, *args: str) -> subprocess.Popen:
    """One daemon, stopped when `stack` closes. spark-class execs java, so the child is the
    JVM itself and a signal to it reaches the daemon (a worker's shutdown hook kills its
    executors)."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), *args],
            env=_daemon_env(), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    stack.callback(stop_process, process, 20)
    return process


@contextmanager
def standalone_cluster(
    work: Path, workers: int = 2, cores: int = 1, memory: str = "2g", timeout_s: float = 120
) -> Iterator[StandaloneCluster]:
    """A master and `workers` workers of `cores` cores and `memory` for executors each, ready
    (every worker ALIVE at the master) when this yields; every daemon is stopped on exit."""
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    port, web_port, *worker_ports = _distinct_ports(2 + workers)
    cluster = StandaloneCluster(f"spark://{LOOPBACK}:{port}", f"http://{LOOPBACK}:{web_port}", logs)
    with ExitStack() as stack:
        master = _spawn(stack, logs / "master.log", MASTER_CLASS, "--host", LOOPBACK,
                        "--port", str(port), "--webui-port", str(web_port))  # fmt: skip
        daemons = [master]
        for i in range(workers):
            work_dir = work / f"worker-{i}"
            daemons.append(_spawn(
                stack, logs / f"worker-{i}.log", WORKER_CLASS, "--host", LOOPBACK,
                "--webui-port", str(worker_ports[i]), "--cores", str(cores), "--memory", memory,
                "--work-dir", str(work_dir), cluster.master_url,
            ))  # fmt: skip
        _await_workers(cluster, daemons, workers, timeout_s)
        yield replace(cluster, worker_pids=tuple(d.pid for d in daemons[1:]))


def _distinct_ports(n: int) -> list[int]:
    """`n` free ports, all different: a port is free again as soon as `free_port` returns it,
    so a worker once took the master's web UI port before the master bound it (the master
    moved to the next port, and its state was read from the worker's HTML page)."""
    ports: list[int] = []
    while len(ports) < n:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def _await_workers(
    cluster: StandaloneCluster, daemons: list[subprocess.Popen], workers: int, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        dead = [p.args[1] for p in daemons if p.poll() is not None]
        if dead:
            raise RuntimeError(f"Spark daemon(s) exited at start: {dead}; logs in {cluster.logs}")
        try:
            alive = cluster.state().get("aliveworkers", 0)
        except (OSError, ValueError):
            # the master's web UI is not up yet, or bound but not serving: right after Jetty
            # binds, /json/ has answered 200 with an empty body
            alive = 0
        if alive >= workers:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{alive} of {workers} Spark workers ALIVE after {timeout_s:.0f} s; "
                f"logs in {cluster.logs}"
            )
        time.sleep(0.2)


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (a worker's executors), from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found
