"""`jobledger produce` and `jobledger schemas`: events in from any shell, and the catalog
they are checked against."""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import ExitStack

from jobledger.schemas import EVENTS_BY_NAME, EventSerde, docs
from jobledger.schemas.catalog import (
    LOAD_ORDER,
    avsc_path,
    generated_files,
    load_order_text,
    stray_files,
    write_files,
)
from jobledger.services import kafka
from jobledger.services.client.produce import produce_lines
from jobledger.services.host import snapshot

from .options import bootstrap_of, prefix_of, registry_option

Subparsers = argparse._SubParsersAction


def add_parsers(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "produce", parents=[common], help="append JSON events (one per line) to their topics"
    )
    p.add_argument("file", nargs="?", default="-", help="JSON lines file, or - for stdin")
    p.add_argument(
        "--skip-invalid",
        action="store_true",
        help="write the valid lines even if some are not (default: one bad line writes nothing)",
    )
    registry_option(p)
    p.set_defaults(func=cmd_produce)

    p = sub.add_parser("schemas", help="the Avro event catalog")
    schemas = p.add_subparsers(dest="schemas_command", required=True, metavar="ACTION")
    c = schemas.add_parser("list", help="every event type: its topic, its key and what it means")
    c.set_defaults(func=cmd_schemas_list)
    c = schemas.add_parser("show", help="print an event's .avsc")
    c.add_argument("type", help="event type, e.g. SlotOffered")
    c.set_defaults(func=cmd_schemas_show)
    c = schemas.add_parser(
        "write", help="regenerate the .avsc files from the models and the snapshot's state"
    )
    c.add_argument("--check", action="store_true", help="fail if the files are out of date")
    c.set_defaults(func=cmd_schemas_write)


def cmd_produce(args: argparse.Namespace) -> int:
    with ExitStack() as stack:
        lines = sys.stdin if args.file == "-" else stack.enter_context(open(args.file))
        bootstrap = bootstrap_of(args)
        producer = kafka.transactional_producer(bootstrap, "cli")
        report = produce_lines(
            lines,
            producer,
            EventSerde(registry_url=args.schema_registry),
            prefix_of(args),
            skip_invalid=args.skip_invalid,
        )
    for rejected in report.rejected:
        print(f"line {rejected.line_number}: {rejected.reason}", file=sys.stderr)
    if report.rejected and not args.skip_invalid:
        print(
            f"wrote nothing: {len(report.rejected)} lines are not valid events "
            "(fix them, or pass --skip-invalid to write the others)",
            file=sys.stderr,
        )
        return 1
    if report.failure is not None:
        print(
            f"the broker refused a write: {report.failure}; lines 1-{report.last_written_line} "
            f"were written ({report.written} events), the lines after them were not",
            file=sys.stderr,
        )
        return 1
    print(f"wrote {report.written} events, rejected {len(report.rejected)} lines", file=sys.stderr)
    return 1 if report.rejected else 0


def cmd_schemas_list(args: argparse.Namespace) -> int:
    for name, cls in EVENTS_BY_NAME.items():
        role, key = cls.topic_role.value, cls.key_field
        print(f"{name}\t{role}\tkey={key}\t{docs.meaning(cls)}")
    return 0


def cmd_schemas_show(args: argparse.Namespace) -> int:
    cls = EVENTS_BY_NAME.get(args.type)
    if cls is None:
        print(f"unknown event type {args.type!r}; see `jobledger schemas list`", file=sys.stderr)
        return 1
    print(avsc_path(cls).read_text(), end="")
    return 0


def cmd_schemas_write(args: argparse.Namespace) -> int:
    readme = docs.README.read_text()
    if args.check:
        stale = [
            path.name
            for path, schema in generated_files().items()
            if not path.exists() or json.loads(path.read_text()) != schema
        ]
        stale.extend(f"{path.name} (no model generates it)" for path in stray_files())
        if not LOAD_ORDER.exists() or LOAD_ORDER.read_text() != load_order_text():
            stale.append(LOAD_ORDER.name)
        if docs.readme_with_table(readme) != readme:
            stale.append(docs.README.name)
        if not snapshot.SCHEMA_FILE.exists() or (
            snapshot.SCHEMA_FILE.read_text() != snapshot.schema_file_text()
        ):
            stale.append(f"services/{snapshot.SCHEMA_FILE.name}")
        for name in stale:
            print(f"out of date: {name}", file=sys.stderr)
        return 1 if stale else 0
    for path in write_files():
        print(path.name)
    docs.README.write_text(docs.readme_with_table(readme))
    print(docs.README.name)
    for path in snapshot.write_schema_file():
        print(f"services/{path.relative_to(snapshot.SCHEMA_FILE.parent)}")
    return 0
