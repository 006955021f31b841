"""`jobledger tail`: a topic's events for people and shell pipelines, with kcat's habits.

Where to start and stop (`-o beginning|end|<offset>|-<n>|s@<time>|e@<time>`, `-c N`, `-e`),
which partition (`-p`), what to show (`--type`, `--job`, timers only with `--timers`) and how
(`--format line` with partition, offset, timestamp and key; `json` with the same around the
event; `event`, the bare JSON event, which `jobledger produce` takes back for a client's
inputs: it refuses the services' own decisions). The same filters
read an exported file with `--file LOG.avro`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from jobledger.projections.debugging.history import iso
from jobledger.projections.log.log_file import LOG_ROLES, read_export
from jobledger.projections.log.provenance import provenance_of
from jobledger.projections.log.writers import UNSIGNED, Writer, Writers
from jobledger.schemas import EVENTS_BY_NAME, DecodeError, Event, EventSerde, event_to_dict
from jobledger.schemas.timers import TimerFired
from jobledger.schemas.topics import TopicRole, topic_name
from jobledger.services import kafka, kafka_topics

from .log_source import keyring_option, writers_of
from .options import bootstrap_of, epoch_ms, non_negative_int, prefix_of, registry_option

FORMATS = ("line", "json", "event")


@dataclass(frozen=True)
class Start:
    """Where reading a partition starts: `beginning`, `end`, an offset, `-n` from the end,
    or the first record at or after a time."""

    kind: str
    value: int = 0


@dataclass(frozen=True)
class Position:
    """`-o` as given: where to start, and a time to stop before (`e@`), if any."""

    start: Start
    stop_before_ms: int | None = None


def offset_spec(text: str) -> Start | int:
    """One `-o` value: a Start, or (for `e@<time>`) the time to stop before, as an int."""
    if text in ("beginning", "end"):
        return Start(text)
    if text.startswith(("s@", "e@")):
        try:
            at = epoch_ms(text[2:])
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentTypeError(f"{text[:2]}: {exc}") from None
        return Start("time", at) if text[0] == "s" else at
    if text.lstrip("-").isdigit():
        value = int(text)
        return Start("relative", -value) if value < 0 else Start("offset", value)
    raise argparse.ArgumentTypeError(
        f"{text!r}: expected beginning, end, an offset, -N (N before the end), s@TIME or "
        "e@TIME (TIME: epoch ms or ISO 8601)"
    )


def add_parser(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "tail", parents=[common],
        help="print a topic's events (kcat-style offsets, partitions and filters)",
    )  # fmt: skip
    p.add_argument(
        "topic", nargs="?",
        help="a role (job, resourcemanager, taskexecutor, deadletter) or a topic name; "
        "with --file, the role to show (default: all)",
    )  # fmt: skip
    p.add_argument("-p", "--partition", type=non_negative_int, help="only this partition")
    p.add_argument(
        "-o", "--offset", action="append", type=offset_spec, metavar="OFFSET", default=[],
        help="start at beginning | end | <offset> | -<n> (n offsets before the end, as kcat; "
        "transaction markers take offsets too) | s@<time>, and/or stop before e@<time>; time "
        "in epoch ms or ISO 8601 (default: end, or beginning with --file)",
    )  # fmt: skip
    p.add_argument("-c", "--count", type=non_negative_int, help="stop after N events shown")
    p.add_argument(
        "-e", "--exit-at-end", action="store_true",
        help="stop once every partition is read to its end",
    )  # fmt: skip
    p.add_argument(
        "--from-beginning", action="append_const", dest="offset", const=Start("beginning"),
        help="the same as -o beginning",
    )  # fmt: skip
    p.add_argument("--max", type=non_negative_int, dest="count", help="the same as -c")
    p.add_argument(
        "--type", action="append", dest="types", metavar="EVENT",
        help="only events of this type (repeatable; see `jobledger schemas list`)",
    )  # fmt: skip
    p.add_argument("--job", help="only events of this job")
    p.add_argument("--timers", action="store_true", help="also show TimerFired events")
    p.add_argument("--format", choices=FORMATS, default="line", help="how to print each event")
    p.add_argument("--file", type=Path, help="an exported .avro file instead of the broker")
    registry_option(p)
    keyring_option(p)
    p.set_defaults(func=cmd_tail, parser=p)


@dataclass(frozen=True)
class Shown:
    """A record of the log as tail shows it."""

    where: str
    partition: int
    offset: int
    timestamp: int
    key: str | None
    event: Event
    writer: Writer = UNSIGNED


def cmd_tail(args: argparse.Namespace) -> int:
    position = _position(args.offset, default="beginning" if args.file else "end")
    unknown = sorted(set(args.types or ()) - set(EVENTS_BY_NAME))
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown event type(s) {', '.join(unknown)}; see `jobledger schemas list`"
        )
    writers = writers_of(args)
    if args.file:
        records = _from_file(args.file, args.topic, args.partition, position, writers)
    elif args.topic is None:
        raise argparse.ArgumentTypeError("which topic? e.g. `jobledger tail job`")
    else:
        records = _from_broker(args, position, writers)
    print_records((r for r in records if _wanted(r, args)), args.format, args.count)
    return 0


def _position(specs: list[Start | int], default: str) -> Position:
    starts = [s for s in specs if isinstance(s, Start)]
    stops = [s for s in specs if isinstance(s, int)]
    if len(starts) > 1 or len(stops) > 1:
        raise argparse.ArgumentTypeError("-o takes one start and at most one e@TIME")
    return Position(starts[0] if starts else Start(default), stops[0] if stops else None)


def _wanted(record: Shown, args: argparse.Namespace) -> bool:
    event = record.event
    if isinstance(event, TimerFired) and not (args.timers or "TimerFired" in (args.types or ())):
        return False
    if args.types and event.type_name() not in args.types:
        return False
    return args.job is None or getattr(event, "job_id", None) == args.job


def print_records(records: Iterable[Shown], fmt: str, count: int | None) -> None:
    """Print records until `count` have been printed (all of them without one), never
    waiting for a record past the last one wanted."""
    if count == 0:
        return
    for printed, record in enumerate(records, start=1):
        print(_format(record, fmt), flush=True)
        if printed == count:
            return


def _format(record: Shown, fmt: str) -> str:
    if fmt == "event":
        return json.dumps(event_to_dict(record.event), separators=(",", ":"))
    if fmt == "json":
        return json.dumps({
            "topic": record.where, "partition": record.partition, "offset": record.offset,
            "timestamp": record.timestamp, "key": record.key,
            "writer": record.writer.to_dict(), "event": event_to_dict(record.event),
        }, separators=(",", ":"))  # fmt: skip
    fields = event_to_dict(record.event)
    fields.pop("type", None)
    when = iso(record.timestamp)
    return (
        f"{record.where}/{record.partition}@{record.offset} {when} "
        f"{record.key or '-'} {record.event.type_name()} {record.writer.label()} "
        f"{json.dumps(fields, separators=(',', ':'))}"
    )


def _from_file(
    path: Path, role_name: str | None, partition: int | None, position: Position,
    writers: Writers,
) -> Iterator[Shown]:  # fmt: skip
    roles = {role.value: role for role in LOG_ROLES}
    if role_name is not None and role_name not in roles:
        raise argparse.ArgumentTypeError(
            f"an export holds the roles {', '.join(roles)}, not {role_name!r}"
        )
    records = [
        r for r in read_export(path)
        if (role_name is None or r.role.value == role_name)
        and (partition is None or r.partition == partition)
    ]  # fmt: skip
    by_partition: dict[tuple[TopicRole, int], list] = {}
    for r in records:
        by_partition.setdefault((r.role, r.partition), []).append(r)
    for (role, number), rows in sorted(
        by_partition.items(), key=lambda kv: (kv[0][0].value, kv[0][1])
    ):
        start = _file_start(position.start, rows)
        for r in rows[start:]:
            if position.stop_before_ms is not None and r.timestamp >= position.stop_before_ms:
                break
            yield Shown(role.value, number, r.offset, r.timestamp, r.event.route()[1], r.event,
                        writers.of(r))  # fmt: skip


def _file_start(start: Start, rows: list) -> int:
    """The index in one partition's rows where reading starts."""
    if start.kind == "beginning":
        return 0
    if start.kind == "end":
        return len(rows)
    if start.kind in ("relative", "offset"):
        # offsets, as on the broker: -n counts back from the offset after the last record
        first = rows[-1].offset + 1 - start.value if start.kind == "relative" else start.value
        return next((i for i, r in enumerate(rows) if r.offset >= first), len(rows))
    return next((i for i, r in enumerate(rows) if r.timestamp >= start.value), len(rows))


def _from_broker(args: argparse.Namespace, position: Position, writers: Writers) -> Iterator[Shown]:
    bootstrap = bootstrap_of(args)
    prefix = prefix_of(args)
    topic = kafka_topics.resolve_topic(args.topic, prefix)
    where = next((r.value for r in TopicRole if topic_name(r, prefix) == topic), topic)
    serde = EventSerde(registry_url=args.schema_registry)
    # as kcat: an offset past a partition's end waits at the end instead of starting over
    consumer = kafka.read_committed_consumer(bootstrap, extra={"auto.offset.reset": "latest"})
    try:
        partitions = kafka_topics.partitions_of(consumer, topic)
        if args.partition is not None:
            if args.partition not in partitions:
                raise kafka_topics.TopicNotFound(
                    f"topic {topic!r} has partitions {partitions[0]}-{partitions[-1]}, "
                    f"not {args.partition}"
                )
            partitions = [args.partition]
        assignment = [
            TopicPartition(topic, p, _broker_start(consumer, topic, p, position.start))
            for p in partitions
        ]
        yield from _consume(consumer, assignment, where, serde, position, args.exit_at_end, writers)
    finally:
        consumer.close()


def _broker_start(consumer: Consumer, topic: str, partition: int, start: Start) -> int:
    if start.kind == "beginning":
        return OFFSET_BEGINNING
    if start.kind == "end":
        return OFFSET_END
    if start.kind == "offset":
        return start.value
    if start.kind == "relative":
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        return max(low, high - start.value)
    [found] = consumer.offsets_for_times([TopicPartition(topic, partition, start.value)], 10)
    return found.offset if found.offset >= 0 else OFFSET_END


def _now_ms() -> int:
    return int(time.time() * 1000)


def _consume(
    consumer: Consumer,
    assignment: list[TopicPartition],
    where: str,
    serde: EventSerde,
    position: Position,
    exit_at_end: bool,
    writers: Writers,
) -> Iterator[Shown]:
    """Records of the assigned partitions as they come; a partition is done at its end
    (with -e) or at its first record at or after the e@ time."""
    consumer.assign(assignment)
    at_end: set[int] = set()
    stopped: set[int] = set()
    while len(at_end | stopped) < len(assignment):
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        error = msg.error()
        if error and error.code() == KafkaError._PARTITION_EOF:
            if exit_at_end:
                at_end.add(msg.partition())
            elif position.stop_before_ms is not None and _now_ms() >= position.stop_before_ms:
                stopped.add(msg.partition())  # nothing before e@ can come any more
            continue
        if error and (error.fatal() or error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            raise KafkaException(error)
        if error:  # the client retries by itself (a broker restarting, say)
            print(f"{where}: {error.str()}", file=sys.stderr)
            continue
        partition = msg.partition()
        if partition in stopped:
            continue
        timestamp = msg.timestamp()[1]
        if position.stop_before_ms is not None and timestamp >= position.stop_before_ms:
            stopped.add(partition)
            continue
        at_end.discard(partition)
        value = msg.value()
        try:
            event = serde.decode(value, msg.topic())
        except DecodeError as exc:
            print(f"{where}/{partition}@{msg.offset()}: skipped: {exc}", file=sys.stderr)
            continue
        key = msg.key().decode("utf-8", "replace") if msg.key() is not None else None
        writer = writers.signed(provenance_of(msg, value), timestamp)
        yield Shown(where, partition, msg.offset(), timestamp, key, event, writer)
