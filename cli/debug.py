"""The debugging suite: `history`, `slots`, `diff` (and their shared options). Each reads the
broker's topics, or an export with `--file`, answers as of a point of the log (`--at`), says
which offsets it reflects, and prints text for people or JSON (`-o json`)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from jobledger.projections.debugging.diff import diff
from jobledger.projections.debugging.explain import Story, explain, task_job
from jobledger.projections.debugging.history import Entry, belongs_to, history
from jobledger.projections.debugging.slots import pending_requests, slot_report
from jobledger.projections.debugging.tables import as_of_line
from jobledger.projections.debugging.timeline import bars, timeline
from jobledger.projections.debugging.timeline import draw as draw_timeline
from jobledger.projections.log.log_file import LOG_ROLES, LogRecord
from jobledger.projections.log.log_index import IndexedCut, LogIndex
from jobledger.projections.log.positions import FORMS, Cut, Position, PositionError, cut
from jobledger.projections.log.provenance import provenance_of
from jobledger.projections.log.writers import Writers
from jobledger.schemas import DecodeError, EventSerde, roles_by_topic
from jobledger.schemas.timers import TimerFired
from jobledger.services import kafka, kafka_reads, kafka_topics
from jobledger.services.control.driver import ReducerDriver

from .log_source import (
    cut_of,
    keyring_option,
    log_index,
    log_options,
    ordered_log,
    reducers_of,
    replayed,
    writers_of,
)
from .options import bootstrap_of, position, position_of, prefix_of

Subparsers = argparse._SubParsersAction
T = TypeVar("T")


def add_parsers(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "history", parents=[common],
        help="every event of one job across all topics, in log order, each with its cause",
    )  # fmt: skip
    p.add_argument("job", help="the job id")
    log_options(p, ("text", "json", "jsonl"))
    p.add_argument("--timers", action="store_true", help="also show the clock's TimerFired ticks")
    p.add_argument(
        "--by", metavar="PRINCIPAL",
        help="only the events PRINCIPAL wrote (as the keyring names the signer)",
    )  # fmt: skip
    keyring_option(p)
    p.add_argument(
        "--follow", action="store_true",
        help="keep printing the job's events as the log grows (not with --file or --at)",
    )  # fmt: skip
    p.set_defaults(func=cmd_history, parser=p)

    p = sub.add_parser(
        "explain", parents=[common],
        help="why: an event's causes, a task's story (JOB/VERTEX[SUBTASK]#ATTEMPT), an "
        "allocation's or a TaskExecutor's events",
    )  # fmt: skip
    p.add_argument("target", help="an event id, JOB/VERTEX[SUBTASK][#ATTEMPT], an allocation id "
                   "or a TaskExecutor's resource id")  # fmt: skip
    log_options(p)
    keyring_option(p)
    p.set_defaults(func=cmd_explain, parser=p)

    p = sub.add_parser(
        "timeline", parents=[common],
        help="a job's attempts per slot over time: lines, JSON, or a Gantt chart (-o FILE.svg)",
    )  # fmt: skip
    p.add_argument("job", help="the job id")
    log_options(p, formats=None)
    p.add_argument(
        "-o", "--output", default="text", metavar="text|json|FILE",
        help="lines, the bars as JSON, or a picture (FILE ending in .svg, .png or .pdf)",
    )  # fmt: skip
    p.set_defaults(func=cmd_timeline, parser=p)

    p = sub.add_parser(
        "slots", parents=[common],
        help="every job's pending slot requests and why nothing satisfies them; every slot",
    )  # fmt: skip
    log_options(p)
    p.set_defaults(func=cmd_slots, parser=p)

    p = sub.add_parser(
        "diff", parents=[common], help="what changed in every reducer's state between two points"
    )
    p.add_argument("before", type=position, help=f"the earlier point: {FORMS}")
    p.add_argument("after", type=position, nargs="?", help="the later point (default: end)")
    log_options(p, at=False)
    p.set_defaults(func=cmd_diff, parser=p)


def _indexed(args: argparse.Namespace, read: Callable[[LogIndex, IndexedCut], T | None]) -> (
    tuple[Cut, T] | None
):  # fmt: skip
    """What `read` takes from the `--file`'s index at the command's `--at`, with the cut;
    None where the file has no index here or the index cannot say (a position or target
    that names nothing: the unindexed path says what exists)."""
    index = log_index(args)
    if index is None:
        return None
    upto = index.cut(position_of(args))
    found = None if upto is None else read(index, upto)
    return None if found is None else (upto, found)


def cmd_history(args: argparse.Namespace) -> int:
    if args.follow and (args.file or args.at):
        raise argparse.ArgumentTypeError("--follow reads the live log: not with --file or --at")
    indexed = _indexed(args, lambda index, upto: index.history_records(upto, args.job))
    upto, records = indexed or (cut_of(args, provenance=True), None)
    writers = writers_of(args)
    entries = history(upto.records if records is None else records, args.job,
                      timers=args.timers, writers=writers, by=args.by)  # fmt: skip
    if args.output == "json":
        print(json.dumps({"as_of": upto.as_of(), "job": args.job, "by": args.by,
                          "events": [e.to_dict() for e in entries]}, indent=2))  # fmt: skip
        return 0
    if args.output == "text":
        print(as_of_line(upto))
    for entry in entries:
        _print_entry(entry, args.output)
    if args.follow:
        _follow(args, upto, writers)
    return 0


def _print_entry(entry: Entry, output: str) -> None:
    text = entry.line() if output == "text" else json.dumps(entry.to_dict())
    print(text, flush=True)


def _follow(args: argparse.Namespace, upto: Cut, writers: Writers) -> None:
    """The job's events appended after the cut, as they come (causes looked up among the
    records seen so far)."""
    prefix = prefix_of(args)
    serde = EventSerde(registry_url=args.schema_registry)
    consumer = kafka.read_committed_consumer(bootstrap_of(args))
    roles = roles_by_topic(prefix, LOG_ROLES)
    starts = {
        (topic, p): upto.offsets.get(f"{role.value}/{p}", -1) + 1
        for topic, role in roles.items()
        for p in kafka_topics.partitions_of(consumer, topic)
    }
    seen = {r.event.event_id: r for r in upto.records}
    try:
        for msg in kafka_reads.follow(consumer, starts):
            try:
                event = serde.decode(msg.value(), msg.topic())
            except DecodeError:
                continue
            signed = provenance_of(msg, msg.value())
            record = LogRecord(roles[msg.topic()], msg.partition(), msg.offset(),
                               msg.timestamp()[1], event, signed)  # fmt: skip
            seen.setdefault(event.event_id, record)
            if not belongs_to(event, args.job) or not (
                args.timers or not isinstance(event, TimerFired)
            ):
                continue
            writer = writers.of(record)
            if args.by is None or writer.principal == args.by:
                cause = seen.get(event.cause_event_id) if event.cause_event_id else None
                _print_entry(Entry(record, cause, writer), args.output)
    finally:
        consumer.close()


def cmd_slots(args: argparse.Namespace) -> int:
    indexed = _indexed(args, lambda index, upto: index.state(upto))
    if indexed is None:
        upto = cut_of(args)
        report = slot_report(replayed(upto, driver_factory=reducers_of(args)).driver, upto)
    else:
        upto, driver = indexed
        asked = log_index(args).request_times(upto, pending_requests(driver))
        report = slot_report(driver, upto, asked)
    if args.output == "json":
        print(json.dumps(report.to_dict(), indent=2))
        return 0
    print(as_of_line(upto))
    print(f"\npending slot requests: {len(report.pending)}")
    for p in report.pending:
        age = f"{p.age_ms / 1000:.1f} s" if p.age_ms is not None else "?"
        print(f"  {p.job_id} {p.slot_request_id} ({p.profile}, waiting {age}): {p.reason}")
    for job_id, slots in report.jobs.items():
        print(f"\njob {job_id}: {len(slots['allocated'])} allocated, "
              f"{len(slots['available'])} available")  # fmt: skip
        for request, slot in slots["allocated"].items():
            print(f"  {request} -> {slot}")
        for slot in slots["available"]:
            print(f"  available: {slot}")
    for rid, slots in report.task_executors.items():
        print(f"\nTaskExecutor {rid}")
        for s in slots:
            owner = f" {s['allocation']} of {s['job']}" if s["allocation"] else ""
            mine = f" (its own table: {s['at_task_executor']})" if s["at_task_executor"] else ""
            print(f"  slot {s['index']}: {s['at_resource_manager']}{owner}{mine}")
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    index = log_index(args)
    points = (args.before, args.after or Position.parse("end"))
    cuts = [index.cut(point) for point in points] if index is not None else [None]
    if None in cuts:
        ordered = ordered_log(args)
        cuts = [cut(ordered, point) for point in points]
    before, after = cuts
    if before.size > after.size:
        raise PositionError(
            f"{before.position} is after {after.position} in this log: give the earlier first"
        )
    reducers = reducers_of(args)
    if index is not None and isinstance(before, IndexedCut):
        states = [index.state(before), index.state(after)]
    else:
        states = [replayed(c, driver_factory=reducers).driver for c in (before, after)]
    changes = diff(states[0].to_dict(), states[1].to_dict())
    if args.output == "json":
        answer = {"from": before.as_of(), "to": after.as_of(),
                  "changes": [c.to_dict() for c in changes]}  # fmt: skip
        print(json.dumps(answer, indent=2, default=str))
        return 0
    print(f"from {as_of_line(before)}")
    print(f"to   {as_of_line(after)}")
    print(f"{len(changes)} change(s)")
    for change in changes:
        print(change.line())
    return 0


def _explained(index: LogIndex, upto: IndexedCut, target: str, writers: Writers) -> Story | None:
    """`explain` from the index: a task from its job's records and the state of its
    partitions, anything else from the records naming it and their causes."""
    job = task_job(target)
    if job is None:
        records = index.explain_records(upto, target.removeprefix("id:"))
        return None if records is None else explain(records, ReducerDriver(), target, writers)
    if not index.submitted(upto, job):
        return None
    records = index.job_records(upto, job)
    driver = index.state(upto, index.job_partitions(upto, job))
    return explain(records, driver, target, writers)


def cmd_explain(args: argparse.Namespace) -> int:
    writers = writers_of(args)
    indexed = _indexed(args, lambda index, upto: _explained(index, upto, args.target, writers))
    if indexed is None:
        upto = cut_of(args, provenance=True)
        story = explain(upto.records, replayed(upto, driver_factory=reducers_of(args)).driver,
                        args.target, writers)  # fmt: skip
    else:
        upto, story = indexed
    if args.output == "json":
        print(json.dumps({"as_of": upto.as_of(), **story.to_dict()}, indent=2))
        return 0
    print(as_of_line(upto))
    print(story.text())
    return 0


PICTURES = (".svg", ".png", ".pdf")


def cmd_timeline(args: argparse.Namespace) -> int:
    if args.output not in ("text", "json") and Path(args.output).suffix not in PICTURES:
        raise argparse.ArgumentTypeError(
            f"-o {args.output}: text, json, or a file ending in {', '.join(PICTURES)}"
        )
    indexed = _indexed(args, lambda index, upto: index.job_records(upto, args.job))
    upto, records = indexed or (cut_of(args), None)
    records = upto.records if records is None else records
    history(records, args.job)  # an unknown job is an error naming the known ones
    if args.output == "json":
        drawn, restarts = bars(records, args.job, reducers_of(args))
        print(json.dumps({"as_of": upto.as_of(), "job": args.job, "restarts_s": restarts,
                          "bars": [vars(b) for b in drawn]}, indent=2))  # fmt: skip
        return 0
    if args.output == "text":
        print(as_of_line(upto))
        print("\n".join(timeline(records, args.job, reducers_of(args))))
        return 0
    count = draw_timeline(records, args.job, Path(args.output), reducers_of(args))
    print(f"wrote {args.output}: {count} bars ({as_of_line(upto)})")
    return 0
