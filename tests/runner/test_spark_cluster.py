"""The runner on a Spark standalone cluster (a master and two one-core workers started from
PySpark's own jars): the word-count demo end to end, clean and with a restart, reading Kafka
through Spark's native connector; the runner's query reading committed records only, from
where it started, with either Kafka format; and a session that cannot work on the cluster
failing with the reason instead of hanging.

Every Spark driver here runs in a process of its own: a process holds one SparkContext, and
this test session may already hold a local one.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobledger.projections.log.log_file import read_events
from jobledger.schemas.tasks import TaskDeploymentRequested
from jobledger.services.kafka import transactional_producer
from jobledger.services.local.broker import LOOPBACK
from jobledger.services.local.loopback import pid_alive

pytest.importorskip("pyspark")

from pyspark.sql import DataFrame

from jobledger.services.local import spark_standalone

from ..conftest import Cluster
from ..support.spark_cluster import StandaloneCluster, children, standalone_cluster
from .test_kafka_source import new_topic
from .test_runner import counted, plain_count, text  # noqa: F401  (text: a fixture)

pytestmark = pytest.mark.broker

ROOT = Path(__file__).resolve().parents[2]
RUNNER_APP = "jobledger-runner"


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    with standalone_cluster(tmp_path_factory.mktemp("spark-cluster")) as cluster:
        yield cluster


def in_own_process(function: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`function` of this module called with `args` in a Python process of its own."""
    call = (
        f"import sys; from tests.runner.test_spark_cluster import {function}; "
        f"{function}(*sys.argv[1:])"
    )
    return subprocess.run(
        [sys.executable, "-c", call, *args], cwd=ROOT,
        env={**os.environ, "SPARK_LOCAL_IP": LOOPBACK}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def runner_apps(spark_cluster: StandaloneCluster) -> set[str]:
    """Ids of the runner's applications the master has seen, running or finished."""
    state = spark_cluster.state()
    apps = state["activeapps"] + state["completedapps"]
    return {app["id"] for app in apps if app["name"] == RUNNER_APP}


@pytest.mark.parametrize("fail_once", [False, True], ids=["clean", "fail-once"])
def test_the_wordcount_demo_runs_on_a_standalone_cluster(
    spark_cluster: StandaloneCluster,
    cluster: Cluster,
    text: Path,  # noqa: F811
    tmp_path: Path,
    fail_once: bool,
) -> None:
    before = runner_apps(spark_cluster)
    done = subprocess.run(
        [sys.executable, "-m", "jobledger.cli", "demo", "wordcount", str(text),
         "--master", spark_cluster.master_url, "--timeout", "240",
         *(["--fail-once"] if fail_once else [])],
        env=cluster.env(str(tmp_path)), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    printed = done.stdout
    assert done.returncode == 0, f"{printed}\n--- stderr (end) ---\n{done.stderr[-4000:]}"
    # quiet: Spark's Kafka connector comes without Ivy's report, and nothing ends in a trace
    # (the connector resolved once, `connector.py`; Python workers stopped with their tasks)
    said = done.stderr
    assert ":: resolving dependencies ::" not in said and " in central" not in said, said[-4000:]
    assert "Traceback" not in said and "BrokenPipeError" not in said, said[-4000:]
    assert f"Spark {spark_cluster.master_url}, Kafka read through the 'kafka' format" in printed
    assert len(runner_apps(spark_cluster) - before) == 1, "the runner did not run on the cluster"
    assert counted(tmp_path / "demo") == plain_count(text)
    assert "counts equal a plain Python count" in printed
    if fail_once:
        assert re.search(r"count\[\d\]#0 on .*FAILED", printed), printed
        assert re.search(r"count\[\d\]#1 on .*FINISHED", printed), printed
    else:
        timeline = [
            line for line in printed.splitlines() if re.match(r"\s+\w+\[\d+\]#\d+ on ", line)
        ]
        assert len(timeline) == 8, printed
        assert all(re.search(r"-> FINISHED@[\d.]+s$", line) for line in timeline), printed


@pytest.mark.parametrize(
    ("where", "expected_format"), [("cluster", "kafka"), ("local", "jobledger-kafka")]
)
def test_the_runner_query_reads_committed_records_from_where_it_started(
    request: pytest.FixtureRequest,
    cluster: Cluster,
    tmp_path: Path,
    where: str,
    expected_format: str,
) -> None:
    """The runner's source options (`startingOffsets=latest`, `kafka.isolation.level=
    read_committed`) mean the same through Spark's native connector on the cluster as through
    jobledger's Python source locally: nothing from before the start, nothing past a
    transaction still open, never an aborted record."""
    if where == "cluster":
        master = request.getfixturevalue("spark_cluster").master_url
    else:
        master = "local[1]"
    topic = new_topic(cluster, "probe", partitions=1)
    done = in_own_process("probe", master, cluster.bootstrap, topic, str(tmp_path / "ckpt"))
    assert done.returncode == 0, done.stderr[-4000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["format"] == expected_format
    assert seen["held_back"] == [], "read past a transaction still open"
    assert seen["read"] == ["pending", "committed 1", "committed 2"]


@pytest.mark.parametrize(
    ("conf", "error"),
    [
        ({"spark.jars.packages": "org.apache.spark:spark-sql-kafka-0-10_2.13:0.0.0"},
         "Ivy could not resolve spark.jars.packages=org.apache.spark:spark-sql-kafka-0-10_2.13"),
        ({"spark.executor.memory": "64g"}, "no executor registered from spark://"),
    ],
    ids=["connector-not-served", "no-room-for-an-executor"],
)  # fmt: skip
def test_a_cluster_session_that_cannot_work_fails_with_the_reason(
    spark_cluster: StandaloneCluster, conf: dict[str, str], error: str
) -> None:
    started = time.monotonic()
    done = in_own_process("start_session", spark_cluster.master_url, json.dumps(conf))
    assert done.returncode != 0
    assert error in done.stderr, done.stderr[-4000:]
    assert time.monotonic() - started < 120


def start_session(master: str, conf: str) -> None:
    from jobledger.services.runner import session

    session.EXECUTOR_WAIT_S = 15  # this test's patience, not the runner's
    session.spark_session(master, conf=json.loads(conf))


def _write(bootstrap: str, topic: str, value: str, commit: bool) -> None:
    producer = transactional_producer(bootstrap, "probe")
    producer.begin_transaction()
    producer.produce(topic, value=value.encode())
    producer.flush(30)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def probe(master: str, bootstrap: str, topic: str, checkpoint: str) -> None:
    """The runner's query over `topic` (in a process of its own, see the module's doc),
    reading around a transaction left open; prints what it read as one JSON line."""
    from jobledger.services.runner.kafka_source import register
    from jobledger.services.runner.session import spark_session

    _write(bootstrap, topic, "before the start", commit=True)
    spark = spark_session(master, "jobledger-probe")
    seen: list[str] = []

    def collect(batch: DataFrame, _batch_id: int) -> None:
        seen.extend(bytes(row.value).decode() for row in batch.collect())

    format_ = register(spark)
    query = (
        spark.readStream.format(format_)
        .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
        .option("startingOffsets", "latest").option("kafka.isolation.level", "read_committed")
        .load().select("value").writeStream.foreachBatch(collect)
        .option("checkpointLocation", checkpoint).trigger(processingTime="100 milliseconds")
        .start()
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while query.lastProgress is None:  # as the runner: `latest` is fixed by the first batch
        assert time.monotonic() < deadline, f"the query did not start: {query.exception()}"
        time.sleep(0.1)
    pending = transactional_producer(bootstrap, "probe-open")
    pending.begin_transaction()
    pending.produce(topic, value=b"pending")
    pending.flush(30)
    _write(bootstrap, topic, "committed 1", commit=True)
    _write(bootstrap, topic, "aborted", commit=False)
    _write(bootstrap, topic, "committed 2", commit=True)
    time.sleep(2)
    query.processAllAvailable()
    held_back = list(seen)
    pending.commit_transaction(30)
    deadline = time.monotonic() + 120
    while len(seen) < 3 and time.monotonic() < deadline:
        query.processAllAvailable()
        time.sleep(0.2)
    query.stop()
    spark.stop()
    print(json.dumps({"format": format_, "held_back": held_back, "read": seen}))


def test_a_worker_killed_with_its_executor_mid_job_loses_no_count(
    cluster: Cluster,
    text: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """kill -9 of a Spark worker and its executor as the count tasks are deployed: Spark runs
    their tasks again on the other worker (the start gate lets a retried attempt start again,
    and leasing the retry its transactional id fences the id the dead one wrote under), and
    the job finishes with exact counts."""
    with standalone_cluster(tmp_path / "spark") as spark:
        run = subprocess.Popen(
            [sys.executable, "-m", "jobledger.cli", "demo", "wordcount", str(text),
             "--master", spark.master_url, "--timeout", "240"],
            env={**cluster.env(str(tmp_path)), "PYTHONUNBUFFERED": "1"},
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        try:
            first = run.stdout.readline()
            prefix = re.search(r"topics (\S+)\* on ", first)[1]
            deadline = time.monotonic() + 240
            while not any(
                isinstance(r.event, TaskDeploymentRequested) and r.event.vertex_id == "count"
                for r in events_so_far(cluster.bootstrap, prefix)
            ):
                assert run.poll() is None and time.monotonic() < deadline, "no count deployed"
                time.sleep(0.1)
            worker = spark.worker_pids[0]
            executors = children(worker)
            for pid in [worker, *executors]:
                os.kill(pid, signal.SIGKILL)
            printed = first + run.communicate(timeout=400)[0]
        finally:
            if run.poll() is None:
                run.kill()
    assert executors, "the killed worker ran no executor: the test tested nothing"
    assert run.returncode == 0, printed
    assert counted(tmp_path / "demo") == plain_count(text)


def events_so_far(bootstrap: str, prefix: str) -> list:
    """The demo's log as it is now; empty while the demo has not created its topics yet."""
    try:
        return read_events(bootstrap, prefix)
    except LookupError:
        return []


def test_a_master_ui_bound_but_not_serving_yet_counts_as_not_up(tmp_path):
    """Right after Jetty binds, the master's /json/ has answered 200 with an empty body: the
    wait for workers must take that for "not up yet", not fail the whole cluster fixture."""
    answers = iter([b"", b"<html>starting</html>", json.dumps({"aliveworkers": 2}).encode()])

    class MasterUI(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = next(answers, json.dumps({"aliveworkers": 2}).encode())
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer((LOOPBACK, 0), MasterUI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        cluster = StandaloneCluster("spark://unused", f"http://{LOOPBACK}:{server.server_port}",
                                    str(tmp_path), master_pid=0)  # fmt: skip
        alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            spark_standalone._await_workers(cluster, [alive], workers=2, timeout_s=20)
        finally:
            alive.kill()
            alive.wait()
    finally:
        server.shutdown()
    assert next(answers, None) is None, "the wait read past the two answers that were not JSON"


def test_cluster_start_status_stop_a_standalone_cluster_from_the_command_line(tmp_path):
    """`jobledger cluster start` leaves a master and its workers running for `runner --master
    spark://...`; `status` finds them, a second start is refused, `stop` ends every daemon."""
    env = {**os.environ, "JOBLEDGER_HOME": str(tmp_path)}

    def cluster(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "jobledger.cli", "cluster", *args],
                              env=env, capture_output=True, text=True, timeout=180)  # fmt: skip

    started = cluster("start", "--workers", "1")
    assert started.returncode == 0, started.stderr
    master = re.match(r"Spark standalone master (spark://127\.0\.0\.1:\d+) ", started.stdout)[1]
    fields = json.loads((tmp_path / "spark-cluster.json").read_text())
    recorded = spark_standalone.StandaloneCluster(
        **{**fields, "worker_pids": tuple(fields["worker_pids"])}
    )
    try:
        assert "1 of 1 worker(s) ALIVE" in started.stdout
        assert f"jobledger runner --master {master}" in started.stderr
        assert cluster("status").stdout == started.stdout
        again = cluster("start")
        assert again.returncode == 1 and "already; `jobledger cluster stop` first" in again.stderr
        assert cluster("stop").stdout == f"stopped {master}\n"
    finally:
        spark_standalone.stop_daemons(recorded)
    status = cluster("status")
    assert (status.returncode, status.stdout) == (1, "not running\n")
    assert not any(pid_alive(pid) for pid in (recorded.master_pid, *recorded.worker_pids))
