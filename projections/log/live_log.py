"""Questions about the live broker log, answered from the services' snapshots.

Replaying a broker log from offset 0 for every question made each one slower every day (28 s
for `job list` on a million records, two thirds of it decoding and reducing records whose
effect the services had long since written down). Here the reducers' state is each input
partition's latest snapshot (the services write one with their committed offsets, in one
transaction: services/host/transaction_loop.py) and only the records after it, reduced as
replay does; and
of the rest of the log a question decodes only the event types it reads (the type is in each
record's header, so the other records are counted, never decoded).

The snapshot holds the state under the services' own configuration, so the answer is what the
services decided; a question given `-D` options replays the log from the beginning instead.
A partition whose snapshot is refused, missing or past the partition's end is replayed from
its beginning: a bad snapshot costs time, never the answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from confluent_kafka import Consumer, Message, TopicPartition

from jobledger.schemas import DecodeError, Event, EventSerde, roles_by_topic, topic_name
from jobledger.schemas.topics import INPUT_ROLES, TopicRole
from jobledger.services.control.driver import PartitionedDriver, ReducerDriver
from jobledger.services.host import snapshot
from jobledger.services.host.gc_policy import bulk_replay
from jobledger.services.kafka_reads import read_topics
from jobledger.services.kafka_topics import partitions_of

from .log_file import LOG_ROLES, LogRecord, SkippedRecord
from .positions import Cut, log_order
from .provenance import provenance_of
from .replay import dead_lettered

Watch = Callable[[Iterable[Message], str], Iterable[Message]]


@dataclass
class LiveRead:
    """The log as one read found it: the records a question decodes, the state of every
    input partition, and what was skipped as undecodable."""

    cut: Cut
    """The whole log to its end ("end"): its size and last offsets, and of its records those
    of the event types asked for, in log order."""
    partitioned: PartitionedDriver
    appended: int
    """The latest append time of any record (-1 for an empty log): "now" for durations."""
    skipped: list[SkippedRecord]
    from_snapshots: dict[str, int]
    """Input partition -> the offset its snapshot reflects (those replayed from 0: absent)."""

    @property
    def driver(self) -> ReducerDriver:
        return self.partitioned.merged()


def read_live(
    consumer: Consumer,
    prefix: str,
    serde: EventSerde,
    asked: tuple[type[Event], ...],
    factory: Callable[[], ReducerDriver],
    watch: Watch = lambda messages, _: messages,
    job: str | None = None,
) -> LiveRead:
    """The log's topics read to their ends through `consumer` (read_committed), the records
    of the `asked` types decoded (of the job topic, only `job`'s if given: its records are
    keyed by job id), every input partition's state rebuilt from its snapshot."""
    wanted = None if job is None else job.encode()
    roles = roles_by_topic(prefix, LOG_ROLES)
    ends = _ends(consumer, prefix)  # before the read: no snapshot of records it missed
    partitions: dict[tuple[TopicRole, int], list[Message]] = {}
    for msg in watch(read_topics(consumer, list(roles), True, True), "reading the log"):
        partitions.setdefault((roles[msg.topic()], msg.partition()), []).append(msg)
    records: list[LogRecord] = []
    skipped: list[SkippedRecord] = []
    offsets: dict[str, int] = {}
    appended = -1
    for (role, partition), messages in sorted(partitions.items()):
        offsets[f"{role.value}/{partition}"] = messages[-1].offset()
        appended = max(appended, max(m.timestamp()[1] for m in messages))
        for msg in messages:
            if role is TopicRole.JOB and wanted is not None and msg.key() != wanted:
                continue
            if _is_a(serde, msg, asked):
                _decoded(serde, role, msg, records, skipped)
    refused = _dead_letters(serde, prefix, partitions)
    latest = max((r.event.event_time for r in records), default=None)
    size = sum(map(len, partitions.values()))
    cut = Cut("end", log_order(records), refused, offsets, size, latest)
    for key in ends:  # a partition retention emptied: its state is its snapshot's
        partitions.setdefault(key, [])
    with bulk_replay():
        found = latest_snapshots(consumer, prefix)
        partitioned, starts = _states(found, prefix, serde, factory, partitions, refused, ends)
    return LiveRead(cut, partitioned, appended, skipped, starts)


def _dead_letters(
    serde: EventSerde, prefix: str, partitions: dict[tuple[TopicRole, int], list[Message]]
) -> set[tuple[str, int, int]]:
    """(role, partition, offset) of every input the services dead-lettered: it reached no
    reducer live, and reaches none here (replay.dead_lettered, of the dead letters read)."""
    letters: list[LogRecord] = []
    for (role, _), messages in partitions.items():
        for msg in messages if role is TopicRole.DEAD_LETTER else ():
            _decoded(serde, role, msg, letters, [])
    return dead_lettered(letters)


def _is_a(serde: EventSerde, msg: Message, asked: tuple[type[Event], ...]) -> bool:
    """Whether the record is of an asked type, by its header alone (a header naming no
    known schema is decoded, so that its record is reported as skipped)."""
    kind = serde.event_type(msg.value(), msg.topic())
    return kind is None or issubclass(kind, asked)


def _decoded(
    serde: EventSerde,
    role: TopicRole,
    msg: Message,
    records: list[LogRecord],
    skipped: list[SkippedRecord],
) -> None:
    try:
        event = serde.decode(msg.value(), msg.topic())
    except DecodeError as exc:
        skipped.append(SkippedRecord(role, msg.partition(), msg.offset(), str(exc)))
        return
    records.append(LogRecord(role, msg.partition(), msg.offset(), msg.timestamp()[1], event,
                             provenance_of(msg, msg.value())))  # fmt: skip


def _states(
    found: dict[str, snapshot.Snapshot],
    prefix: str,
    serde: EventSerde,
    factory: Callable[[], ReducerDriver],
    partitions: dict[tuple[TopicRole, int], list[Message]],
    refused: set[tuple[str, int, int]],
    ends: dict[tuple[TopicRole, int], int],
) -> tuple[PartitionedDriver, dict[str, int]]:
    """Every input partition's state: its latest snapshot (one that reflects no more than
    the partition as read has had, or, where retention deleted every record, its next
    offset before the read: `ends`) and the records after it that reached a reducer live."""
    drivers: dict[tuple[TopicRole, int], ReducerDriver] = {}
    starts: dict[str, int] = {}
    for (role, partition), messages in sorted(partitions.items()):
        if role not in INPUT_ROLES:
            continue
        taken = found.get(f"{topic_name(role, prefix)}/{partition}")
        end = messages[-1].offset() + 1 if messages else ends.get((role, partition), 0)
        if taken is not None and 0 < taken.next_offset <= end:
            driver, start = taken.driver, taken.next_offset
            starts[f"{role.value}/{partition}"] = start
        else:
            driver, start = factory(), 0
        for msg in messages:
            if msg.offset() < start or (role.value, partition, msg.offset()) in refused:
                continue
            try:
                driver.process(serde.decode(msg.value(), msg.topic()))
            except DecodeError:
                continue  # dead-lettered by the services, reported with the records
        drivers[(role, partition)] = driver
    return PartitionedDriver(factory, drivers), starts


def _ends(consumer: Consumer, prefix: str) -> dict[tuple[TopicRole, int], int]:
    """Every input partition's next offset, held records or none: a snapshot reflecting
    more than that is of a topic since deleted and created shorter, and one of a partition
    whose records retention deleted is all of its state."""
    ends = {}
    for role in INPUT_ROLES:
        topic = topic_name(role, prefix)
        for partition in partitions_of(consumer, topic):
            tp = TopicPartition(topic, partition)
            ends[(role, partition)] = consumer.get_watermark_offsets(tp, timeout=30)[1]
    return ends


def latest_snapshots(consumer: Consumer, prefix: str) -> dict[str, snapshot.Snapshot]:
    """Owner (`<topic>/<partition>`) -> its latest complete snapshot that decodes."""
    decoded = {
        owner: snapshot.decode_or_rebuild(data, owner)
        for owner, data in latest_snapshot_data(consumer, prefix).items()
    }
    return {owner: taken for owner, taken in decoded.items() if taken is not None}


def latest_snapshot_data(consumer: Consumer, prefix: str) -> dict[str, bytes]:
    """Owner (`<topic>/<partition>`) -> its latest complete snapshot, encoded."""
    assemblers: dict[str, snapshot.SnapshotAssembler] = {}
    for msg in read_topics(consumer, [topic_name(TopicRole.SNAPSHOT, prefix)], True, True):
        key = msg.key()
        if key is None:
            continue
        owner = key.decode("utf-8", "replace").partition("#")[0]
        assemblers.setdefault(owner, snapshot.SnapshotAssembler(owner)).add(key, msg.value())
    return {
        owner: assembler.latest
        for owner, assembler in assemblers.items()
        if assembler.latest is not None
    }
