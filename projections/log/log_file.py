"""The log as records, from Kafka topics or from an exported Avro Object Container File.

An export holds, per record, where it was in the log (topic role, partition, offset, broker
timestamp) and the event itself as a branch of a union of every event schema, so the schemas
travel in the file and it replays with no broker and no registry; and, for a signed record,
what its signature is checked against (`provenance.py`).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, BinaryIO

from confluent_kafka import Consumer
from fastavro import block_reader, parse_schema, writer
from fastavro.read import SchemaResolutionError

from jobledger.schemas import (
    EVENT_TYPES,
    EVENTS_BY_NAME,
    DecodeError,
    Event,
    EventSerde,
    roles_by_topic,
    topic_name,
)
from jobledger.schemas.avro import full_name, inline_named_types, record_schema
from jobledger.schemas.catalog import NAMED_TYPES, schema_fingerprint
from jobledger.schemas.records import event_from_avro_dict
from jobledger.schemas.topics import INPUT_ROLES, TopicRole
from jobledger.services.kafka import SERVICES_GROUP_PREFIX, read_committed_consumer
from jobledger.services.kafka_reads import READ_TO_END, read_topics
from jobledger.services.kafka_topics import committed_offsets

from .provenance import AVRO_FIELD, Provenance, provenance_of

LOG_ROLES = (
    TopicRole.JOB,
    TopicRole.RESOURCE_MANAGER,
    TopicRole.TASK_EXECUTOR,
    TopicRole.DEAD_LETTER,
)
"""The topics a log is: the reducers' inputs, and the dead letters that say which of those
records no reducer saw."""


@dataclass(frozen=True)
class LogRecord:
    """One event and its place in the log."""

    role: TopicRole
    partition: int
    offset: int
    timestamp: int
    event: Event
    provenance: Provenance | None = None
    """What the record's signature is over, if it is signed and was read with it (`read_log`
    with `provenance`, an export of such records)."""


@dataclass(frozen=True)
class SkippedRecord:
    """A record of the log that is not an event (it belongs in the dead-letter topic)."""

    role: TopicRole
    partition: int
    offset: int
    reason: str


def read_log(
    consumer: Consumer, prefix: str, serde: EventSerde, provenance: bool = True,
    unsigned_too: bool = False,
) -> Iterator[LogRecord | SkippedRecord]:  # fmt: skip
    """Every record of the log's topics up to their current end, in offset order per
    partition, partitions in a stable order (topic role, partition); each signed one with its
    `provenance` unless told not to (a reader that checks no signature need not hold every
    record's value twice), and with `unsigned_too` every one (`provenance_of`)."""
    roles = roles_by_topic(prefix, LOG_ROLES)
    messages = sorted(
        read_topics(consumer, list(roles), from_beginning=True, stop_at_end=True),
        key=lambda m: (LOG_ROLES.index(roles[m.topic()]), m.partition(), m.offset()),
    )
    for msg in messages:
        role = roles[msg.topic()]
        value = msg.value()
        try:
            event = serde.decode(value, msg.topic())
        except DecodeError as exc:
            yield SkippedRecord(role, msg.partition(), msg.offset(), str(exc))
            continue
        kept = provenance_of(msg, value, unsigned_too) if provenance else None
        yield LogRecord(role, msg.partition(), msg.offset(), msg.timestamp()[1], event, kept)


def processed_by_services(bootstrap: str, prefix: str) -> Callable[[LogRecord], bool]:
    """Whether the services' consumer group has committed past a record: an input below its
    committed offset has been decided; one above it (a clock tick written just before the
    services stopped, say) has not, and its decisions are not due yet."""
    committed = committed_offsets(
        bootstrap, f"{SERVICES_GROUP_PREFIX}{prefix}",
        [topic_name(role, prefix) for role in INPUT_ROLES],
    )  # fmt: skip
    return lambda r: r.offset < committed.get((topic_name(r.role, prefix), r.partition), 0)


def read_events(bootstrap: str, prefix: str) -> list[LogRecord]:
    """The decodable records of the log as they are now (what a replay reads)."""
    consumer = read_committed_consumer(bootstrap, extra=READ_TO_END)
    try:
        return [r for r in read_log(consumer, prefix, EventSerde()) if isinstance(r, LogRecord)]
    finally:
        consumer.close()


def _event_union() -> list[Any]:
    named = {full_name(cls): cls for cls in NAMED_TYPES}
    return inline_named_types([record_schema(cls) for cls in EVENT_TYPES], named)


def export_schema(provenance: bool = True) -> dict[str, Any]:
    """The file's schema: where the record was, the event as a union of every event, and the
    provenance of a signed record (without `provenance`: the schema of exports written before
    records were signed)."""
    fields: list[dict[str, Any]] = [
        {"name": "role", "type": "string"},
        {"name": "partition", "type": "int"},
        {"name": "offset", "type": "long"},
        {"name": "timestamp", "type": "long"},
        {"name": "event", "type": _event_union()},
    ]
    if provenance:
        fields.append(AVRO_FIELD)
    return {
        "type": "record",
        "name": "LogRecord",
        "namespace": "jobledger.export",
        "doc": "One record of a jobledger log and its place in it.",
        "fields": fields,
    }


def write_export(
    records: Iterable[LogRecord], out: BinaryIO, metadata: dict[str, str] | None = None
) -> int:
    """Write the records to an Avro Object Container File; returns how many. `metadata` goes
    in the file's header, where a reader that does not know a key passes it by (the log's
    checkpoints: `checkpoints.export_metadata`; what the file is: an archived job's story)."""
    schema = parse_schema(export_schema())
    count = 0

    def rows() -> Iterator[dict[str, Any]]:
        nonlocal count
        for record in records:
            count += 1
            signed = record.provenance
            yield {
                "role": record.role.value,
                "partition": record.partition,
                "offset": record.offset,
                "timestamp": record.timestamp,
                "event": (record.event.full_name(), record.event.model_dump()),
                "provenance": None if signed is None else signed.packed,
            }

    writer(out, schema, rows(), codec="deflate", metadata=metadata)
    return count


def read_export_metadata(path: Path) -> dict[str, str]:
    """The metadata `write_export` put in an export's header (the Avro codec and schema
    left out); ExportUnreadable as `read_export`."""
    with ExportFile(path) as export:
        return {
            key: value.decode() if isinstance(value, bytes) else value
            for key, value in export.metadata.items()
            if not key.startswith("avro.")
        }


class ExportUnreadable(ValueError):
    """A file given as an export is not one: not Avro, or Avro of another schema."""


@cache
def _fingerprints_read_as_written() -> frozenset[bytes]:
    """Today's schema, and today's events before exports held provenance: a row of either is
    today's record as it is (`record_of` takes a missing provenance for none)."""
    return frozenset(
        schema_fingerprint(parse_schema(export_schema(provenance))) for provenance in (True, False)
    )


def read_export(path: Path, provenance: bool = True) -> Iterator[LogRecord]:
    """The records of an export written by `write_export`, each signed one with its
    `provenance` unless told not to (as `read_log`); ExportUnreadable (naming the file
    and what is wrong) for anything else, and OSError if it cannot be opened. An export
    written by an earlier version is read into today's events by Avro schema resolution
    (fields added since take their defaults); one written with today's schema, or today's
    but for the provenance, is read as it is, resolution costing three times the reading."""
    with ExportFile(path) as export:
        for rows in export.blocks():
            yield from export.records(rows, provenance)


class ExportFile:
    """An export opened for reading its Avro blocks: all in order, or one by its offset in
    the file (what the log's index, log_index.py, reads a few records by). Raises what
    `read_export` does."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = open(path, "rb")  # noqa: SIM115 (closed by close(), as a context manager)
        try:
            self._blocks = self._opened()
        except BaseException:
            self._file.close()
            raise
        self.data_start = self._file.tell()
        self._file.seek(self.data_start - 16)
        self.sync_marker = self._file.read(16)
        """The file's Avro sync marker (the header's last 16 bytes): random per file written."""

    def _opened(self) -> block_reader:
        with self._unreadable():
            blocks = block_reader(self._file, return_record_name=True,
                                  return_record_name_override=True)  # fmt: skip
            self.writer_schema = blocks.writer_schema
            self.metadata: dict[str, str] = dict(blocks.metadata)
            """The file header's metadata (`write_export`'s, and Avro's own keys)."""
            written = schema_fingerprint(parse_schema(blocks.writer_schema))
            if written not in _fingerprints_read_as_written():
                self._file.seek(0)
                blocks = block_reader(self._file, reader_schema=export_schema(),
                                      return_record_name=True,
                                      return_record_name_override=True)  # fmt: skip
            return blocks

    def __enter__(self) -> ExportFile:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._file.close()

    def blocks(self) -> Iterator[Any]:
        """Every block from the first, each with its `offset` and `num_records`."""
        self._file.seek(self.data_start)
        with self._unreadable():
            yield from self._blocks

    def block_at(self, offset: int) -> list[dict[str, Any]]:
        """The rows of the block that starts at `offset` (as `blocks` gave it)."""
        self._file.seek(offset)
        with self._unreadable():
            return list(next(self._blocks))

    def rows(self, block: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """A block's rows, as Avro gives them (what the log's index reads)."""
        with self._unreadable():
            yield from block

    def records(
        self, rows: Iterable[dict[str, Any]], provenance: bool = True
    ) -> Iterator[LogRecord]:
        with self._unreadable():
            for row in rows:  # resolution is checked as the first record is read
                yield record_of(row, provenance)

    @contextmanager
    def _unreadable(self) -> Iterator[None]:
        try:
            yield
        except SchemaResolutionError:
            schema = getattr(self, "writer_schema", None)
            name = schema.get("name") if isinstance(schema, dict) else None
            raise ExportUnreadable(
                f"{self.path} is not a jobledger export (an Avro container file written by "
                f"`jobledger export`): its records are {name or 'another schema'}, not a "
                "jobledger.export.LogRecord today's events can be read into"
            ) from None
        except (ValueError, KeyError, TypeError, EOFError, StopIteration, zlib.error) as exc:
            raise ExportUnreadable(
                f"{self.path} is not a jobledger export (an Avro container file written by "
                f"`jobledger export`): {exc}"
            ) from exc


def record_of(row: dict[str, Any], provenance: bool = True) -> LogRecord:
    """A row of an export as the record it is (without its `provenance`, if told); ValueError
    for a topic no log holds (its place in the log would be unknown: `positions.log_order`
    orders LOG_ROLES only)."""
    name, data = row["event"]
    cls = EVENTS_BY_NAME[name.rsplit(".", 1)[-1]]
    role = TopicRole(row["role"])
    if role not in LOG_ROLES:
        raise ValueError(f"a record of topic role {role.value!r}, which is no part of a log")
    signed = row.get("provenance") if provenance else None
    return LogRecord(
        role, row["partition"], row["offset"], row["timestamp"], event_from_avro_dict(cls, data),
        None if signed is None else Provenance(signed),
    )  # fmt: skip
