"""Where a command's log comes from: the broker or an export file, cut at a point, indexed,
or followed live from the services' snapshots; the options that say so and the replay every
read-side command starts from."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from confluent_kafka import Consumer, TopicPartition
from tqdm import tqdm

from jobledger.projections.log.live_log import LiveRead, read_live
from jobledger.projections.log.log_file import (
    LogRecord,
    SkippedRecord,
    processed_by_services,
    read_export,
    read_log,
)
from jobledger.projections.log.log_index import LogIndex, open_index
from jobledger.projections.log.positions import Cut, cut, log_order
from jobledger.projections.log.replay import ReplayResult, replay
from jobledger.projections.log.writers import Writers
from jobledger.schemas import Event, EventSerde, topic_name
from jobledger.schemas.topics import INPUT_ROLES
from jobledger.services import home, kafka, kafka_reads, kafka_topics, signing
from jobledger.services.control.driver import ReducerDriver
from jobledger.services.host.gc_policy import bulk_replay
from jobledger.services.local import secure

from .options import (
    at_option,
    bootstrap_of,
    configuration_of,
    configuration_option,
    position_of,
    prefix_of,
    registry_option,
)

tqdm.monitor_interval = 0
"""No monitor thread: tqdm starts one with its first bar (shown or not) and never stops it,
and a process with a second thread replays in one process (services/host/parallel.py)."""

Subparsers = argparse._SubParsersAction
T = TypeVar("T")


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


def log_records(
    args: argparse.Namespace, from_file: Path | None, provenance: bool = False,
    unsigned_too: bool = False,
) -> list[LogRecord]:  # fmt: skip
    """The log, from an exported file or from the broker (undecodable records reported),
    read under the bulk collection policy: every record read stays alive, and the collector
    walking them all again and again cost half the reading of a million. Signed records
    keep their `provenance` only if asked (to export or check them): a signed log read with
    it held a third more memory, and a signed export replayed a tenth slower. With
    `unsigned_too`, from the broker, unsigned records keep theirs too (`provenance_of`)."""
    if from_file is not None:
        with bulk_replay():
            return list(progress(read_export(from_file, provenance), f"reading {from_file}"))
    consumer = kafka.read_committed_consumer(
        bootstrap_of(args), extra=kafka_reads.BULK_READ | kafka_reads.READ_TO_END
    )
    try:
        with bulk_replay():
            records = list(progress(read_log(
                consumer, prefix_of(args), EventSerde(registry_url=args.schema_registry),
                provenance, unsigned_too,
            ), "reading the log"))  # fmt: skip
        deleted = deleted_before(consumer, prefix_of(args))
    finally:
        consumer.close()
    if deleted:
        print(f"jobledger: retention deleted the oldest records of {', '.join(deleted)}: this "
              "answer is of what remains; a closed job's whole story is in its archive "
              "(--archive), and `job list`, `job show` answer from the services' snapshots",
              file=sys.stderr)  # fmt: skip
    for skipped in (r for r in records if isinstance(r, SkippedRecord)):
        where = f"{skipped.role.value}/{skipped.partition}@{skipped.offset}"
        print(f"{where}: skipped: {skipped.reason}", file=sys.stderr)
    return [r for r in records if isinstance(r, LogRecord)]


def deleted_before(consumer: Consumer, prefix: str) -> list[str]:
    """`role/partition (before OFFSET)` of every input partition whose oldest records the
    broker deleted."""
    cut = []
    for role in INPUT_ROLES:
        topic = topic_name(role, prefix)
        for partition in kafka_topics.partitions_of(consumer, topic):
            low = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)[0]
            if low > 0:
                cut.append(f"{role.value}/{partition} (before {low})")
    return cut


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
    archive_option(p)
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


def archive_option(p: argparse.ArgumentParser) -> None:
    """`--archive`: an archived job's story instead of the broker (`jobledger archive`)."""
    p.add_argument(
        "--archive", metavar="URL",
        help="an archived job's file as `jobledger archive list` prints it, or the archive "
        "location (the job taken from the command's job), instead of the broker",
    )  # fmt: skip


def use_archive(args: argparse.Namespace) -> None:
    """The command's `--archive` read as its `--file` (fetched to a local copy first when
    it is remote): every command that reads an export reads an archived job so."""
    if getattr(args, "archive", None) is None:
        return
    if getattr(args, "file", None) is not None:
        raise argparse.ArgumentTypeError("--archive and --file: give one of them")
    args.file = _archived_file(args)


def _archived_file(args: argparse.Namespace) -> Path:
    """The local file of the command's `--archive`: a URL `archive list` printed, or a
    location with the command's job (its `job` argument, or JOB of an explain's
    JOB/VERTEX target)."""
    from jobledger.projections.log import archive  # only a command given --archive pays

    given: str = args.archive
    if given.endswith(archive.SUFFIX):
        url = given
    else:
        target = getattr(args, "target", None)
        job = getattr(args, "job", None) or (
            target.split("/", 1)[0] if target and "/" in target else None
        )  # fmt: skip
        if not job:
            raise archive.ArchiveError(
                f"--archive {given}: a location needs the job: give the archive file's URL "
                "(`jobledger archive list`)"
            )
        url = archive.job_url(given, job)
    return archive.local_copy(url, home.cache() / "archives")


EXPORT_HINT_RECORDS = 100_000
"""From this many records read from the broker on, a question says how to ask the next ones
of an export's index instead: the broker's log is read whole for each question."""


def ordered_log(args: argparse.Namespace, provenance: bool = False) -> list[LogRecord]:
    """The log, from the broker or `--file`, in the order it was appended (signed records
    with their `provenance` if asked: to say who wrote them)."""
    records = log_records(args, args.file, provenance)
    if args.file is None and len(records) >= EXPORT_HINT_RECORDS:
        print(f"jobledger: read all {len(records)} records of the log from the broker for this "
              "answer; to ask more of it, `jobledger export LOG.avro` once and ask with "
              "`--file LOG.avro` (answered from an index kept beside it)",
              file=sys.stderr)  # fmt: skip
    return log_order(records)


def cut_of(args: argparse.Namespace, provenance: bool = False) -> Cut:
    """The log up to the command's `--at` (with `provenance`, as `ordered_log`)."""
    return cut(ordered_log(args, provenance), position_of(args))


def keyring_option(p: argparse.ArgumentParser) -> None:
    """The keyring that names each record's writer (`writers_of`)."""
    p.add_argument(
        "--keyring", type=Path, metavar="FILE",
        help="name each record's writer by this keyring (`jobledger keys`; default: "
        f"${signing.KEYRING_ENV}, else $JOBLEDGER_HOME/secure/keyring.json if there is one)",
    )  # fmt: skip


def writers_of(args: argparse.Namespace) -> Writers:
    """Who wrote each record, by the command's `--keyring`, else $JOBLEDGER_KEYRING, else
    the home's secure broker's keyring (a signature is named by its key where there is none)."""
    given = getattr(args, "keyring", None)
    path = Path(given or os.environ.get(signing.KEYRING_ENV) or secure.keyring_path())
    if given is None and not path.is_file():
        return Writers()
    return Writers(signing.Keyring.load(path))


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
    event types (of the job topic, only `job`'s records) (projections/log/live_log.py); None
    where that does not answer the question as asked: an export `--file`, `--at` some
    earlier point, `-D` options (the snapshots hold the state the services' own options led
    to), `--no-snapshots`."""
    if any(getattr(args, option, None) for option in ("file", "at", "conf", "no_snapshots")):
        return None
    consumer = kafka.read_committed_consumer(
        bootstrap_of(args), extra=kafka_reads.BULK_READ | kafka_reads.READ_TO_END
    )
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


def processed_by(args: argparse.Namespace) -> Callable[[LogRecord], bool]:
    """Whether the services' consumer group has committed past a record (an exported file
    does not say, so there every record counts as consumed)."""
    if args.file:
        return lambda _: True
    return processed_by_services(bootstrap_of(args), prefix_of(args))
