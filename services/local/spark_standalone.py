"""A Spark standalone cluster on this machine, for `jobledger runner --master spark://...`:
a master and workers started with PySpark's own `bin/spark-class` (no Spark download), on
loopback, so tasks run in executor JVMs apart from the driver as on a real cluster.

`jobledger cluster start` records the daemons in `$JOBLEDGER_HOME/spark-cluster.json` so
`cluster status` and `cluster stop` find them; the record is trusted only while the master
lives. The tests start one the same way, stopped when they end.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..home import home
from .loopback import LOOPBACK, free_port, pid_alive, terminate

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
STOP_GRACE_S = 20.0
"""A worker's shutdown hook kills its executors: time for it before SIGKILL."""


class ClusterError(RuntimeError):
    """A cluster that cannot start (no PySpark, a daemon that exited); the message says why."""


@dataclass(frozen=True)
class StandaloneCluster:
    """A running cluster: where its master listens and every daemon's process."""

    master_url: str
    """`spark://127.0.0.1:<port>`, for `--master`."""
    web_url: str
    """The master's web UI; `<web_url>/json/` is its state."""
    logs: str
    master_pid: int
    worker_pids: tuple[int, ...] = ()

    def state(self) -> dict[str, Any]:
        """The master's own account: workers, their state and cores, applications."""
        with urllib.request.urlopen(f"{self.web_url}/json/", timeout=5) as response:
            return json.load(response)

    def describe(self) -> str:
        try:
            alive = f"{self.state().get('aliveworkers', 0)} of {len(self.worker_pids)}"
        except (OSError, ValueError):
            alive = f"? of {len(self.worker_pids)}"
        return (
            f"Spark standalone master {self.master_url} (web UI {self.web_url}, pid "
            f"{self.master_pid}), {alive} worker(s) ALIVE, logs in {self.logs}"
        )


def spark_home() -> Path:
    try:
        import pyspark
    except ImportError:
        raise ClusterError(
            "a Spark cluster needs PySpark: pip install 'jobledger[spark]'"
        ) from None
    return Path(pyspark.__file__).parent


def _daemon_env() -> dict[str, str]:
    return {
        **os.environ,
        "SPARK_HOME": str(spark_home()),
        # loopback only: the daemons would otherwise advertise the host's first interface
        "SPARK_LOCAL_IP": LOOPBACK,
        # the master's REST submission server takes the fixed port 6066, which two clusters
        # on one machine would fight over; nothing here submits through it
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
    }


def _spawn(log: Path, detach: bool, *args: str) -> subprocess.Popen[bytes]:
    """One daemon. spark-class execs java, so the child is the JVM itself and a signal to it
    reaches the daemon."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), *args],
            env=_daemon_env(), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=detach,
        )  # fmt: skip


def start(
    work: Path, workers: int = 2, cores: int = 1, memory: str = "2g", detach: bool = False,
    timeout_s: float = 120,
) -> tuple[StandaloneCluster, list[subprocess.Popen[bytes]]]:  # fmt: skip
    """A master and `workers` workers of `cores` cores and `memory` for executors each,
    ready (every worker ALIVE at the master) when this returns, with the daemons' processes
    (master first); `detach`: they outlive this process. Stopped again if they do not come
    up."""
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    port, web_port, *worker_ports = _distinct_ports(2 + workers)
    master_url, web_url = f"spark://{LOOPBACK}:{port}", f"http://{LOOPBACK}:{web_port}"
    daemons = [_spawn(logs / "master.log", detach, MASTER_CLASS, "--host", LOOPBACK,
                      "--port", str(port), "--webui-port", str(web_port))]  # fmt: skip
    for i in range(workers):
        daemons.append(_spawn(
            logs / f"worker-{i}.log", detach, WORKER_CLASS, "--host", LOOPBACK, "--webui-port",
            str(worker_ports[i]), "--cores", str(cores), "--memory", memory,
            "--work-dir", str(work / f"worker-{i}"), master_url,
        ))  # fmt: skip
    cluster = StandaloneCluster(
        master_url, web_url, str(logs), daemons[0].pid, tuple(d.pid for d in daemons[1:])
    )
    try:
        _await_workers(cluster, daemons, workers, timeout_s)
    except BaseException:
        stop_children(daemons)
        raise
    return cluster, daemons


def stop_children(daemons: list[subprocess.Popen[bytes]]) -> None:
    """Stop daemons this process started: workers first (each kills its executors)."""
    for daemon in reversed(daemons):
        daemon.terminate()
        try:
            daemon.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()


def stop_daemons(cluster: StandaloneCluster) -> None:
    """Stop a recorded cluster's daemons (not this process's children): workers first."""
    for pid in (*cluster.worker_pids, cluster.master_pid):
        terminate(pid, STOP_GRACE_S)


def _distinct_ports(n: int) -> list[int]:
    """`n` free ports, all different: a port is free again as soon as `free_port` returns it,
    so a worker once took the master's web UI port before the master bound it."""
    ports: list[int] = []
    while len(ports) < n:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def _await_workers(
    cluster: StandaloneCluster, daemons: list[subprocess.Popen[bytes]], workers: int,
    timeout_s: float,
) -> None:  # fmt: skip
    deadline = time.monotonic() + timeout_s
    while True:
        dead = [p.args[1] for p in daemons if p.poll() is not None]
        if dead:
            raise ClusterError(f"Spark daemon(s) exited at start: {dead}; logs in {cluster.logs}")
        try:
            alive = cluster.state().get("aliveworkers", 0)
        except (OSError, ValueError):
            # the web UI is not up yet, or bound but not serving (an empty 200 at first)
            alive = 0
        if alive >= workers:
            return
        if time.monotonic() > deadline:
            raise ClusterError(
                f"{alive} of {workers} Spark workers ALIVE after {timeout_s:.0f} s; "
                f"logs in {cluster.logs}"
            )
        time.sleep(0.2)


def record_file() -> Path:
    return home() / "spark-cluster.json"


def read_record() -> StandaloneCluster | None:
    """The cluster `cluster start` recorded, while its master lives."""
    try:
        fields = json.loads(record_file().read_text())
        cluster = StandaloneCluster(**{**fields, "worker_pids": tuple(fields["worker_pids"])})
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return cluster if pid_alive(cluster.master_pid) else None


def start_detached(workers: int, cores: int, memory: str) -> StandaloneCluster:
    """A cluster that outlives this process, recorded for `status` and `stop`."""
    cluster, _ = start(home() / "spark-cluster", workers, cores, memory, detach=True)
    record_file().parent.mkdir(parents=True, exist_ok=True)
    record_file().write_text(json.dumps(asdict(cluster)))
    return cluster


def stop() -> StandaloneCluster | None:
    cluster = read_record()
    if cluster is not None:
        stop_daemons(cluster)
    record_file().unlink(missing_ok=True)
    return cluster
