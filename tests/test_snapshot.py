"""Snapshots: a real one round-trips; anything else is refused with a reason, and reading a
crafted one runs no code (issue: a pickle on the snapshot topic executed its `__reduce__`)."""

from __future__ import annotations

import os
import pickle

import pytest

from jobledger.schemas import EventSerde, topic_name
from jobledger.schemas.jobs import JobSubmitted
from jobledger.schemas.topics import TopicRole
from jobledger.services.kafka import (
    SERVICES_GROUP_PREFIX,
    committed_offsets,
    transactional_producer,
)
from jobledger.services.partitioning import partition_of
from jobledger.services.snapshot import (
    CHUNK_BYTES,
    MAGIC,
    VERSION,
    Snapshot,
    SnapshotAssembler,
    SnapshotRefused,
    chunk_records,
    decode,
    encode,
)

from .jobs import JobCluster, fails_first_attempt_of, fixed_delay, vertex
from .runtime_harness import RuntimeThread, wait_until_quiet


class _Marker:
    """Unpickling this creates a file: the proof that code ran."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


class _OpenFile:
    def __reduce__(self):
        return (open, ("/etc/passwd",))


def _header() -> bytes:
    return MAGIC + bytes([VERSION])


def test_a_real_snapshot_round_trips():
    cluster = JobCluster(task_executors=2, slots=4)
    cluster.submit([vertex("a", 2), vertex("b", 2, ("a", "ALL_TO_ALL", "BLOCKING"))],
                   restart=fixed_delay(2, 10))  # fmt: skip
    cluster.play(fails_first_attempt_of("b"))

    restored = decode(encode(Snapshot(cluster.driver, 42)))

    assert restored.next_offset == 42
    assert restored.driver.to_dict() == cluster.driver.to_dict()


def test_a_crafted_snapshot_runs_no_code(tmp_path):
    marker = tmp_path / "pwned"
    payload = _header() + pickle.dumps(_Marker(str(marker)))

    with pytest.raises(SnapshotRefused, match=r"names posix\.system, which is not a class"):
        decode(payload)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (pickle.dumps(_OpenFile()), r"names io\.open"),
        (pickle.dumps(print), "names builtins.print"),
        (pickle.dumps(os.path.join), "names posixpath.join"),
        (pickle.dumps(Snapshot), "holds a type, not a Snapshot"),
        (pickle.dumps({"not": "a snapshot"}), "holds a dict, not a Snapshot"),
        (b"\x80\x05garbage", "it is corrupt"),
    ],
    ids=["open", "builtin-function", "imported-function", "a-class-itself", "dict", "torn"],
)
def test_anything_but_a_snapshot_is_refused_with_its_reason(payload, reason):
    with pytest.raises(SnapshotRefused, match=reason):
        decode(_header() + payload)


def test_wrong_magic_or_version_is_refused_and_absence_is_none():
    assert decode(None) is None and decode(b"") is None
    with pytest.raises(SnapshotRefused, match="magic"):
        decode(b"PICKLE" + pickle.dumps(1))
    with pytest.raises(SnapshotRefused, match=f"version 1, this reads version {VERSION}"):
        decode(MAGIC + bytes([1]) + pickle.dumps(1))


@pytest.mark.parametrize("size", [0, 1, CHUNK_BYTES, CHUNK_BYTES * 3 + 17])
def test_chunks_reassemble_to_the_snapshot(size):
    data = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    assembler = SnapshotAssembler("job/0")
    records = chunk_records("job/0", 9, data)
    assert all(len(value) <= CHUNK_BYTES + 32 for _, value in records)
    for key, value in records:
        assembler.add(key, value)
    assert assembler.latest == data


def test_the_latest_complete_snapshot_wins_and_strangers_are_ignored():
    assembler = SnapshotAssembler("job/0")
    assembler.add(b"job/0", b"whole, as written before chunks")
    old = chunk_records("job/0", 5, b"o" * (CHUNK_BYTES + 1))
    new = chunk_records("job/0", 8, b"n" * (CHUNK_BYTES * 2))
    for key, value in [*old, *new[:1], *chunk_records("job/1", 9, b"other")]:
        assembler.add(key, value)
    assert assembler.latest == b"o" * (CHUNK_BYTES + 1), "a torn newer snapshot was taken"
    assembler.add(*new[1])
    assert assembler.latest == b"n" * (CHUNK_BYTES * 2)
    assembler.add(b"job/0#0", b"JLCHNK\x00")  # a forged, truncated chunk changes nothing
    assert assembler.latest == b"n" * (CHUNK_BYTES * 2)


@pytest.mark.broker
def test_a_state_larger_than_a_kafka_message_is_snapshotted_and_rebuilt(cluster):
    """The issue's reproduction: two JobSubmitted with 600 KB names made every snapshot fail
    with MSG_SIZE_TOO_LARGE, killing the service at once and after every restart."""
    serde = EventSerde()
    producer = transactional_producer(cluster.bootstrap, "big")
    producer.begin_transaction()
    topic = topic_name(TopicRole.JOB, cluster.prefix)
    jobs = ["job-1", "job-4"]  # one partition: murmur2 puts both on partition 2 of 3
    assert {partition_of(job, 3) for job in jobs} == {2}
    for job_id in jobs:
        job = JobSubmitted(event_id=f"big-{job_id}", event_time=1, producer="t", job_id=job_id,
                           job_name="x" * 600_000, vertices=[vertex("v", 1)])  # fmt: skip
        producer.produce(topic, key=job_id.encode(), value=serde.encode(job, topic))
    producer.commit_transaction(30)

    with RuntimeThread(cluster, snapshot_every=1) as first:
        wait_until_quiet(cluster)
        assert first.failure is None, first.failure
    with RuntimeThread(cluster, snapshot_every=1) as second:
        wait_until_quiet(cluster)
        workers = dict(second.workers)
        assert second.failure is None, second.failure

    # decided and committed: an oversized snapshot used to abort every transaction, and the
    # partition went back to its committed offset again and again
    committed = committed_offsets(cluster.bootstrap, SERVICES_GROUP_PREFIX + cluster.prefix,
                                  [topic])  # fmt: skip
    assert committed.get((topic, 2), 0) >= 2, committed
    job_worker = next(w for w in workers.values() if "job-1" in w.driver.job_masters)
    assert job_worker.rebuilt_from_snapshot_at is not None, "no snapshot was used"
    assert sorted(job_worker.driver.job_masters) == jobs
    assert {len(jm.job.job_name) for jm in job_worker.driver.job_masters.values()} == {600_000}
