"""`jobledger kvstate lookup JOB NAME KEY`: queryable state, found the way Flink's
QueryableStateClient finds it: the key's key group, the job's KvState location registry (its
JobMaster's state, replayed from the log) for the KvState instance that owns that group, then
that instance's value for the key (`services/runner/kv_state.py`)."""

from __future__ import annotations

import argparse
import json

from jobledger.projections.debugging.history import UnknownJob
from jobledger.projections.debugging.tables import as_of_line
from jobledger.projections.log.job_results import job_list
from jobledger.projections.log.positions import cut, log_order
from jobledger.services.control.key_groups import assign_to_key_group
from jobledger.services.runner import kv_state

from .log_source import live_log, log_records, reducers_of, replayed, snapshots_option
from .options import (
    CommandFailed,
    bootstrap_of,
    configuration_option,
    output_option,
    prefix_of,
    registry_option,
)

Subparsers = argparse._SubParsersAction


def add_parsers(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("kvstate", help="queryable state of running and finished jobs")
    kv = p.add_subparsers(dest="kvstate_command", required=True, metavar="ACTION")
    c = kv.add_parser(
        "lookup", parents=[common],
        help="the value of KEY in a job's queryable state NAME, through its KvState locations",
    )  # fmt: skip
    c.add_argument("job", help="the job id")
    c.add_argument("name", help="the state's registration name (a keyed operator's `queryable`)")
    c.add_argument("key", help="the key (a string; with --json-key, JSON)")
    c.add_argument(
        "--json-key", action="store_true",
        help="KEY is JSON: 7 is the number, '\"7\"' the string (keys are what key_by made them)",
    )  # fmt: skip
    snapshots_option(c)
    registry_option(c)
    configuration_option(c)
    output_option(c)
    c.set_defaults(func=cmd_lookup, parser=c)


def _key(args: argparse.Namespace) -> object:
    if not args.json_key:
        return args.key
    try:
        return json.loads(args.key)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--json-key: {args.key!r} is not JSON") from None


def cmd_lookup(args: argparse.Namespace) -> int:
    key = _key(args)
    live = live_log(args, ())
    if live is not None:
        upto, driver = live.cut, live.driver
    else:
        upto = cut(log_order(log_records(args, None)), "end")
        driver = replayed(upto, driver_factory=reducers_of(args)).driver
    jm = driver.job_masters.get(args.job)
    if jm is None or jm.job is None:
        known = [j for j, m in driver.job_masters.items() if m.job is not None]
        raise UnknownJob(f"no job {args.job!r} in the log; jobs: {job_list(known)}")
    locations = jm.registry.locations if jm.registry else {}
    location = locations.get(args.name)
    if location is None:
        names = ", ".join(sorted(locations)) or "none (a keyed task registers its state as it runs)"
        raise CommandFailed(
            f"job {args.job} has no queryable state {args.name!r}; registered: {names}"
        )
    try:
        key_group = assign_to_key_group(key, location.num_key_groups)
    except (TypeError, ValueError) as exc:
        raise CommandFailed(f"key {key!r} has no key group: {exc}") from None
    owner = location.lookup(key_group)
    if owner is None:
        raise CommandFailed(
            f"no KvState of {args.name!r} holds key group {key_group} of "
            f"{location.num_key_groups} (the subtask owning it has not registered it)"
        )
    value = kv_state.lookup(bootstrap_of(args), prefix_of(args), owner.kv_state_id, key)
    if value is None:
        raise CommandFailed(
            f"no value for key {key!r} in {args.name!r} of job {args.job} "
            f"(KvState {owner.kv_state_id}, key group {key_group})"
        )
    if args.output == "json":
        print(json.dumps({
            "job_id": args.job, "name": args.name, "key": key, "value": value,
            "key_group": key_group, "kv_state_id": owner.kv_state_id,
            "server": f"{owner.server_host}:{owner.server_port}", "as_of": upto.as_of(),
        }, indent=2))  # fmt: skip
        return 0
    print(f"{args.name}[{json.dumps(key)}] = {json.dumps(value)}")
    print(f"  key group {key_group} of {location.num_key_groups} -> KvState {owner.kv_state_id} "
          f"on {owner.server_host}:{owner.server_port}; {as_of_line(upto)}")  # fmt: skip
    return 0
