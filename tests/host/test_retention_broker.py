"""Retention on a real broker: a broker of its own that deletes expired segments
every quarter second, topics in segments of 0.2 s, the services snapshotting every second.
One job runs; another closes and is archived, and its debugging answers are taken; a real
`jobledger runner` (one local core, one slot) starts and runs a subtask of a third job. Then a
retention of 3 s is set on the running cluster, and the broker deletes every record of the
jobs, and every record the runner's Spark checkpoint was made of, while the first job still
runs. The services and the runner are then killed (SIGKILL, the runner's JVM with it) and
started again (the records from then on kept, to verify them from the snapshots written before
the kill): the services rebuild from their snapshots alone and go on deciding exactly (the job
that outlived its records finishes, a new one runs on every slot); the runner, its checkpoint
kept, starts again over the cut log, registers anew and runs its subtask of the new job once,
and the task it ran before the kill never again; `replay --verify` is clean over what the
broker still holds plus the snapshots, and derives every decision since from the snapshots
written before the kill; and the deleted job's debugging answers from its archive are those
the broker gave before the deletion.

The other TaskExecutor is played by the test (its registration and its tasks' reports, as
`tests/support/jobs.py` answers deployments), so that the first job can run through the kill
(the real runner's tasks have nothing to run and finish at once); its slots are larger than the
runner's, and the first two jobs ask for such, so they run there whenever the runner registers.
The runner comes back whether Spark had committed its last micro-batch (it reads on from the
log's new start) or was killed while one ran (whose records are deleted: the checkpoint is
moved aside and it reads from the log's end, `services/runner/checkpoint.py`): which one
depends on when the kill comes, and both must hold. The second made every restart fail ("Offset
out of range") until the checkpoint was judged from where Spark reads again, not from its
latest offsets (`tests/runner/test_checkpoint.py` holds that case on its own).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobledger.cli.main import main
from jobledger.projections.log.live_log import latest_snapshot_data
from jobledger.projections.log.log_file import LOG_ROLES, LogRecord, processed_by_services
from jobledger.projections.log.replay import verify
from jobledger.projections.log.retained import resumed
from jobledger.schemas import Event, topic_name
from jobledger.schemas.cluster import TaskManagerRegistered, TaskManagerRegistrationAccepted
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
from jobledger.services.runner.checkpoint import latest_offsets

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
REAL = "real-0"
"""The TaskExecutor of the real runner (`jobledger runner --runner-id real`)."""
PLAYED = profile(2.0, 2048)
"""The played TaskExecutor's slots: more than the real runner's, so that a job asking for
them runs there whenever the real runner registered."""


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
            resource_profile=PLAYED,
        )])  # fmt: skip

    def submit(self, job_id: str, parallelism: int, played_only: bool = False) -> None:
        """Submit a job; `played_only`: its slots must be the played TaskExecutor's."""
        work = vertex("work", parallelism)
        if played_only:
            work = work.model_copy(update={"resource_profile": PLAYED})
        job = self.clock(
            JobSubmitted, job_id=job_id, job_name=job_id, vertices=[work],
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
        """Report the deployments to the played TaskExecutor; the real runner reports its own."""
        events: list[Event] = []
        for d in (d for d in deployments if d.resource_id == TM):
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


def real_runner(cluster: Cluster, home: Path) -> subprocess.Popen:
    """`jobledger runner` on one local core and one slot, its checkpoint under `home` (the same
    at every start), in a session of its own so that `kill_tree` takes its JVM too."""
    env = {**cluster.env(str(home)), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_LOCAL_DIRS": str(home / "spark")}  # fmt: skip
    with (home / f"runner-{time.monotonic_ns()}.log").open("w") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "jobledger.cli", "runner", "--runner-id", "real",
             "--master", "local[1]", "--slots", "1", "--checkpoint", str(home / "checkpoint")],
            env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip


def registered(cluster: Cluster, since_ms: int = 0) -> bool:
    """Whether the ResourceManager accepted a registration the real runner's TaskExecutor made
    at `since_ms` or later."""
    return any(isinstance(r.event, TaskManagerRegistrationAccepted)
               and r.event.resource_id == REAL and r.event.event_time >= since_ms
               for r in read(cluster))  # fmt: skip


def reports_of_real(records: list[LogRecord]) -> dict[str, list[ExecutionState]]:
    """Each attempt deployed to the real runner and the states reported for it, in order."""
    attempts: dict[str, list[ExecutionState]] = {
        r.event.execution_attempt_id: []
        for r in records
        if isinstance(r.event, TaskDeploymentRequested) and r.event.resource_id == REAL
    }
    for r in records:
        if (
            isinstance(r.event, TaskExecutionStateChanged)
            and r.event.execution_attempt_id in attempts
        ):
            attempts[r.event.execution_attempt_id].append(r.event.execution_state)
    return attempts


def checkpointed(home: Path) -> dict[str, int]:
    """The real runner's checkpoint: each partition's next offset of the TaskExecutor topic."""
    offsets = latest_offsets(home / "checkpoint")
    assert offsets is not None, "the real runner checkpointed no batch"
    (per_partition,) = offsets.values()
    return per_partition


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

    real = real_runner(cluster, tmp_path)  # its ~25 s start overlaps what follows
    services = service_process(cluster, home, "--snapshot-interval-s", "1")
    try:
        wait_until_owning(services)
        runner = Runner(cluster)
        runner.submit("outlives", 2, played_only=True)
        runner.submit("closes", 1, played_only=True)
        outlives = runner.deployments("outlives", 2)
        runner.report(outlives, ExecutionState.INITIALIZING, ExecutionState.RUNNING)
        runner.report(runner.deployments("closes", 1), ExecutionState.INITIALIZING,
                      ExecutionState.RUNNING, ExecutionState.FINISHED)  # fmt: skip
        until(lambda: finished(cluster, "closes"), "the job that closes finished", 30)

        status, out = run(capsys, "archive", "--to", ARCHIVE)
        assert status == 0 and out.startswith("closes\t"), out
        before = answers(capsys, "closes")
        until(lambda: registered(cluster), "the real runner registered", 90)
        # three subtasks on the three free slots: one runs on the real runner
        runner.submit("early", 3)
        runner.report(runner.deployments("early", 3), ExecutionState.INITIALIZING,
                      ExecutionState.RUNNING, ExecutionState.FINISHED)  # fmt: skip
        until(lambda: finished(cluster, "early"), "the job the real runner took part in", 30)
        (ran,) = [r for r in read(cluster) if isinstance(r.event, TaskDeploymentRequested)
                  and r.event.resource_id == REAL]  # fmt: skip
        first = {r.event.event_id for r in read(cluster) if r.role is TopicRole.JOB}
        # the retention set on the running cluster: every record older than it goes at once
        status, out = run(capsys, "topics", "create", "--partitions", "1", "--retention",
                          RETENTION, "--snapshot-interval-s", "1")  # fmt: skip
        assert status == 0 and out.count("exists") == len(TopicRole), out
        status, out = run(capsys, "services", "run", "--snapshot-interval-s", "2")
        assert status == 1 and "refused to start" in out and "4000 ms the snapshots" in out, out

        def deleted() -> bool:
            low, end = watermarks(cluster.bootstrap, topic_name(TopicRole.JOB, cluster.prefix))[0]
            te_low = watermarks(cluster.bootstrap, topic_name(ran.role, cluster.prefix))[0][0]
            return low == end and low > 0 and te_low > ran.offset

        until(deleted, "the broker deleted every record of the job topic and the real runner's", 30)
        # every record the real runner's checkpoint read is gone: it dies as its machine would
        killed_ms = int(time.time() * 1000)
        kill_tree(real.pid)
        real.wait(10)
        held_now = watermarks(cluster.bootstrap, topic_name(ran.role, cluster.prefix))
        assert all(o <= held_now[int(p)][0] for p, o in checkpointed(tmp_path).items())
        assert not first & {r.event.event_id for r in read(cluster)}, "the job's records are gone"
        covering = snapshots(cluster)
        status, out = run(capsys, "job", "show", "outlives", "-o", "json")
        assert status == 0 and json.loads(out)["state"] == "RUNNING", "from its snapshot"
        status, out = run(capsys, "history", "outlives")
        assert "retention deleted the oldest records of job/0 (before " in out, out
    finally:
        for process in (real, services):
            if process.poll() is None:
                kill_tree(process.pid)
                process.wait(10)

    # kept from now on: what follows is verified from the snapshots taken before the kill
    status, out = run(capsys, "topics", "create", "--partitions", "1", "--retention", "-1")
    assert status == 0 and out.count("exists") == len(TopicRole), out
    again = service_process(cluster, home, "--snapshot-interval-s", "1")
    real = real_runner(cluster, tmp_path)  # its checkpoint kept
    try:
        wait_until_owning(again)
        assert "from snapshot@" in open(again.log_path).read()  # noqa: SIM115
        runner.report(outlives, ExecutionState.FINISHED)
        until(lambda: finished(cluster, "outlives"), "the job that outlived its records", 30)
        until(lambda: registered(cluster, killed_ms), "the real runner registered again", 90)
        # five subtasks on every slot: one runs on the restarted real runner
        runner.submit("after", 5)
        runner.report(runner.deployments("after", 5), ExecutionState.INITIALIZING,
                      ExecutionState.RUNNING, ExecutionState.FINISHED)  # fmt: skip
        until(lambda: finished(cluster, "after"), "a job on the slots the others freed", 30)
    finally:
        for process in (real, again):
            process.send_signal(signal.SIGTERM)
            assert process.wait(30) == 0

    records: list[LogRecord] = read(cluster)
    assert not [r for r in records if isinstance(r.event, TaskExecutionStateChanged)
                and r.event.execution_attempt_id == ran.event.execution_attempt_id], (
        "the task the real runner ran before its kill ran again"
    )  # fmt: skip
    assert list(reports_of_real(records).values()) == [
        [ExecutionState.INITIALIZING, ExecutionState.RUNNING, ExecutionState.FINISHED]
    ], "the restarted runner ran its task of the next job once"
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
