"""The checkpointer: signed tree heads of every partition of the log, on a topic of their own.

It reads the log's topics (read_committed, as `read_log` does) from where its last checkpoint
of each partition ended, appends each record that is an event to that partition's Merkle tree
(`services/transparency.py`) and, once a partition has grown by `every_records` records,
writes its checkpoint, signed with the services' key, to the checkpoint topic (keyed by the
origin). A record that is no event is no leaf: no export holds it, and the services'
dead letter of it, which holds its bytes, is a leaf of the dead-letter partition.

Each checkpoint record carries, beside the note, the tree's compact range (a header): a
restarted checkpointer takes the latest checkpoint of each partition whose note its own key
signed and whose range folds to the note's root, and goes on from the note's offset; anything
else on the topic is ignored. Its producer's transactional id is fixed per cluster prefix, so
a second checkpointer fences the first: one writer per partition, sizes that only grow.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from jobledger.schemas import DecodeError, EventSerde, topic_name
from jobledger.schemas.topics import TopicRole
from jobledger.services import kafka
from jobledger.services.kafka_reads import READ_TO_END, consume_available
from jobledger.services.kafka_topics import partitions_of
from jobledger.services.signing import TYPE_HEADER, Keyring, SigningKey
from jobledger.services.transparency import (
    Checkpoint,
    CompactRange,
    leaf_data,
    leaf_hash,
    open_note,
    origin_of,
)

from .log_file import LOG_ROLES, LogRecord
from .provenance import provenance_of

RANGE_HEADER = "jobledger.compact-range"
EXPORT_METADATA_KEY = "jobledger.checkpoints"
"""The Avro file-metadata key under which an export carries its checkpoints (JSON)."""


@dataclass(frozen=True)
class CheckpointRecord:
    """A checkpoint note as the checkpoint topic held it: where, and when it was appended."""

    offset: int
    timestamp: int
    note: str


def record_leaf(record: LogRecord) -> bytes | None:
    """A record's leaf hash, from what an export holds of it; None if it holds no bytes of it
    (an export of a log without checkpoints keeps only the signed ones')."""
    if record.provenance is None:
        return None
    return leaf_hash(leaf_data(record.offset, record.timestamp, record.provenance.packed))


def message_leaf(msg: Message) -> bytes:
    """A record's leaf hash as read from its topic: the bytes an export keeps of it."""
    packed = provenance_of(msg, msg.value() or b"", unsigned_too=True)
    return leaf_hash(leaf_data(msg.offset(), msg.timestamp()[1], packed.packed))


@dataclass
class PartitionTree:
    tree: CompactRange = field(default_factory=CompactRange)
    next_offset: int = 0
    checkpointed: int = 0
    """The size of the last checkpoint written."""


class Checkpointer:
    """Extends each partition's tree and writes checkpoints; `run_once` is one pass."""

    def __init__(
        self, bootstrap: str, prefix: str, key: SigningKey, name: str, every_records: int,
        serde: EventSerde | None = None,
    ) -> None:  # fmt: skip
        self.bootstrap, self.prefix, self.key, self.name = bootstrap, prefix, key, name
        self.every_records = every_records
        self.serde = serde or EventSerde()
        self.topic = topic_name(TopicRole.CHECKPOINT, prefix)
        self.consumer = kafka.read_committed_consumer(bootstrap, extra=READ_TO_END)
        self.cluster = self.consumer.list_topics(timeout=10).cluster_id or "kafka"
        self.producer = kafka.producer(bootstrap, f"jobledger-{prefix}checkpointer", signer=None)
        self.trees: dict[tuple[str, int], PartitionTree] = {}
        self._restore()

    def close(self) -> None:
        self.consumer.close()

    def _restore(self) -> None:
        """The latest checkpoint of each partition this key signed, with its range."""
        own = Keyring({})
        own.add(self.key, self.name, "services")
        starts = {(self.topic, p): 0 for p in partitions_of(self.consumer, self.topic)}
        for msg in _read_from(self.consumer, starts):
            opened = open_note((msg.value() or b"").decode(errors="replace"), own, 0)
            if isinstance(opened, str):
                continue
            found = dict(msg.headers() or ()).get(RANGE_HEADER) or b""
            checkpoint = opened.checkpoint
            try:
                tree = CompactRange.unpacked(checkpoint.size, found)
            except ValueError:
                continue
            where = self._partition_of(checkpoint.origin)
            if where is not None and tree.root() == checkpoint.root:
                self.trees[where] = PartitionTree(tree, checkpoint.next_offset, checkpoint.size)

    def _partition_of(self, origin: str) -> tuple[str, int] | None:
        cluster, _, rest = origin.partition("/")
        topic, _, partition = rest.rpartition("/")
        if cluster != self.cluster or not partition.isdecimal():
            return None
        return topic, int(partition)

    def run_once(self, force: bool = False) -> list[Checkpoint]:
        """Read every partition to its end, and checkpoint those grown by `every_records`
        (with `force`, by any); the checkpoints written."""
        starts = {}
        for role in LOG_ROLES:
            topic = topic_name(role, self.prefix)
            for partition in partitions_of(self.consumer, topic):
                tree = self.trees.setdefault((topic, partition), PartitionTree())
                starts[(topic, partition)] = tree.next_offset
        for msg in _read_from(self.consumer, starts):
            tree = self.trees[(msg.topic(), msg.partition())]
            tree.next_offset = msg.offset() + 1
            try:
                self.serde.decode(msg.value(), msg.topic())
            except DecodeError:
                continue
            tree.tree.append(message_leaf(msg))
        due = [
            (where, tree) for where, tree in sorted(self.trees.items())
            if tree.tree.size - tree.checkpointed >= (1 if force else self.every_records)
        ]  # fmt: skip
        if not due:
            return []
        written = []
        self.producer.begin_transaction()
        for (topic, partition), tree in due:
            checkpoint = Checkpoint(origin_of(self.cluster, topic, partition), tree.tree.size,
                                    tree.tree.root(), tree.next_offset)  # fmt: skip
            self.producer.produce(
                self.topic, key=checkpoint.origin.encode(),
                value=checkpoint.signed(self.key, self.name).encode(),
                headers=[(RANGE_HEADER, tree.tree.packed()), (TYPE_HEADER, b"Checkpoint")],
            )  # fmt: skip
            written.append(checkpoint)
        self.producer.commit_transaction(30)
        for (_, _), tree in due:
            tree.checkpointed = tree.tree.size
        return written


def _read_from(consumer: Consumer, starts: dict[tuple[str, int], int]) -> Iterator[Message]:
    """Committed records of each partition from its start offset to its end as found."""
    if not starts:
        return
    consumer.assign([TopicPartition(t, p, offset) for (t, p), offset in starts.items()])
    at_end: set[tuple[str, int]] = set()
    try:
        while len(at_end) < len(starts):
            for msg in consume_available(consumer, 10_000, 0.5):
                where = (msg.topic(), msg.partition())
                if msg.error():
                    if msg.error().code() != KafkaError._PARTITION_EOF:
                        raise KafkaException(msg.error())
                    at_end.add(where)
                    consumer.pause([TopicPartition(*where)])
                elif where not in at_end:
                    yield msg
    finally:
        consumer.unassign()


def read_checkpoints(bootstrap: str, prefix: str) -> list[CheckpointRecord]:
    """Every record of the checkpoint topic, in order (none if the topic does not exist: a
    cluster made before checkpoints)."""
    topic = topic_name(TopicRole.CHECKPOINT, prefix)
    consumer = kafka.read_committed_consumer(bootstrap, extra=READ_TO_END)
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return []
        starts = {(topic, p): 0 for p in sorted(metadata.partitions)}
        return [
            CheckpointRecord(
                msg.offset(), msg.timestamp()[1], (msg.value() or b"").decode(errors="replace")
            )
            for msg in _read_from(consumer, starts)
        ]
    finally:
        consumer.close()


def export_metadata(checkpoints: Iterable[CheckpointRecord]) -> dict[str, str]:
    """The file metadata by which an export carries `checkpoints` (readers that do not know
    it read the records as before)."""
    rows = [{"offset": c.offset, "timestamp": c.timestamp, "note": c.note} for c in checkpoints]
    return {EXPORT_METADATA_KEY: json.dumps({"version": 1, "checkpoints": rows})}


def exported_checkpoints(metadata: dict[str, str | bytes]) -> list[CheckpointRecord] | str:
    """The checkpoints an export's metadata carries (none if it carries none), or why they
    cannot be read."""
    found = metadata.get(EXPORT_METADATA_KEY)
    if found is None:
        return []
    try:
        rows = json.loads(found)["checkpoints"]
        return [CheckpointRecord(int(r["offset"]), int(r["timestamp"]), str(r["note"]))
                for r in rows]  # fmt: skip
    except (ValueError, KeyError, TypeError) as exc:
        return f"the export's checkpoints are unreadable ({exc!r})"
