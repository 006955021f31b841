"""`jobledger export` and `jobledger replay`: the log as one file, and the state it leads to."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from tqdm import tqdm

from jobledger.projections.live_log import LiveRead, read_live
from jobledger.projections.log_file import (
    LogRecord,
    SkippedRecord,
    processed_by_services,
    read_export,
    read_log,
    write_export,
)
from jobledger.projections.log_index import LogIndex, open_index
from jobledger.projections.positions import Cut, Position, cut, log_order
from jobledger.projections.replay import ReplayResult, foreign, position, replay, verify
from jobledger.projections.tables import state_table
from jobledger.schemas import Event, EventSerde
from jobledger.services import kafka
from jobledger.services.driver import ReducerDriver
from jobledger.services.gc_policy import bulk_replay
from jobledger.services.parallel import default_jobs

from .options import (
    at_option,
    bootstrap_of,
    configuration_of,
    configuration_option,
    epoch_ms,
    non_negative_int,
    position_of,
    positive_int,
    prefix_of,
    registry_option,
)

tqdm.monitor_interval = 0
"""No monitor thread: tqdm starts one with its first bar (shown or not) and never stops it,
and a process with a second thread replays in one process (services/parallel.py)."""

Subparsers = argparse._SubParsersAction
T = TypeVar("T")


def add_parsers(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("export", parents=[common], help="write the log to an Avro container file")
    p.add_argument("file", type=Path, help="the .avro file to write")
    registry_option(p)
    p.set_defaults(func=cmd_export)

    p = sub.add_parser(
        "replay", parents=[common], help="rebuild every reducer's state from the log",
    )  # fmt: skip
    p.add_argument("--file", type=Path, help="an exported .avro file instead of the broker")
    at_option(p)
    p.add_argument(
        "--count", type=non_negative_int, metavar="N",
        help="the same as --at count:N (the first N records in log order)",
    )  # fmt: skip
    p.add_argument(
        "--until-time", type=epoch_ms, metavar="TIME",
        help="the same as --at s@TIME (records appended at or before TIME)",
    )  # fmt: skip
    p.add_argument("--format", choices=["json", "table"], default="json", help="output")
    p.add_argument(
        "--jobs", type=positive_int, default=default_jobs(), metavar="N",
        help="replay the partitions in N processes side by side (default: the cores, %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--verify", action="store_true",
        help="re-derive every decision and report the first that differs from the log",
    )  # fmt: skip
    registry_option(p)
    configuration_option(p)
    p.set_defaults(func=cmd_replay, parser=p)


def progress(items: Iterable[T], what: str, total: int | None = None) -> Iterable[T]:
    """Items, counted on stderr as they go when a person watches it (a long log takes a
    while to read and replay; a pipe or a file gets no progress lines)."""
    return tqdm(items, desc=what, unit=" records", file=sys.stderr, leave=False, total=total,
                disable=not sys.stderr.isatty(), mininterval=0.5)  # fmt: skip


def replayed(
    upto: Cut, jobs: int = 1, driver_factory: Callable[[], ReducerDriver] = ReducerDriver
) -> ReplayResult:
    """`replay` of a cut of the log in `jobs` processes by the reducers `driver_factory`
    makes (`reducers_of` the command's `-D` options), with progress on a terminal."""
    return replay(
        upto.records, driver_factory, watch=lambda inputs: progress(inputs, "replaying"),
        refused=upto.refused, jobs=jobs,
    )  # fmt: skip


def reducers_of(args: argparse.Namespace) -> Callable[[], ReducerDriver]:
    """What builds the reducers under the command's `-D` options (the services' own must
    be given to replay what they decided)."""
    return configuration_of(args).new_driver


def log_records(args: argparse.Namespace, from_file: Path | None) -> list[LogRecord]:
    """The log, from an exported file or from the broker (undecodable records reported),
    read under the bulk collection policy: every record read stays alive, and the collector
    walking them all again and again cost half the reading of a million."""
    if from_file is not None:
        with bulk_replay():
            return list(progress(read_export(from_file), f"reading {from_file}"))
    consumer = kafka.read_committed_consumer(bootstrap_of(args), extra=kafka.BULK_READ)
    try:
        with bulk_replay():
            records = list(progress(read_log(
                consumer, prefix_of(args), EventSerde(registry_url=args.schema_registry),
            ), "reading the log"))  # fmt: skip
    finally:
        consumer.close()
    for skipped in (r for r in records if isinstance(r, SkippedRecord)):
        where = f"{skipped.role.value}/{skipped.partition}@{skipped.offset}"
        print(f"{where}: skipped: {skipped.reason}", file=sys.stderr)
    return [r for r in records if isinstance(r, LogRecord)]


def log_options(
    p: argparse.ArgumentParser,
    formats: tuple[str, ...] | None = ("text", "json"),
    at: bool = True,
    snapshots: bool = False,
) -> None:
    """Where the log comes from, the point it is read to (`at`), and the answer's `formats`
    (None: the command declares its own -o); `snapshots`: the command answers from the
    services' snapshots (`live_log`)."""
    p.add_argument("--file", type=Path, help="an exported .avro file instead of the broker")
    p.add_argument(
        "--no-index", action="store_true",
        help="read the whole --file for the answer, not the index kept beside it",
    )  # fmt: skip
    if snapshots:
        snapshots_option(p)
    registry_option(p)
    configuration_option(p)
    if at:
        at_option(p)
    if formats:
        p.add_argument("-o", "--output", choices=formats, default="text", help="how to answer")


EXPORT_HINT_RECORDS = 100_000
"""From this many records read from the broker on, a question says how to ask the next ones
of an export's index instead: the broker's log is read whole for each question."""


def ordered_log(args: argparse.Namespace) -> list[LogRecord]:
    """The log, from the broker or `--file`, in the order it was appended."""
    records = log_records(args, args.file)
    if args.file is None and len(records) >= EXPORT_HINT_RECORDS:
        print(f"jobledger: read all {len(records)} records of the log from the broker for this "
              "answer; to ask more of it, `jobledger export LOG.avro` once and ask with "
              "`--file LOG.avro` (answered from an index kept beside it)",
              file=sys.stderr)  # fmt: skip
    return log_order(records)


def cut_of(args: argparse.Namespace) -> Cut:
    """The log up to the command's `--at`."""
    return cut(ordered_log(args), position_of(args))


def log_index(args: argparse.Namespace) -> LogIndex | None:
    """The index of the command's `--file` (built on first use, with progress), or None:
    the command reads the broker, asked for no index, or sets reducers' options (`-D`; the
    index keeps the state the default configuration replays to)."""
    if not args.file or args.no_index or getattr(args, "conf", None):
        return None
    if not hasattr(args, "opened_index"):
        args.opened_index = open_index(
            args.file, progress, lambda line: print(line, file=sys.stderr)
        )
    return args.opened_index


def snapshots_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--no-snapshots", action="store_true",
        help="replay the broker's log from its beginning for the answer, not from the "
        "services' snapshots (to check them)",
    )  # fmt: skip


def live_log(
    args: argparse.Namespace, asked: tuple[type[Event], ...], job: str | None = None
) -> LiveRead | None:
    """The broker's log to its end, from the services' snapshots, decoding only the `asked`
    event types (of the job topic, only `job`'s records) (projections/live_log.py); None
    where that does not answer the question as asked: an export `--file`, `--at` some
    earlier point, `-D` options (the snapshots hold the state the services' own options led
    to), `--no-snapshots`."""
    if any(getattr(args, option, None) for option in ("file", "at", "conf", "no_snapshots")):
        return None
    consumer = kafka.read_committed_consumer(bootstrap_of(args), extra=kafka.BULK_READ)
    try:
        live = read_live(
            consumer, prefix_of(args), EventSerde(registry_url=args.schema_registry), asked,
            reducers_of(args), lambda messages, what: progress(messages, what), job,
        )  # fmt: skip
    finally:
        consumer.close()
    for skipped in live.skipped:
        where = f"{skipped.role.value}/{skipped.partition}@{skipped.offset}"
        print(f"{where}: skipped: {skipped.reason}", file=sys.stderr)
    return live


def _processed_by_services(args: argparse.Namespace) -> Callable[[LogRecord], bool]:
    """Whether the services' consumer group has committed past a record (an exported file
    does not say, so there every record counts as consumed)."""
    if args.file:
        return lambda _: True
    return processed_by_services(bootstrap_of(args), prefix_of(args))


def cmd_export(args: argparse.Namespace) -> int:
    records = log_records(args, None)
    with open(args.file, "wb") as out:
        count = write_export(records, out)
    print(f"exported {count} records to {args.file}", file=sys.stderr)
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    if args.verify:
        # the services' committed offsets before the records: a decision is written in the
        # transaction that commits its input, so every input committed by now has its
        # decisions in what is read next, and one committed while the log is read (whose
        # decisions may be past what was read) still counts as pending
        processed = _processed_by_services(args)
        return _verify(args, log_records(args, args.file), processed)
    records = log_records(args, args.file)
    if args.at is not None and (args.count is not None or args.until_time is not None):
        raise argparse.ArgumentTypeError("--at, --count and --until-time: give one of them")
    point = position_of(args)
    if args.count is not None:
        point = Position.parse(f"count:{args.count}")
    elif args.until_time is not None:
        point = Position.parse(f"s@{args.until_time}")
    upto = cut(log_order(records), point)
    result = replayed(upto, args.jobs, reducers_of(args))
    if args.format == "json":
        print(json.dumps({"as_of": upto.as_of(), "state": result.driver.to_dict()}, indent=2))
    else:
        print(state_table(result, upto))
    return 0


def _verify(
    args: argparse.Namespace, records: list[LogRecord], processed: Callable[[LogRecord], bool]
) -> int:
    matched, divergence = verify(records, reducers_of(args), processed=processed)
    waiting = sum(not processed(r) for r in records)
    if waiting:
        print(f"{waiting} input(s) not yet consumed by the services; their decisions "
              "are not due yet")  # fmt: skip
    for record in foreign(records):
        print(f"warning: {position(record)}: {record.event.type_name()} "
              f"{record.event.event_id} names producer {record.event.producer!r} and a "
              "cause that is no input of the log: written by something other than the "
              "services, and taken as an input")  # fmt: skip
    if divergence is None:
        print(f"verified {matched} decisions: no difference")
        return 0
    print(f"first difference after {matched} matching decisions:")
    print(divergence.describe())
    return 1
