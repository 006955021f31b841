"""`jobledger export` and `jobledger replay`: the log as one file, and the state it leads to.

The log is read through `log_source.log_records` (not a name bound here), the one read every
read-side command shares."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from jobledger.projections.debugging.tables import state_table
from jobledger.projections.log.archive import archived_job
from jobledger.projections.log.checkpoints import export_metadata, read_checkpoints
from jobledger.projections.log.live_log import latest_snapshot_data
from jobledger.projections.log.log_file import LOG_ROLES, LogRecord, write_export
from jobledger.projections.log.positions import Position, cut, log_order
from jobledger.projections.log.replay import (
    Resumed,
    SignatureCheck,
    SignatureRefused,
    foreign,
    position,
    verify,
)
from jobledger.projections.log.retained import resumed
from jobledger.schemas import topic_name
from jobledger.schemas.topics import TopicRole
from jobledger.services import kafka, kafka_reads
from jobledger.services.host.parallel import default_jobs
from jobledger.services.kafka_topics import watermarks
from jobledger.services.signing import Keyring

from . import log_source
from .log_source import processed_by, reducers_of, replayed
from .options import (
    at_option,
    bootstrap_of,
    configuration_option,
    epoch_ms,
    non_negative_int,
    position_of,
    positive_int,
    prefix_of,
    registry_option,
)

Subparsers = argparse._SubParsersAction


def add_parsers(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("export", parents=[common], help="write the log to an Avro container file")
    p.add_argument("file", type=Path, help="the .avro file to write")
    registry_option(p)
    p.set_defaults(func=cmd_export)

    p = sub.add_parser(
        "replay", parents=[common], help="rebuild every reducer's state from the log",
    )  # fmt: skip
    p.add_argument("--file", type=Path, help="an exported .avro file instead of the broker")
    log_source.archive_option(p)
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
    p.add_argument(
        "--keyring", type=Path, metavar="FILE",
        help="with --verify: also check the signature of every input the services admitted "
        "against this keyring (`jobledger keys`), and report the first refused",
    )  # fmt: skip
    registry_option(p)
    configuration_option(p)
    p.set_defaults(func=cmd_replay, parser=p)


def cmd_export(args: argparse.Namespace) -> int:
    # the checkpoints before the records: each then covers records the export holds
    checkpoints = read_checkpoints(bootstrap_of(args), prefix_of(args))
    records = log_source.log_records(args, None, provenance=True,
                                     unsigned_too=bool(checkpoints))  # fmt: skip
    with open(args.file, "wb") as out:
        count = write_export(records, out, export_metadata(checkpoints))
    print(f"exported {count} records to {args.file}", file=sys.stderr)
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    if args.keyring is not None and not args.verify:
        raise argparse.ArgumentTypeError("--keyring checks signatures as --verify replays: "
                                         "give --verify too")  # fmt: skip
    if args.verify:
        signatures = SignatureCheck(Keyring.load(args.keyring)) if args.keyring else None
        # the services' committed offsets before the records: a decision is written in the
        # transaction that commits its input, so every input committed by now has its
        # decisions in what is read next, and one committed while the log is read (whose
        # decisions may be past what was read) still counts as pending
        processed = processed_by(args)
        records = log_source.log_records(args, args.file, provenance=signatures is not None)
        return _verify(args, records, processed, signatures, _resumed(args, records))
    records = log_source.log_records(args, args.file)
    if args.at is not None and (args.count is not None or args.until_time is not None):
        raise argparse.ArgumentTypeError("--at, --count and --until-time: give one of them")
    point = position_of(args)
    if args.count is not None:
        point = Position.parse(f"count:{args.count}")
    elif args.until_time is not None:
        point = Position.parse(f"s@{args.until_time}")
    upto = cut(log_order(records), point)
    result = replayed(upto, args.jobs, reducers_of(args))
    for where in result.raised:
        print(f"{where}; left out", file=sys.stderr)
    if args.format == "json":
        print(json.dumps({"as_of": upto.as_of(), "state": result.driver.to_dict()}, indent=2))
    else:
        print(state_table(result, upto))
    return 0


def _resumed(args: argparse.Namespace, records: list[LogRecord]) -> Resumed | None:
    """Where the broker's log, as retention left it, is verified from (None: whole, or a
    file). The oldest offsets held are asked after the records were read: what the broker
    deleted in between is then said deleted, never taken for a beginning."""
    if args.file is not None:
        return None
    bootstrap, prefix = bootstrap_of(args), prefix_of(args)
    oldest = {
        (role, partition): low
        for role in LOG_ROLES
        for partition, (low, _) in watermarks(bootstrap, topic_name(role, prefix)).items()
    }  # fmt: skip
    consumer = kafka.read_committed_consumer(bootstrap, extra=kafka_reads.READ_TO_END)
    try:
        snapshots = latest_snapshot_data(consumer, prefix)
    finally:
        consumer.close()
    return resumed(records, oldest, snapshots, prefix)


def _verify(
    args: argparse.Namespace,
    records: list[LogRecord],
    processed: Callable[[LogRecord], bool],
    signatures: SignatureCheck | None,
    from_snapshots: Resumed | None = None,
) -> int:
    job = archived_job(args.file) if args.file else None
    whole = (lambda _: True) if job is None else (
        lambda r: r.role is TopicRole.JOB and r.event.route()[1] == job
    )  # fmt: skip
    if job is not None:
        print(f"the archive of job {job}: its JobMaster's decisions re-derived; the cluster's "
              "records it rests on are verified with the log they were part of")  # fmt: skip
    if from_snapshots is not None:
        starts = ", ".join(
            f"{role.value}/{partition}@{offset}"
            for (role, partition), (offset, _) in sorted(from_snapshots.starts.items())
        )
        print(f"the log as retention left it, verified from the services' snapshots: {starts}")
    matched, divergence = verify(
        records, reducers_of(args), processed, signatures, whole, from_snapshots
    )
    if from_snapshots is not None and from_snapshots.deleted:
        print(f"{from_snapshots.deleted} derived decision(s) of inputs older than what every "
              "partition still holds were not found: deleted by retention")  # fmt: skip
    waiting = sum(not processed(r) for r in records)
    if waiting:
        print(f"{waiting} input(s) not yet consumed by the services; their decisions "
              "are not due yet")  # fmt: skip
    horizon = -1 if from_snapshots is None else from_snapshots.horizon
    for record in foreign(records):
        if record.timestamp < horizon:
            continue  # its cause may be a record retention deleted
        print(f"warning: {position(record)}: {record.event.type_name()} "
              f"{record.event.event_id} names producer {record.event.producer!r} and a "
              "cause that is no input of the log: written by something other than the "
              "services, and taken as an input")  # fmt: skip
    if divergence is None:
        checked = f" and the signatures of {signatures.checked} inputs" if signatures else ""
        print(f"verified {matched} decisions{checked}: no difference")
        return 0
    if isinstance(divergence, SignatureRefused):
        print(divergence.describe())
        return 1
    print(f"first difference after {matched} matching decisions:")
    print(divergence.describe())
    return 1
