"""Retention on a real broker (issue 47): a broker of its own that deletes expired segments
every quarter second, topics in segments of 0.2 s, the services snapshotting every second.
One job runs; another closes and is archived, and its debugging answers are taken; then a
retention of 3 s is set on the running cluster, and the broker deletes every record of both
while the first job still runs. The services are then killed (SIGKILL) and
started again (the records from then on kept, to verify them from the snapshots written before
the kill): they rebuild from their snapshots alone and go on deciding exactly (the job
that outlived its records finishes, a new one runs on the slots both freed); `replay
--verify` is clean over what the broker still holds plus the snapshots, and derives every
decision since from the snapshots written before the kill; and the deleted job's debugging
answers from its archive are those the broker gave before the deletion.

The runner is played by the test (a TaskExecutor's registration and its tasks' reports, as
`tests/support/jobs.py` answers deployments): a Spark runner takes ~25 s to start on two cores, and
its checkpoint's offsets past the log's start are handled apart (services/runner/checkpoint.py).
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections.abc import Iterator

import pytest

from jobledger.cli.main import main
from jobledger.projections.log.live_log import latest_snapshot_data
from jobledger.projections.log.log_file import LOG_ROLES, LogRecord, processed_by_services
from jobledger.projections.log.replay import verify
from jobledger.projections.log.retained import resumed
from jobledger.schemas import Event, topic_name
from jobledger.schemas.cluster import TaskManagerRegistered
from jobledger.schemas.jobs import JobStatusChanged, JobSubmitted
from jobledger.schemas.tasks import (
    TaskDeploymentRequested,
    TaskExecutionStateChanged,
    TaskFinalStateReported,
)
from jobledger.schemas.topics import TopicRole
from jobledger.schemas.types import ExecutionState, JobStatus, RestartStrategy
from jobledger.services.client.dispatcher import submission
from jobledger.services.kafka import read_committed_consumer
from jobledger.services.kafka_reads import READ_TO_END
from jobledger.services.kafka_topics import watermarks
from jobledger.services.local import apache_kafka, broker

from ..conftest import Cluster
from ..support.events import Clock, profile
from ..support.jobs import vertex
from ..support.processes import kill_tree
from ..support.runtime_harness import append, read, service_process, until, wait_until_owning
from .test_retention import without_point

pytestmark = pytest.mark.broker

RETENTION = "3s"
ARCHIVE = f"memory://retention-{uuid.uuid4().hex[:8]}"
TM = "tm-retained"


@pytest.fixture(scope="module")
def deleting_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A broker that looks for expired segments four times a second, from its start."""
    if not apache_kafka.available():
        pytest.skip("Apache Kafka is not installed (`make kafka`)")
    workdir = tmp_path_factory.mktemp("deleting-broker")
    port = broker.free_port()
    proc = apache_kafka.spawn(port, workdir / "data", workdir / "kafka.log", detach=False,
                              settings={"log.retention.check.interval.ms": "250",
                                        "log.initial.task.delay.ms": "0"})  # fmt: skip
    try:
        yield f"{broker.LOOPBACK}:{port}"
    finally:
        broker.stop_child(proc)


class Runner:
    """A TaskExecutor's runner as the log sees it: registered, and reporting its tasks."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.clock = Clock(start=int(time.time() * 1000))
        append(cluster, [self.clock(
            TaskManagerRegistered, resource_id=TM, address=f"{TM}:6122", number_of_slots=4,
            resource_profile=profile(1.0, 1024),
        )])  # fmt: skip

    def submit(self, job_id: str, parallelism: int) -> None:
        job = self.clock(
            JobSubmitted, job_id=job_id, job_name=job_id, vertices=[vertex("work", parallelism)],
            restart_strategy=RestartStrategy(),
        )  # fmt: skip
        append(self.cluster, submission(job, "test"))

    def deployments(self, job_id: str, count: int) -> list[TaskDeploymentRequested]:
        found: list[TaskDeploymentRequested] = []

        def deployed() -> bool:
            found[:] = [r.event for r in read(self.cluster)
                        if isinstance(r.event, TaskDeploymentRequested)
                        and r.event.job_id == job_id]  # fmt: skip
            return len(found) >= count

        until(deployed, f"{count} deployment(s) of {job_id}", 30)
        return found

    def report(self, deployments: list[TaskDeploymentRequested], *states: ExecutionState) -> None:
        events: list[Event] = []
        for d in deployments:
            for state in states:
                events.append(self.clock(
                    TaskExecutionStateChanged, job_id=d.job_id, job_master_id=d.job_master_id,
                    execution_attempt_id=d.execution_attempt_id, execution_state=state,
                ))  # fmt: skip
            if states[-1] is ExecutionState.FINISHED:
                events.append(self.clock(
                    TaskFinalStateReported, job_id=d.job_id, resource_id=d.resource_id,
                    execution_attempt_id=d.execution_attempt_id, execution_state=states[-1],
                ))  # fmt: skip
        append(self.cluster, events)


def finished(cluster: Cluster, job_id: str) -> bool:
    return any(isinstance(r.event, JobStatusChanged) and r.event.job_id == job_id
               and r.event.to_status is JobStatus.FINISHED for r in read(cluster))  # fmt: skip


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """`jobledger ARGV` in this process (a memory:// archive lives in it); its status, and
    what it printed (stdout, then stderr)."""
    capsys.readouterr()
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out + err


def answers(capsys: pytest.CaptureFixture[str], job_id: str, *source: str) -> list[object]:
    """The job's history, timeline, `job show` and a task's story, each as JSON without the
    point of the log it is as of (a story ends earlier than the whole log)."""
    made = []
    for argv in (["history", job_id], ["timeline", job_id], ["job", "show", job_id],
                 ["explain", f"{job_id}/work[0]"]):  # fmt: skip
        status, out = run(capsys, *argv, *source, "-o", "json")
        assert status == 0, (argv, out)
        made.append(without_point(json.loads(out)))
    return made


def held(cluster: Cluster) -> dict[tuple[TopicRole, int], int]:
    return {
        (role, partition): low
        for role in LOG_ROLES
        for partition, (low, _) in watermarks(
            cluster.bootstrap, topic_name(role, cluster.prefix)
        ).items()
    }  # fmt: skip


def snapshots(cluster: Cluster) -> dict[str, bytes]:
    consumer = read_committed_consumer(cluster.bootstrap, extra=READ_TO_END)
    try:
        return latest_snapshot_data(consumer, cluster.prefix)
    finally:
        consumer.close()


def test_the_broker_deletes_while_jobs_run_and_restarts_debugging_and_replay_stay_exact(
    deleting_broker, tmp_path, monkeypatch, capsys
):
    cluster = Cluster(deleting_broker, f"retained-{uuid.uuid4().hex[:8]}.")
    home = str(tmp_path)
    for key, value in cluster.env(home).items():
        if key.startswith("JOBLEDGER_"):
            monkeypatch.setenv(key, value)
    status, out = run(capsys, "topics", "create", "--partitions", "1", "--retention", "1500ms",
                      "--snapshot-interval-s", "1")  # fmt: skip
    assert status == 2 and "shorter than the 2000 ms the snapshots guarantee" in out, out
    status, _ = run(capsys, "topics", "create", "--partitions", "1", "-D", "segment.ms=200")
    assert status == 0

    services = service_process(cluster, home, "--snapshot-interval-s", "1")
    try:
        wait_until_owning(services)
        runner = Runner(cluster)
        runner.submit("outlives", 2)
        runner.submit("closes", 1)
        outlives = runner.deployments("outlives", 2)
        runner.report(outlives, ExecutionState.INITIALIZING, ExecutionState.RUNNING)
        runner.report(runner.deployments("closes", 1), ExecutionState.INITIALIZING,
                      ExecutionState.RUNNING, ExecutionState.FINISHED)  # fmt: skip
        until(lambda: finished(cluster, "closes"), "the job that closes finished", 30)

        status, out = run(capsys, "archive", "--to", ARCHIVE)
        assert status == 0 and out.startswith("closes\t"), out
        before = answers(capsys, "closes")
        first = {r.event.event_id for r in read(cluster) if r.role is TopicRole.JOB}
        # the retention set on the running cluster: every record older than it goes at once
        status, out = run(capsys, "topics", "create", "--partitions", "1", "--retention",
                          RETENTION, "--snapshot-interval-s", "1")  # fmt: skip
        assert status == 0 and out.count("exists") == len(TopicRole), out
        status, out = run(capsys, "services", "run", "--snapshot-interval-s", "2")
        assert status == 1 and "refused to start" in out and "4000 ms the snapshots" in out, out

        def deleted() -> bool:
            low, end = watermarks(cluster.bootstrap, topic_name(TopicRole.JOB, cluster.prefix))[0]
            return low == end and low > 0

        until(deleted, "the broker deleted every record of the job topic", 30)
        assert not first & {r.event.event_id for r in read(cluster)}, "the job's records are gone"
        covering = snapshots(cluster)
        status, out = run(capsys, "job", "show", "outlives", "-o", "json")
        assert status == 0 and json.loads(out)["state"] == "RUNNING", "from its snapshot"
        status, out = run(capsys, "history", "outlives")
        assert "retention deleted the oldest records of job/0 (before " in out, out
    finally:
        kill_tree(services.pid)
        services.wait(10)

    # kept from now on: what follows is verified from the snapshots taken before the kill
    status, out = run(capsys, "topics", "create", "--partitions", "1", "--retention", "-1")
    assert status == 0 and out.count("exists") == len(TopicRole), out
    again = service_process(cluster, home, "--snapshot-interval-s", "1")
    try:
        wait_until_owning(again)
        assert "from snapshot@" in open(again.log_path).read()  # noqa: SIM115
        runner.report(outlives, ExecutionState.FINISHED)
        until(lambda: finished(cluster, "outlives"), "the job that outlived its records", 30)
        runner.submit("after", 4)
        runner.report(runner.deployments("after", 4), ExecutionState.INITIALIZING,
                      ExecutionState.RUNNING, ExecutionState.FINISHED)  # fmt: skip
        until(lambda: finished(cluster, "after"), "a job on the slots the others freed", 30)
    finally:
        again.send_signal(signal.SIGTERM)
        assert again.wait(30) == 0

    records: list[LogRecord] = read(cluster)
    across = resumed(records, held(cluster), covering, cluster.prefix)
    assert across is not None and across.starts, "verified from the snapshots before the kill"
    pending = processed_by_services(cluster.bootstrap, cluster.prefix)
    matched, divergence = verify(records, processed=pending, resumed=across)
    assert divergence is None, divergence.describe()
    assert matched > 0

    status, out = run(capsys, "replay", "--verify")
    assert status == 0 and "no difference" in out, out
    status, out = run(capsys, "topics", "describe")
    assert status == 0 and "LOST" not in out and "\tforever\t" in out, out

    status, out = run(capsys, "archive", "list", "--to", ARCHIVE)
    assert out.split("\t")[0] == "closes"
    assert answers(capsys, "closes", "--archive", ARCHIVE) == before
    status, out = run(capsys, "replay", "--verify", "--archive", f"{ARCHIVE}/closes.avro")
    assert status == 0 and "no difference" in out, out
