"""Metrics scraped as Prometheus would: the services and a Spark runner run with `--metrics-port`,
the fail-once word count runs, and `/metrics` is scraped over HTTP and parsed with
prometheus_client's own parser: restarts counted, the reducers' numbers equal to what `replay`
derives from the same log, lag back to 0 once the job is done, the runner's micro-batches and
Spark jobs timed, and a runner killed with SIGKILL shown as a lost TaskManager within the
heartbeat timeout."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from jobledger.cli.demo import wordcount_job
from jobledger.projections.log.job_results import JobWatcher
from jobledger.projections.log.log_file import read_events
from jobledger.projections.log.replay import replay
from jobledger.schemas import EventSerde
from jobledger.services.client.dispatcher import submit
from jobledger.services.control.metrics import job_metrics, resource_manager_metrics
from jobledger.services.host.metrics import flink_name
from jobledger.services.kafka import transactional_producer
from jobledger.services.local.broker import free_port

pytestmark = pytest.mark.broker

HEARTBEAT_TIMEOUT_S = 6
Samples = dict[tuple[str, frozenset], float]


def scrape(port: int) -> Samples:
    """Every sample of http://127.0.0.1:`port`/metrics, by name and labels."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def until(port: int, holds: Callable[[Samples], bool], what: str, limit_s: float) -> Samples:
    """The first scrape for which `holds` (a process just started may not serve yet)."""
    deadline = time.monotonic() + limit_s
    samples: Samples = {}
    while True:
        try:
            samples = scrape(port)
        except httpx.ConnectError:
            pass
        else:
            if holds(samples):
                return samples
        assert time.monotonic() < deadline, f"{what} not within {limit_s:.0f} s: {samples}"
        time.sleep(0.5)


@pytest.fixture
def running(cluster, tmp_path) -> Iterator[dict]:
    """`services run` and `runner` subprocesses with metrics on, on this test's topics."""
    ports = {"services": free_port(), "runner": free_port()}
    env = cluster.env(str(tmp_path / "home"))
    data = tmp_path / "data"
    data.mkdir()
    commands = {
        "services": ["services", "run", "-D", f"heartbeat.timeout={HEARTBEAT_TIMEOUT_S}s",
                     "--metrics-port", str(ports["services"])],
        "runner": ["runner", "--slots", "4", "--heartbeat-interval", "1", "--data-root",
                   str(data), "--checkpoint", str(tmp_path / "checkpoint"),
                   "--metrics-port", str(ports["runner"])],
    }  # fmt: skip
    started = {}
    for name, args in commands.items():
        log = open(tmp_path / f"{name}.log", "wb")  # noqa: SIM115 (the child keeps it)
        started[name] = subprocess.Popen([sys.executable, "-m", "jobledger.cli", *args],
                                         stdout=log, stderr=log, env=env)  # fmt: skip
    try:
        yield {"ports": ports, "processes": started, "data": data, "logs": tmp_path}
    finally:
        for process in started.values():
            if process.poll() is None:
                process.terminate()
        for process in started.values():
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()


def test_metrics_scraped_over_http_say_what_replay_says(cluster, running):
    ports, data = running["ports"], running["data"]
    services = until(
        ports["services"],
        lambda s: value(s, "flink_jobmanager_numRegisteredTaskManagers") == 1,
        "the runner registered",
        120,
    )
    assert value(services, "flink_jobmanager_taskSlotsTotal") == 4
    text = data / "words.txt"
    text.write_text("to be or not to be\n" * 200)
    job_id = f"wordcount-{uuid.uuid4().hex[:8]}"
    job = wordcount_job(job_id, text, data / "out", 2, fail_once=True)
    serde = EventSerde()
    submit(transactional_producer(cluster.bootstrap, "metrics-test"), cluster.prefix, job, serde)
    watcher = JobWatcher(cluster.bootstrap, cluster.prefix, serde=serde)
    try:
        end = watcher.wait(job_id, 180, lambda: None)
    finally:
        watcher.close()
    assert end.to_status.value == "FINISHED"
    labels = {"job_id": job_id, "job_name": job.job_name}

    # once everything is read, nothing lags; the job's numbers are the ones its end left
    services = until(ports["services"], lambda s: all(
        v == 0 for (name, _), v in s.items() if name == "jobledger_services_consumer_lag"),
        "lag back to 0", 60)  # fmt: skip
    assert value(services, "flink_jobmanager_job_finishedState", **labels) == 1
    assert value(services, "flink_jobmanager_job_runningState", **labels) == 0
    assert value(services, "flink_jobmanager_job_numRestarts_total", **labels) >= 1
    assert value(services, "flink_jobmanager_job_uptime", **labels) == -1  # ended, as Flink
    assert value(services, "jobledger_services_decisions_total", role="job") > 0
    assert value(services, "jobledger_services_commit_latency_seconds_count", role="job") > 0

    # ... and what replay derives from the log, at the same point, says the same
    driver = replay(read_events(cluster.bootstrap, cluster.prefix)).driver
    now = int(time.time() * 1000)
    derived = [*resource_manager_metrics(driver.resource_manager, now),
               *job_metrics(driver.job_masters[job_id], now)]  # fmt: skip
    timeless = [m for m in derived if m.name not in ("uptime", "downtime", "heartbeatAge")]
    assert len(timeless) > 10
    for metric in timeless:
        name = flink_name(metric) + ("_total" if metric.counter else "")
        assert value(services, name, **dict(metric.labels)) == metric.value, name

    runner = scrape(ports["runner"])
    assert value(runner, "jobledger_runner_micro_batch_seconds_count") > 0
    assert value(runner, "jobledger_runner_spark_job_seconds_count") >= 2  # a restart's too

    # a runner killed outright: lost within the heartbeat timeout (and the clock's tick)
    running["processes"]["runner"].send_signal(signal.SIGKILL)
    killed = time.monotonic()
    services = until(ports["services"], lambda s: value(
        s, "flink_jobmanager_numLostTaskManagers_total") == 1, "the runner lost",
        HEARTBEAT_TIMEOUT_S + 10)  # fmt: skip
    assert time.monotonic() - killed < HEARTBEAT_TIMEOUT_S + 10
    assert value(services, "flink_jobmanager_numRegisteredTaskManagers") == 0
    assert value(services, "flink_jobmanager_taskSlotsTotal") == 0


@contextmanager
def socket_bound() -> Iterator[int]:
    """A loopback port held open for the block."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield held.getsockname()[1]


def test_a_taken_metrics_port_is_one_line(cluster, tmp_path):
    with socket_bound() as port:
        done = subprocess.run(
            [sys.executable, "-m", "jobledger.cli", "services", "run", "--metrics-port",
             str(port)], env=cluster.env(str(tmp_path)), capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"jobledger: cannot serve metrics on 127.0.0.1:{port}: Address already in use"
    )
