"""`jobledger job submit | cancel | wait`: what Flink's `flink run` and `flink cancel` do, and
a wait for a job's result, over the log.

`submit` takes a JobGraph (a JSON file, `-` for stdin, or a Python builder `module:function`
returning one), checks it before anything is written and appends it with everything a job
needs to start (`services/client/dispatcher.py`); `cancel` asks the job's JobMaster to cancel it;
`wait` follows the job's partition of the job topic until the JobMaster decides a globally
terminal status, and past its `--timeout` says what the job waits for.

`add_parsers` returns the `job` group's subparsers, so the read-only views (`job list`,
`job show`: `job_views.add_parsers`) join the same group where `main.py` builds the parser.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from jobledger.projections.debugging.explain import waiting_for
from jobledger.projections.debugging.history import UnknownJob, belongs_to, iso
from jobledger.projections.log.job_results import JobWatcher, SubmissionRefused, job_list
from jobledger.projections.log.log_file import LogRecord, processed_by_services
from jobledger.projections.log.positions import cut, log_order
from jobledger.projections.log.replay import position as where
from jobledger.projections.log.replay import replay
from jobledger.schemas import EventSerde, event_to_dict
from jobledger.schemas.jobs import JobSubmitted
from jobledger.schemas.types import JobStatus
from jobledger.services import kafka, kafka_topics
from jobledger.services.client import dispatcher
from jobledger.services.client.dispatcher import JobGraphRefused
from jobledger.services.control.job_status import GLOBALLY_TERMINAL
from jobledger.services.runner.operators import (
    BUILTIN_FUNCTIONS,
    FunctionLoader,
    OperatorError,
    check_shape,
    user_modules,
)

from .log_source import log_records, reducers_of
from .options import (
    CommandFailed,
    bootstrap_of,
    configuration_of,
    configuration_option,
    output_option,
    positive_float,
    prefix_of,
    registry_option,
)

Subparsers = argparse._SubParsersAction

PRODUCER = "cli"
"""The `producer` of what these commands write."""
READ_TIMEOUT_S = 30.0
"""How long `submit` and `cancel` may take to read the job's partition to its end."""
WAIT_TIMEOUT_S = 300.0
TIMED_OUT = 124
"""`job wait`'s exit status when the job did not end in time (GNU timeout's), apart from 0
(FINISHED), 1 (FAILED or CANCELED, or the command failed) and 2 (usage)."""
BUILDER = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def add_parsers(sub: Subparsers, common: argparse.ArgumentParser) -> Subparsers:
    p = sub.add_parser(
        "job", help="submit, list, show, cancel and wait for jobs, as Flink's CLI does"
    )
    jobs = p.add_subparsers(dest="job_command", required=True, metavar="ACTION")

    c = jobs.add_parser(
        "submit", parents=[common],
        help="submit a JobGraph (checked first; leadership and the ResourceManager connection "
        "are written with it) and print the job id",
    )  # fmt: skip
    c.add_argument(
        "jobgraph", metavar="JOBGRAPH",
        help="a JobGraph JSON file (- for stdin), or a Python builder module:function "
        "returning one (importable from the current directory)",
    )  # fmt: skip
    c.add_argument(
        "--job-id", help="the job's id (default: the JobGraph's job_id, else a fresh one)"
    )
    c.add_argument(
        "--principal", help="the tenant the job counts against (its limits and slot share; "
        "default: the JobGraph's principal, else none: 'anonymous'); a secured cluster "
        "dead-letters any name but the signer's own",
    )  # fmt: skip
    registry_option(c)
    configuration_option(c)
    output_option(c)
    c.set_defaults(func=cmd_submit, parser=c)

    c = jobs.add_parser("cancel", parents=[common], help="ask a job's JobMaster to cancel it")
    c.add_argument("job", help="the job id")
    registry_option(c)
    output_option(c)
    c.set_defaults(func=cmd_cancel, parser=c)

    c = jobs.add_parser(
        "wait", parents=[common],
        help="wait until a job is FINISHED, FAILED or CANCELED and print which (exit status: "
        f"0 FINISHED, 1 FAILED or CANCELED, {TIMED_OUT} not ended in time)",
    )  # fmt: skip
    c.add_argument("job", help="the job id")
    c.add_argument(
        "--timeout", type=positive_float, default=WAIT_TIMEOUT_S, metavar="SECONDS",
        help="give up after this long and say what the job waits for",
    )  # fmt: skip
    registry_option(c)
    configuration_option(c)
    output_option(c)
    c.set_defaults(func=cmd_wait, parser=c)
    return jobs


# -- submit --------------------------------------------------------------------------------


def load_job_graph(source: str) -> tuple[Any, str]:
    """The JobGraph document `source` names, and the job name to use where it has none
    (the file's stem, or the builder function's name)."""
    if source == "-":
        return _parse(sys.stdin.read()), "stdin"
    path = Path(source)
    if path.is_file():
        return _parse(path.read_text(encoding="utf-8")), path.stem
    if BUILDER.match(source):
        return _build(source), source.rsplit(":", 1)[1]
    raise JobGraphRefused("no such file, and not a Python builder module:function")


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _parse(text: str) -> Any:
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except ValueError as exc:
        raise JobGraphRefused(f"not JSON: {exc}") from None


def _build(reference: str) -> Any:
    """Call a builder: the user's own code, named by the user, as `python -m` would run it
    (the current directory first on the import path)."""
    module_name, function_name = reference.rsplit(":", 1)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the user's module: any error while importing it is theirs
        raise JobGraphRefused(f"cannot import {module_name}: {type(exc).__name__}: {exc}") from None
    builder = getattr(module, function_name, None)
    if not callable(builder):
        raise JobGraphRefused(f"module {module_name} has no function {function_name}")
    try:
        graph = builder()
    except Exception as exc:  # the user's function: any error it raises is theirs
        raise JobGraphRefused(f"{reference}() raised {type(exc).__name__}: {exc}") from None
    if isinstance(graph, JobSubmitted):
        return event_to_dict(graph)
    if isinstance(graph, dict):
        return graph
    raise JobGraphRefused(
        f"{reference}() returned {type(graph).__name__}, not a JobGraph (a dict of its JSON "
        "form, or a JobSubmitted)"
    )


def _check_operators(job: JobSubmitted, prefix: str) -> list[str]:
    """Refuse a chain no runner could run (an unknown operator, a missing config, a source
    out of place, a built-in function that does not exist) before anything is written: it
    failed only when its task ran, restarts later. What only the runner can tell (its
    allow-list of modules) is a warning."""
    builtins = FunctionLoader()
    warnings = []
    for vertex in job.vertices:
        try:
            check_shape(vertex.operators, bool(vertex.inputs), prefix)
            for spec in vertex.operators:
                reference = spec.config.get("function", "")
                if reference.startswith(f"{BUILTIN_FUNCTIONS}:"):
                    builtins.load(reference)
        except OperatorError as exc:
            raise JobGraphRefused(f"vertex {vertex.vertex_id!r}: {exc}") from None
        warnings += [
            f"vertex {vertex.vertex_id!r} calls {module}: a runner runs it only with "
            f"`--allow-module {module}`"
            for module in sorted(user_modules(vertex.operators))
        ]
    return warnings


def cmd_submit(args: argparse.Namespace) -> int:
    prefix = prefix_of(args)
    serde = EventSerde(registry_url=args.schema_registry)
    try:
        graph, name = load_job_graph(args.jobgraph)
        limits = configuration_of(args).job_limits()
        checked = dispatcher.check_job_graph(
            graph, PRODUCER, serde, prefix, args.job_id, name, limits, args.principal
        )
        job = checked.event
        assert isinstance(job, JobSubmitted)
        warnings = _check_operators(job, prefix)
    except JobGraphRefused as exc:
        raise JobGraphRefused(f"{args.jobgraph}: {exc}") from None
    for warning in warnings:
        print(f"jobledger: warning: {warning}", file=sys.stderr)
    bootstrap = bootstrap_of(args)
    watcher = JobWatcher(bootstrap, prefix, (job.job_id,), serde)
    try:
        watcher.catch_up(READ_TIMEOUT_S)
        if job.job_id in watcher.submitted:
            status = watcher.status(job.job_id)
            raise CommandFailed(
                f"job {job.job_id} was already submitted (it is "
                f"{status.value if status else 'not started yet'}); give another --job-id"
            )
    finally:
        watcher.close()
    client = kafka.transactional_producer(bootstrap, PRODUCER)
    events = dispatcher.submit(client, prefix, checked, serde)
    subtasks = sum(v.parallelism for v in job.vertices)
    if args.output == "json":
        print(json.dumps({
            "job_id": job.job_id, "job_name": job.job_name, "subtasks": subtasks,
            "events": [{"type": e.type_name(), "event_id": e.event_id} for e in events],
            "job_master_id": events[1].job_master_id,
        }, indent=2))  # fmt: skip
        return 0
    print(job.job_id)
    print(f"submitted job {job.job_id} ({job.job_name!r}: {len(job.vertices)} vertices, "
          f"{subtasks} subtasks) to {prefix}*; `jobledger job wait {job.job_id}` waits for it",
          file=sys.stderr)  # fmt: skip
    return 0


# -- cancel --------------------------------------------------------------------------------


def _watcher(args: argparse.Namespace, every: bool = False) -> JobWatcher:
    """A watcher of the job topic: of the partition of `args.job`, or of `every` one."""
    serde = EventSerde(registry_url=args.schema_registry)
    jobs = () if every else (args.job,)
    return JobWatcher(bootstrap_of(args), prefix_of(args), jobs, serde)


def _submitted(args: argparse.Namespace, watcher: JobWatcher) -> None:
    """UnknownJob naming the jobs that were submitted, unless `args.job` is one of them."""
    if args.job in watcher.submitted:
        return
    every = _watcher(args, every=True)
    try:
        every.catch_up(READ_TIMEOUT_S)
        known = list(every.submitted)
    finally:
        every.close()
    raise UnknownJob(
        f"no job {args.job!r} was submitted on {prefix_of(args)}*; jobs: {job_list(known)}"
    )


def cmd_cancel(args: argparse.Namespace) -> int:
    watcher = _watcher(args)
    try:
        watcher.catch_up(READ_TIMEOUT_S)
        _submitted(args, watcher)
        status = watcher.status(args.job)
        refused = watcher.refused.get(args.job)
    finally:
        watcher.close()
    if refused is not None:
        raise CommandFailed(f"the JobMaster refused job {args.job}, nothing to cancel: {refused}")
    if status in GLOBALLY_TERMINAL:
        raise CommandFailed(f"job {args.job} has already ended: {status.value}")
    before = status.value if status else "not started yet"
    if status is JobStatus.CANCELLING:
        request = None
    else:
        client = kafka.transactional_producer(bootstrap_of(args), PRODUCER)
        serde = EventSerde(registry_url=args.schema_registry)
        request = dispatcher.cancel(client, prefix_of(args), args.job, PRODUCER, serde)
    if args.output == "json":
        requested = request.event_id if request else None
        print(json.dumps({"job_id": args.job, "status": before, "requested": requested}, indent=2))
    elif request is None:
        print(f"job {args.job} is already being cancelled")
    else:
        print(f"cancellation of job {args.job} requested (it was {before}); "
              f"`jobledger job wait {args.job}` waits for it to be CANCELED")  # fmt: skip
    return 0


# -- wait ----------------------------------------------------------------------------------


def cmd_wait(args: argparse.Namespace) -> int:
    watcher = _watcher(args)
    deadline = time.monotonic() + args.timeout
    try:
        watcher.catch_up(max(0.0, deadline - time.monotonic()))
        _submitted(args, watcher)
        watcher.wait(args.job, max(0.0, deadline - time.monotonic()))
    except TimeoutError:
        return _timed_out(args, watcher.status(args.job), watcher.forged.get(args.job, []))
    except SubmissionRefused as exc:
        raise CommandFailed(f"the JobMaster refused job {args.job}: {exc}") from None
    finally:
        watcher.close()
    record = watcher.ended[args.job]
    end = record.event
    if args.output == "json":
        print(json.dumps({
            "job_id": args.job, "status": end.to_status.value, "cause": end.cause,
            "ended": True, "position": where(record), "time": iso(record.timestamp),
        }, indent=2))  # fmt: skip
    else:
        cause = f": {end.cause}" if end.cause else ""
        print(f"job {args.job} {end.to_status.value} at {iso(record.timestamp)} "
              f"({where(record)}){cause}")  # fmt: skip
    return 0 if end.to_status is JobStatus.FINISHED else 1


def _services_progress(args: argparse.Namespace, ordered: list[LogRecord], now_ms: int) -> str:
    """Whether the services have read the job's records, and if not, how many are unread,
    since when, and whether any services instance is there to read them: only what holds
    (a record appended a moment ago is unread for a moment, with the services at work)."""
    prefix = prefix_of(args)
    processed = processed_by_services(bootstrap_of(args), prefix)
    mine = [r for r in ordered if belongs_to(r.event, args.job)]
    unread = [r for r in mine if not processed(r)]
    if not unread:
        last = f" (the last: {where(mine[-1])})" if mine else ""
        return f"not for the services: they have read every record of the job{last}"
    first = unread[0]
    group = f"{kafka.SERVICES_GROUP_PREFIX}{prefix}"
    members = kafka_topics.group_members(bootstrap_of(args), group)
    ago = max(0.0, (now_ms - first.timestamp) / 1000)
    unread_line = (
        f"the services to read {len(unread)} of the job's records (the first: "
        f"{first.event.type_name()} at {where(first)}, appended {ago:.1f} s before this check)"
    )
    if not members:
        return f"{unread_line}: no `jobledger services run` is in their group {group}"
    return f"{unread_line}; {members} services instance(s) in their group"


def _timed_out(args: argparse.Namespace, status: JobStatus | None, forged: list[str]) -> int:
    """What the job waits for, from a replay of the whole log and the services' progress
    through it, and the claims of its end the services dead-lettered; exit status
    TIMED_OUT."""
    ordered = log_order(log_records(args, None))
    upto = cut(ordered, "end")
    now_ms = int(time.time() * 1000)
    waits = [_services_progress(args, ordered, now_ms)]
    waits += waiting_for(ordered, replay(ordered, reducers_of(args)).driver, args.job, now_ms)
    shown = status.value if status else "not started yet"
    if args.output == "json":
        print(json.dumps({"job_id": args.job, "status": status.value if status else None,
                          "ended": False, "waited_s": args.timeout, "waiting_for": waits,
                          "ignored": forged, "as_of": upto.as_of()}, indent=2))  # fmt: skip
    else:
        print(f"job {args.job} is {shown} after {args.timeout:g} s, waiting for:")
        print("\n".join(f"  {line}" for line in waits))
        if forged:
            print("ignored, as the services dead-lettered them:")
            print("\n".join(f"  {claim}" for claim in forged))
    print(f"jobledger: job {args.job} did not end within {args.timeout:g} s (it is {shown})",
          file=sys.stderr)  # fmt: skip
    return TIMED_OUT
