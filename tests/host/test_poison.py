"""Poisoned inputs: an input whose processing raises (in a reducer, in encoding its
decisions, in the snapshot after it) is dead-lettered with the exception in one line, and its
partition goes on with the state it would have had without it; a record larger than an event
may be is dead-lettered before it is decoded; a dead letter always fits its topic; an input
whose transaction the broker refuses for what it holds is dead-lettered, not retried for ever.
Through the real services on Apache Kafka, and replay and rebuild in one process."""

from __future__ import annotations

import hashlib
import os

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from jobledger.projections.log.replay import replay, verify
from jobledger.schemas import Event, EventSerde, topic_name
from jobledger.schemas.deadletters import DeadLettered
from jobledger.schemas.jobs import JobMasterLeadershipGranted, JobSubmitted
from jobledger.schemas.model import MAX_EVENT_BYTES
from jobledger.schemas.topics import TopicRole
from jobledger.services.control.driver import ReducerDriver
from jobledger.services.control.job_master import JobMaster
from jobledger.services.control.partitioning import partition_of
from jobledger.services.host.poison import REASON_CHARS, dead_letter, exception_line
from jobledger.services.host.rebuild import Rebuilder, Tail
from jobledger.services.kafka import PARTITIONER, read_committed_consumer
from jobledger.services.kafka_reads import read_topic

from ..support import scenario
from ..support.events import Clock
from ..support.golden_logs import as_log
from ..support.jobs import vertex
from ..support.runtime_harness import RuntimeThread, append, wait_until_decided

SERDE = EventSerde()
PILLS = {"job-p": "pill-raise", "job-q": "pill-encode", "job-s": "pill-snapshot"}
"""Jobs whose leadership grant poisons its reducer, and how: each on job partition 0 of 3,
with job-b of the scenario."""


@pytest.fixture
def poisoned_reducer(monkeypatch):
    """A JobMaster that raises on `pill-raise` after changing its state, derives an event no
    Avro long holds on `pill-encode`, and keeps such a value in its state (so the snapshot
    after it raises) on `pill-snapshot`."""
    apply = JobMaster.apply

    def poisoned(self: JobMaster, event: Event, incarnation: int = 0) -> list[Event]:
        if event.event_id == "pill-raise":
            self.global_aggregates["half-applied"] = 1
            raise RuntimeError("a reducer's bug\nits state: " + "slot " * 10_000)
        decisions = apply(self, event, incarnation)
        if event.event_id == "pill-encode":
            unencodable = event.model_copy(update={
                "event_id": "unencodable", "event_time": 2**64, "producer": "jobmaster",
                "cause_event_id": event.event_id,
            })  # fmt: skip
            return [*decisions, unencodable]
        if event.event_id == "pill-snapshot":
            self.global_aggregates["beyond-a-long"] = 2**64
        return decisions

    monkeypatch.setattr(JobMaster, "apply", poisoned)


def pills(clock: Clock) -> list[Event]:
    events = [
        clock(JobMasterLeadershipGranted, job_id=job, job_master_id=f"jm-{job}") for job in PILLS
    ]
    return [e.model_copy(update={"event_id": PILLS[e.job_id]}) for e in events]


def dead_letters(cluster) -> list[DeadLettered]:
    consumer = read_committed_consumer(cluster.bootstrap)
    topic = topic_name(TopicRole.DEAD_LETTER, cluster.prefix)
    try:
        return [SERDE.decode(m.value(), topic) for m in read_topic(consumer, topic, True, True)]
    finally:
        consumer.close()


def job_states(workers) -> dict[str, dict]:
    return {j: s for w in workers.values() for j, s in w.driver.to_dict()["job_masters"].items()}


@pytest.mark.broker
def test_an_input_whose_processing_raises_is_dead_lettered_and_its_partition_goes_on(
    cluster, poisoned_reducer
):
    assert {partition_of(job, 3) for job in [*PILLS, "job-b"]} == {0}
    clock = Clock()
    inputs = scenario.start_cluster(clock)
    at = len(scenario.TASK_EXECUTORS) + 2  # among job-a's, before job-b's and job-c's
    append(cluster, inputs[:at] + pills(clock) + inputs[at:])
    with RuntimeThread(cluster, snapshot_every=5) as first:
        records = wait_until_decided(cluster)
        assert first.failure is None, first.failure
        live = job_states(first.workers)
    letters = {d.source_offset: d for d in dead_letters(cluster)}
    pill_offsets = {
        r.event.event_id: r.offset for r in records if r.event.event_id in PILLS.values()
    }
    assert sorted(letters) == sorted(pill_offsets.values())
    reasons = {pill: letters[offset].reason for pill, offset in pill_offsets.items()}
    assert reasons["pill-raise"].startswith(
        "processing it raised RuntimeError: a reducer's bug its state: slot slot"
    )
    assert reasons["pill-encode"].startswith("processing it raised OverflowError: ")
    assert reasons["pill-snapshot"].startswith("the snapshot after it raised OverflowError: ")
    assert all("\n" not in r and len(r) <= REASON_CHARS for r in reasons.values()), reasons
    assert all(d.original_value is not None for d in letters.values())

    # every job but the pills' was decided, on their partition as on the others
    assert sorted(live) == ["job-a", "job-b", "job-c"]
    assert live["job-b"]["slot_pool"]["allocated_slots"], "job-b's requests were not decided"
    assert "half-applied" not in str(live)
    _, divergence = verify(records)
    assert divergence is None, divergence.describe()
    assert live == replay(records).driver.to_dict()["job_masters"]

    with RuntimeThread(cluster, snapshot_every=5) as second:  # a new owner: snapshot + tail
        wait_until_decided(cluster)
        rebuilt = job_states(second.workers)
        assert any(w.rebuilt_from_snapshot_at for w in second.workers.values())
    assert rebuilt == live


def test_replay_and_verify_leave_out_an_input_that_raises_as_if_never_read(poisoned_reducer):
    """No dead letter names the input (the services never reached it): replay reduces its
    partition again without it, so nothing it applied before raising stays."""
    events = ReducerDriver().run(scenario.start_cluster(Clock()))
    [pill] = [e for e in pills(Clock(5_000)) if e.event_id == "pill-raise"]
    clean = as_log(events)
    poisoned = as_log([*events[:30], pill, *events[30:]])
    at = next(r for r in poisoned if r.event is pill)

    result = replay(poisoned)
    raised = RuntimeError("a reducer's bug\nits state: " + "slot " * 10_000)
    assert result.raised == [f"job/{at.partition}@{at.offset}: {exception_line(raised)}"]
    assert result.driver.to_dict() == replay(clean).driver.to_dict()
    assert verify(poisoned) == verify(clean)
    assert verify(clean)[0] > 0


class Read:
    """A record as a rebuild reads it."""

    def __init__(self, offset: int, event: Event) -> None:
        self._offset, self.event = offset, event

    def offset(self) -> int:
        return self._offset


def test_a_rebuild_leaves_out_an_input_that_raises_as_if_never_read(poisoned_reducer):
    inputs = scenario.start_cluster(Clock())
    [pill] = [e for e in pills(Clock(5_000)) if e.event_id == "pill-raise"]
    rebuilder = Rebuilder(
        "", "", "", {}, ReducerDriver, lambda record, _driver: (record.event, None),
        lambda _topic: 1, lambda: True, 1.0,
    )  # fmt: skip

    def rebuilt(events: list[Event]) -> dict:
        records = [Read(offset, event) for offset, event in enumerate(events)]
        tail = Tail(ReducerDriver(), 0, len(records), records, ReducerDriver)
        return rebuilder.reduce_tail(("job", 0), tail).to_dict()

    assert rebuilt([*inputs[:10], pill, *inputs[10:]]) == rebuilt(inputs)


def test_a_dead_letter_carries_the_digest_of_a_value_too_large_to_carry():
    class Msg:
        def __init__(self, key: bytes, value: bytes) -> None:
            self._key, self._value = key, value

        def key(self) -> bytes:
            return self._key

        def value(self) -> bytes:
            return self._value

        def topic(self) -> str:
            return "t.job"

        def partition(self) -> int:
            return 1

        def offset(self) -> int:
            return 7

        def timestamp(self) -> tuple[int, int]:
            return 0, 5

    fits = b"x" * (MAX_EVENT_BYTES - len(b"job-b"))  # key and value: as large as an event
    small = dead_letter(Msg(b"job-b", fits), "why")
    assert (small.original_value, small.original_value_sha256) == (fits, None)
    big_value = os.urandom(MAX_EVENT_BYTES)
    big = dead_letter(Msg(b"job-b", big_value), "a\nb " + "c" * 1000)
    assert big.original_key == b"job-b" and big.original_value is None
    assert big.original_value_sha256 == hashlib.sha256(big_value).hexdigest()
    assert big.reason.startswith("a b ccc") and len(big.reason) == REASON_CHARS
    assert len(SERDE.encode(big, "t.deadletter")) < 1000
    bare = dead_letter(Msg(b"job-b", b"v"), "refused", with_bytes=False)
    assert (bare.original_key, bare.original_value) == (None, None)
    assert bare.original_value_sha256 == hashlib.sha256(b"v").hexdigest()


def write_raw(cluster, *records: tuple[bytes, bytes]) -> list[tuple[int, int]]:
    """Write records to the job topic as a raw Kafka client; where each went, in the order
    given. Idempotent, so that a retried request cannot land a record after the one written
    next (a 1 MB record's request once did, and the records' offsets came out swapped)."""
    delivered: dict[int, tuple[int, int]] = {}
    producer = Producer({
        "bootstrap.servers": cluster.bootstrap, "message.max.bytes": 1_040_000,
        "partitioner": PARTITIONER, "enable.idempotence": True,
    })  # fmt: skip
    topic = topic_name(TopicRole.JOB, cluster.prefix)
    for i, (key, value) in enumerate(records):
        producer.produce(topic, key=key, value=value,
                         on_delivery=lambda err, msg, i=i: delivered.__setitem__(
                             i, (msg.partition(), msg.offset())))  # fmt: skip
    assert producer.flush(30) == 0
    return [delivered[i] for i in range(len(records))]


@pytest.mark.broker
def test_records_larger_than_an_event_are_dead_lettered_by_digest_and_the_partition_goes_on(
    cluster,
):
    """The issue's reproduction: a 1,000,000-byte record on the job topic (within the broker's
    limit, but its dead letter with the bytes is not) stalled its partition for good, and raw
    JobSubmitted of 614 KB were reduced as if valid."""
    garbage = os.urandom(1_000_000)
    topic = topic_name(TopicRole.JOB, cluster.prefix)
    oversized = JobSubmitted(event_id="oversized", event_time=1, producer="t", job_id="job-p",
                             job_name="x" * 614_000, vertices=[vertex("v", 1)])  # fmt: skip
    encoded = SERDE.encode(oversized, topic)
    assert write_raw(cluster, (b"job-b", garbage), (b"job-p", encoded)) == [(0, 0), (0, 1)]
    append(cluster, scenario.start_cluster(Clock()))
    with RuntimeThread(cluster) as runtime:
        records = wait_until_decided(cluster)
        assert runtime.failure is None, runtime.failure
        live = job_states(runtime.workers)
    letters = sorted(dead_letters(cluster), key=lambda d: d.source_offset)
    assert [(d.source_partition, d.source_offset) for d in letters] == [(0, 0), (0, 1)]
    assert [d.original_value_sha256 for d in letters] == [
        hashlib.sha256(garbage).hexdigest(), hashlib.sha256(encoded).hexdigest(),
    ]  # fmt: skip
    assert [d.original_value for d in letters] == [None, None]
    assert [d.reason for d in letters] == [
        f"{len(garbage)} bytes, more than the {MAX_EVENT_BYTES} an event may be",
        f"{len(encoded)} bytes, more than the {MAX_EVENT_BYTES} an event may be",
    ]
    assert sorted(live) == ["job-a", "job-b", "job-c"]
    assert live["job-b"]["slot_pool"]["allocated_slots"], "job-b's requests were not decided"
    _, divergence = verify(records)
    assert divergence is None, divergence.describe()
    assert live == replay(records).driver.to_dict()["job_masters"]


@pytest.mark.broker
def test_an_input_whose_transaction_is_refused_for_what_it_holds_is_dead_lettered(cluster):
    """The dead-letter topic holds records of 20,000 bytes at most: the dead letter of a
    100,000-byte record with its bytes is refused by the broker every time. The batch is
    committed again one input per transaction, and the record refused alone is dead-lettered
    without its bytes; the inputs around it are decided."""
    dead_topic = topic_name(TopicRole.DEAD_LETTER, cluster.prefix)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    limit = ConfigEntry("max.message.bytes", "20000",
                        incremental_operation=AlterConfigOpType.SET)  # fmt: skip
    resource = ConfigResource("topic", dead_topic, incremental_configs=[limit])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    garbage = os.urandom(100_000)
    clock = Clock()
    inputs = scenario.start_cluster(clock)
    append(cluster, inputs[:6])
    [(partition, offset)] = write_raw(cluster, (b"job-b", garbage))
    append(cluster, inputs[6:])
    with RuntimeThread(cluster) as runtime:
        records = wait_until_decided(cluster)
        assert runtime.failure is None, runtime.failure
        live = job_states(runtime.workers)
    [letter] = dead_letters(cluster)
    assert (letter.source_partition, letter.source_offset) == (partition, offset)
    assert (letter.original_key, letter.original_value) == (None, None)
    assert letter.original_value_sha256 == hashlib.sha256(garbage).hexdigest()
    assert letter.reason == "the broker refused its transaction: MSG_SIZE_TOO_LARGE"
    assert sorted(live) == ["job-a", "job-b", "job-c"]
    assert live["job-b"]["slot_pool"]["allocated_slots"], "job-b's requests were not decided"
    _, divergence = verify(records)
    assert divergence is None, divergence.describe()
    assert live == replay(records).driver.to_dict()["job_masters"]
