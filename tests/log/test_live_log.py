"""Questions about the live broker log start from the services' snapshots
(projections/log/live_log.py): over a real broker, with the services writing snapshots as they
go, `job list`, `job show` and `kvstate lookup` answer exactly as the log replayed from offset
0 (`--no-snapshots`) does, and a snapshot that is refused or reflects more than its partition
holds costs a replay of that partition, never the answer."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from jobledger.projections.log.live_log import LiveRead, read_live
from jobledger.projections.rest.archived_execution_graph import ARCHIVED
from jobledger.schemas import EventSerde, topic_name
from jobledger.schemas.topics import TopicRole
from jobledger.services.control.driver import ReducerDriver
from jobledger.services.control.partitioning import partition_of
from jobledger.services.host import snapshot
from jobledger.services.kafka import read_committed_consumer

from ..cli.test_job_commands import AWAITED_ONLY, EXAMPLE, TaskRunnerStandIn, jobledger
from ..support.runtime_harness import RuntimeThread

QUESTIONS = (
    ("job", "list", "-o", "json"),
    ("job", "show", "numbers-1", "-o", "json"),
    ("job", "show", "numbers-2", "-o", "json"),
    ("kvstate", "lookup", "numbers-1", "counts", "7", "--json-key", "-o", "json"),
)


def live(cluster) -> LiveRead:
    consumer = read_committed_consumer(cluster.bootstrap)
    try:
        return read_live(consumer, cluster.prefix, EventSerde(), ARCHIVED, ReducerDriver)
    finally:
        consumer.close()


def answers(cluster, capsys, *extra: str) -> list[tuple[int, str, str]]:
    return [jobledger(cluster, capsys, *question, *extra) for question in QUESTIONS]


def job_partition(cluster, job: str) -> str:
    return f"job/{partition_of(job, 3)}"


@pytest.fixture
def two_jobs_run(cluster, capsys):
    """Two word counts run to their end by services snapshotting every few inputs."""
    with (
        RuntimeThread(cluster, snapshot_every=3, **AWAITED_ONLY),
        TaskRunnerStandIn(cluster, finish=True),
    ):
        for job in ("numbers-1", "numbers-2"):
            status, _, err = jobledger(cluster, capsys, "job", "submit", str(EXAMPLE),
                                       "--job-id", job)  # fmt: skip
            assert status == 0, err
            status, out, _ = jobledger(cluster, capsys, "job", "wait", job, "--timeout", "60")
            assert (status, out.split(" at ")[0]) == (0, f"job {job} FINISHED")
    return cluster


@pytest.mark.broker
def test_answers_from_snapshots_are_those_of_the_log_replayed(two_jobs_run, capsys):
    cluster = two_jobs_run
    read = live(cluster)
    assert read.from_snapshots.get(job_partition(cluster, "numbers-1"), 0) > 0
    assert read.from_snapshots.get("resourcemanager/0", 0) > 0
    replayed = answers(cluster, capsys, "--no-snapshots")
    assert [status for status, _, _ in replayed] == [0, 0, 0, 0]
    assert answers(cluster, capsys) == replayed


def _append_snapshot(cluster, role: TopicRole, partition: int, data: bytes, at: int) -> None:
    owner = f"{topic_name(role, cluster.prefix)}/{partition}"
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    for key, value in snapshot.chunk_records(owner, at, data):
        producer.produce(topic_name(TopicRole.SNAPSHOT, cluster.prefix), key=key, value=value,
                         partition=partition % 3)  # fmt: skip
    assert producer.flush(10) == 0


@pytest.mark.broker
def test_a_refused_or_stale_snapshot_costs_a_replay_of_its_partition_not_the_answer(
    two_jobs_run, capsys
):
    cluster = two_jobs_run
    replayed = answers(cluster, capsys, "--no-snapshots")
    before = live(cluster)
    job = job_partition(cluster, "numbers-1")
    partition = int(job.split("/")[1])
    end = int(before.cut.offsets[job]) + 1
    # newer than the services' last one: a torn body, then a state past the partition's end
    _append_snapshot(cluster, TopicRole.JOB, partition, b"JLSNAP\x05torn", 10**9)
    assert job not in live(cluster).from_snapshots
    assert answers(cluster, capsys) == replayed
    ahead = snapshot.encode(snapshot.Snapshot(ReducerDriver(), end + 5))
    _append_snapshot(cluster, TopicRole.JOB, partition, ahead, 10**9 + 1)
    after = live(cluster)
    assert job not in after.from_snapshots
    assert {p: o for p, o in after.from_snapshots.items() if p != job} == {
        p: o for p, o in before.from_snapshots.items() if p != job
    }
    assert answers(cluster, capsys) == replayed
