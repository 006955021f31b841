"""`jobledger job list` and `job show`: Flink's `flink list` and `flink info`, read from the
log (the broker's topics, or an export with `--file`) as of any point of it (`--at`). They
print what the REST API's `/jobs/overview`, `/jobs/:jobid` and its vertices answer
(`projections/rest/jobs.py`): text for people, or that JSON (`-o json`)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from jobledger.projections.debugging.history import iso
from jobledger.projections.debugging.tables import as_of_line
from jobledger.projections.log.writers import Writer
from jobledger.projections.rest.archived_execution_graph import (
    ARCHIVED,
    ClusterArchive,
    archive,
    archive_of,
)
from jobledger.projections.rest.jobs import job_details, jobs_overview, vertex_details

from .log_source import cut_of, keyring_option, live_log, log_options, reducers_of, writers_of
from .options import (
    connection_options,
)

Subparsers = argparse._SubParsersAction

SECTIONS = (
    ("Running/Restarting Jobs", ("RUNNING", "RESTARTING", "FAILING", "CANCELLING")),
    ("Scheduled Jobs", ("INITIALIZING", "CREATED", "RECONCILING")),
    ("Finished Jobs", ("FINISHED", "FAILED", "CANCELED", "SUSPENDED")),
)
"""`flink list`'s sections, and the statuses each holds."""


def add_parsers(sub: Subparsers, common: argparse.ArgumentParser | None = None) -> None:
    """`list` and `show` under the `job` command (`sub`: its subparsers)."""
    common = common or connection_options()
    p = sub.add_parser(
        "list", parents=[common],
        help="every job: running, scheduled and finished, with their times (flink list)",
    )  # fmt: skip
    log_options(p, snapshots=True)
    p.set_defaults(func=cmd_list, parser=p)

    p = sub.add_parser(
        "show", parents=[common],
        help="a job's plan and status, and every subtask's slot, attempts, timestamps and "
        "restarts (flink info, and more)",
    )  # fmt: skip
    p.add_argument("job", help="the job id")
    log_options(p, snapshots=True)
    keyring_option(p)
    p.set_defaults(func=cmd_show, parser=p)


def _archive(args: argparse.Namespace, job: str | None = None) -> ClusterArchive:
    """The archive as of the command's `--at`; of `job`'s records only, when given."""
    writers = writers_of(args)
    live = live_log(args, ARCHIVED, job)
    if live is not None:
        return archive_of(live.cut, live.driver, live.appended, writers)
    return archive(cut_of(args, provenance=True), reducers_of(args), writers)


def _seconds(ms: int) -> str:
    return f"{ms / 1000:.1f} s" if ms >= 0 else "-"


def cmd_list(args: argparse.Namespace) -> int:
    overview = jobs_overview(_archive(args))
    if args.output == "json":
        print(json.dumps(overview, indent=2))
        return 0
    print(as_of_line_of(overview["as-of"]))
    jobs = overview["jobs"]
    if not jobs:
        print("No jobs in this part of the log.")
    sections = [(title, [j for j in jobs if j["decided"] and j["state"] in statuses])
                for title, statuses in SECTIONS]  # fmt: skip
    sections.insert(1, (SUBMITTED_SECTION, [j for j in jobs if not j["decided"]]))
    for title, shown in sections:
        if not shown:
            continue
        print(f"------------------ {title} ------------------")
        for job in shown:
            state = job["state"] if job["decided"] else "SUBMITTED"
            ended = f", ended {iso(job['end-time'])}" if job["end-time"] >= 0 else ""
            print(f"{iso(job['start-time'])} : {job['jid']} : {job['name']} ({state}; "
                  f"{job['tasks']['finished']}/{job['tasks']['total']} tasks finished, "
                  f"{job['restarts']} restart(s), {_seconds(job['duration'])}{ended})")  # fmt: skip
    return 0


SUBMITTED_SECTION = "Submitted Jobs (no services have decided them yet)"
UNDECIDED = "SUBMITTED (no services have decided it yet)"
"""A job's state where the services have decided none of it: what the reducers here derive
from its records is no decision of theirs (it showed RUNNING for a job no services ever
read)."""


def _state(job: dict[str, Any]) -> str:
    return job["state"] if job["decided"] else UNDECIDED


def as_of_line_of(as_of: dict[str, Any]) -> str:
    """`tables.as_of_line` of an answer's `as-of`."""
    offsets = " ".join(f"{p}@{o}" for p, o in as_of["offsets"].items()) or "none"
    return f"as of {as_of['position']}: {as_of['records']} records, last offsets {offsets}"


def cmd_show(args: argparse.Namespace) -> int:
    cluster = _archive(args, args.job)
    details = job_details(cluster, args.job)
    vertices = [vertex_details(cluster, args.job, v["id"]) for v in details["vertices"]]
    if args.output == "json":
        print(json.dumps({**details, "vertex-details": vertices}, indent=2))
        return 0
    print(as_of_line(cluster.cut))
    _show_text(details, vertices)
    return 0


def _writer(writer: dict[str, Any] | None) -> str:
    """A writer as `projections/log/writers.Writer.text` says it."""
    return Writer(**writer).text() if writer else "nobody in this part of the log"


def _show_text(details: dict[str, Any], vertices: list[dict[str, Any]]) -> None:
    start = details["start-time"]
    ended = f", ended {iso(details['end-time'])}" if details["end-time"] >= 0 else ""
    print(f"job {details['jid']} {details['name']!r}: {_state(details)}, "
          f"{details['restarts']} restart(s)")  # fmt: skip
    print(f"  submitted {iso(start)}{ended}, {_seconds(details['duration'])}")
    print(f"  submitted by: {_writer(details['submitted-by'])}"
          + (f"; cancelled by: {_writer(details['cancelled-by'])}"
             if details["cancelled-by"] else ""))  # fmt: skip
    if details["failure-cause"]:
        print(f"  last failure: {details['failure-cause']}")
    # in the order entered (Flink's timestamps are per status, in the enum's order)
    entered = sorted((t, s) for s, t in details["timestamps"].items() if t)
    reached = [f"{s}@+{_seconds(t - start)}" for t, s in entered]
    print(f"  statuses: {' '.join(reached)}")
    nodes = {n["id"]: n for n in details["plan"]["nodes"]}
    for summary, vertex in zip(details["vertices"], vertices, strict=True):
        edges = nodes.get(vertex["id"], {}).get("inputs", [])
        inputs = ", ".join(f"{i['id']} ({i['ship_strategy']})" for i in edges)
        print(f"\nvertex {vertex['id']} {vertex['name']!r}: {summary['status']}, parallelism "
              f"{vertex['parallelism']} (max {vertex['maxParallelism']})"
              + (f", inputs {inputs}" if inputs else ""))  # fmt: skip
        if not details["decided"]:
            print("  no subtask is scheduled: the services have not read the job yet")
            continue
        for subtask in vertex["subtasks"]:
            for attempt in subtask["attempt-history"]:
                slot = attempt["taskmanager-id"] + (
                    f"/{attempt['slot-index']}" if attempt["slot-index"] is not None else ""
                )
                states = " ".join(
                    f"{s}@+{_seconds(t - start)}" for s, t in attempt["timestamps"].items()
                )
                print(f"  [{subtask['subtask']}] #{attempt['attempt']} {attempt['status']:<12} "
                      f"{slot:<18} {states}")  # fmt: skip
                if attempt["error"]:
                    print(f"      error: {attempt['error']}")
