"""The `jobledger` command line: one entry point, a subcommand per job to be done."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path

from confluent_kafka import KafkaException

from jobledger.projections.log_file import (
    LogRecord,
    SkippedRecord,
    processed_by_services,
    read_export,
    read_log,
    write_export,
)
from jobledger.projections.replay import Limit, foreign, position, replay, verify
from jobledger.projections.tables import state_table
from jobledger.schemas import EVENTS_BY_NAME, EventSerde, docs
from jobledger.schemas.catalog import (
    LOAD_ORDER,
    avsc_path,
    generated_files,
    load_order_text,
    stray_files,
    write_files,
)

from . import apache_kafka, broker, kafka
from .cli_options import connection_options, registry_option
from .produce import produce_lines
from .runner import cli as runner_cli
from .runtime import RuntimeConfig, ServiceHalted, ServiceRuntime
from .tail import tail


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jobledger",
        description="Flink's cluster control plane as an event-sourced state machine over Kafka.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = connection_options()

    p = sub.add_parser(
        "broker", help="run a local broker on loopback: Apache Kafka (KRaft) or the light Tansu"
    )
    kind = p.add_mutually_exclusive_group()
    kind.add_argument(
        "--kafka", dest="kind", action="store_const", const="kafka",
        help="Apache Kafka from Maven Central's jars (default where Java and the jars are here)",
    )  # fmt: skip
    kind.add_argument(
        "--tansu", dest="kind", action="store_const", const="tansu",
        help="the in-memory Tansu broker from the `embedded` extra (no Java needed)",
    )  # fmt: skip
    p.add_argument(
        "--port", type=int, help="port (default 9092; --detach picks a free one if it is taken)"
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--detach", action="store_true", help="start in the background and return")
    mode.add_argument("--stop", action="store_true", help="stop the background broker")
    mode.add_argument("--status", action="store_true", help="say whether one is running")
    mode.add_argument(
        "--install", action="store_true",
        help="fetch Apache Kafka's jars from Maven Central (needs Maven) and exit",
    )  # fmt: skip
    p.set_defaults(func=cmd_broker)

    p = sub.add_parser("topics", help="manage the cluster's topics")
    topics = p.add_subparsers(dest="topics_command", required=True, metavar="ACTION")
    c = topics.add_parser("create", parents=[common], help="create every topic explicitly")
    c.add_argument("--partitions", type=int, default=8, help="partitions per owner topic")
    c.add_argument("--replication-factor", type=int, default=1, help="replicas per partition")
    c.set_defaults(func=cmd_topics_create)
    c = topics.add_parser("list", parents=[common], help="list the cluster's topics")
    c.set_defaults(func=cmd_topics_list)

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

    p = sub.add_parser("tail", parents=[common], help="print a topic's events as JSON lines")
    p.add_argument("topic", help="a topic name, or a role: job, resourcemanager, taskexecutor")
    p.add_argument("--from-beginning", action="store_true", help="start at the oldest event")
    p.add_argument("--max", type=int, dest="max_events", help="stop after N events")
    p.add_argument(
        "--exit-at-end", action="store_true", help="stop once every partition is read to its end"
    )
    registry_option(p)
    p.set_defaults(func=cmd_tail)

    p = sub.add_parser("services", help="the reducers as Kafka services")
    services = p.add_subparsers(dest="services_command", required=True, metavar="ACTION")
    c = services.add_parser("run", parents=[common], help="host reducers for owned partitions")
    c.add_argument("--batch-size", type=int, default=500, help="records per transaction")
    c.add_argument("--snapshot-every", type=int, default=10_000, help="inputs between snapshots")
    c.add_argument(
        "--snapshot-interval-s", type=float, default=60.0, help="seconds between snapshots"
    )
    c.add_argument(
        "--timer-interval-ms", type=int, default=1_000, help="clock period (0: no clock)"
    )
    c.add_argument(
        "--session-timeout-ms", type=int, default=kafka.SESSION_TIMEOUT_MS,
        help="group session: how soon a dead instance's partitions move (the broker's "
        "group.min.session.timeout.ms bounds it)",
    )  # fmt: skip
    c.add_argument(
        "--stop-deadline-s", type=float, default=15.0,
        help="after SIGTERM, exit (code 3) if still running this long",
    )  # fmt: skip
    registry_option(c)
    c.set_defaults(func=cmd_services_run)

    p = sub.add_parser("export", parents=[common], help="write the log to an Avro container file")
    p.add_argument("file", help="the .avro file to write")
    registry_option(p)
    p.set_defaults(func=cmd_export)

    p = sub.add_parser(
        "replay", parents=[common], help="rebuild every reducer's state from the log"
    )
    p.add_argument("--file", help="an exported .avro file instead of the broker")
    p.add_argument("--until-offset", type=int, help="only records at or below this offset")
    p.add_argument("--until-time", type=int, help="only events at or before this time (ms)")
    p.add_argument("--count", type=int, help="only the first N records")
    p.add_argument("--format", choices=["json", "table"], default="json", help="output")
    p.add_argument(
        "--verify", action="store_true",
        help="re-derive every decision and report the first that differs from the log",
    )  # fmt: skip
    registry_option(p)
    p.set_defaults(func=cmd_replay)

    runner_cli.add_parsers(sub, common)

    p = sub.add_parser("schemas", help="the Avro event catalog")
    schemas = p.add_subparsers(dest="schemas_command", required=True, metavar="ACTION")
    c = schemas.add_parser("list", help="list the event types")
    c.set_defaults(func=cmd_schemas_list)
    c = schemas.add_parser("show", help="print an event's .avsc")
    c.add_argument("type", help="event type, e.g. SlotOffered")
    c.set_defaults(func=cmd_schemas_show)
    c = schemas.add_parser("write", help="regenerate the .avsc files from the models")
    c.add_argument("--check", action="store_true", help="fail if the files are out of date")
    c.set_defaults(func=cmd_schemas_write)
    return parser


def cmd_broker(args: argparse.Namespace) -> int:
    if args.install:
        print(f"Apache Kafka {apache_kafka.KAFKA_VERSION}: {apache_kafka.install()}")
        return 0
    if args.status:
        record = broker.read_record()
        print(_describe(record) if record else "not running")
        return 0 if record else 1
    if args.stop:
        record = broker.stop()
        print(f"stopped {_describe(record)}" if record else "no broker was running")
        return 0
    kind = args.kind or broker.default_kind()
    if args.detach:
        record = broker.read_record() or broker.start_detached(args.port, kind)
        print(_describe(record))
        print(f"export {kafka.BOOTSTRAP_ENV}={record.bootstrap}")
        return 0
    return _run_broker_in_foreground(kind, args.port or broker.DEFAULT_PORT)


def _describe(record: broker.BrokerRecord) -> str:
    return f"{record.name} listening on {record.bootstrap} (pid {record.pid}, log {record.log})"


def _run_broker_in_foreground(kind: broker.Kind, port: int) -> int:
    workdir = broker.home() / "broker"
    print(f"starting {kind} on {broker.LOOPBACK}:{port} ...", flush=True)
    proc = broker.spawn(kind, port, workdir, detach=False)
    record = broker.BrokerRecord(proc.pid, port, str(broker.log_path_of(kind, port, workdir)), kind)
    broker.write_record(record)
    print(_describe(record), flush=True)
    print(f"export {kafka.BOOTSTRAP_ENV}={record.bootstrap}; Ctrl-C stops it", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: proc.terminate())
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        return proc.wait()
    finally:
        broker.clear_record(proc.pid)


def cmd_topics_create(args: argparse.Namespace) -> int:
    bootstrap = kafka.resolve_bootstrap(args.bootstrap)
    results = kafka.create_topics(
        bootstrap,
        kafka.resolve_prefix(args.topic_prefix),
        args.partitions,
        args.replication_factor,
    )
    for r in results:
        state = "created" if r.created else f"failed: {r.error}" if r.error else "exists"
        print(f"{r.topic}\t{r.partitions} partitions\t{state}")
    return 1 if any(r.error for r in results) else 0


def cmd_topics_list(args: argparse.Namespace) -> int:
    prefix = kafka.resolve_prefix(args.topic_prefix)
    consumer = kafka.read_committed_consumer(kafka.resolve_bootstrap(args.bootstrap))
    try:
        metadata = consumer.list_topics(timeout=10)
    finally:
        consumer.close()
    for name in sorted(t for t in metadata.topics if t.startswith(prefix)):
        print(f"{name}\t{len(metadata.topics[name].partitions)} partitions")
    return 0


def cmd_produce(args: argparse.Namespace) -> int:
    bootstrap = kafka.resolve_bootstrap(args.bootstrap)
    serde = EventSerde(registry_url=args.schema_registry)
    producer = kafka.transactional_producer(bootstrap, "cli")
    with ExitStack() as stack:
        lines = sys.stdin if args.file == "-" else stack.enter_context(open(args.file))
        report = produce_lines(
            lines,
            producer,
            serde,
            kafka.resolve_prefix(args.topic_prefix),
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


def cmd_tail(args: argparse.Namespace) -> int:
    bootstrap = kafka.resolve_bootstrap(args.bootstrap)
    topic = kafka.resolve_topic(args.topic, kafka.resolve_prefix(args.topic_prefix))
    consumer = kafka.read_committed_consumer(bootstrap)
    try:
        tail(
            consumer,
            topic,
            EventSerde(registry_url=args.schema_registry),
            args.from_beginning,
            args.max_events,
            args.exit_at_end,
        )
    except LookupError as exc:
        print(exc, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()
    return 0


def _processed_by_services(args: argparse.Namespace) -> Callable[[LogRecord], bool]:
    """Whether the services' consumer group has committed past a record (an exported file
    does not say, so there every record counts as consumed)."""
    if getattr(args, "file", None):
        return lambda _: True
    return processed_by_services(
        kafka.resolve_bootstrap(args.bootstrap), kafka.resolve_prefix(args.topic_prefix)
    )


def _log_records(args: argparse.Namespace) -> list[LogRecord]:
    """The log, from an exported file or from the broker (undecodable records reported)."""
    if getattr(args, "file", None) and args.func is cmd_replay:
        return list(read_export(Path(args.file)))
    consumer = kafka.read_committed_consumer(kafka.resolve_bootstrap(args.bootstrap))
    try:
        records = list(read_log(
            consumer, kafka.resolve_prefix(args.topic_prefix),
            EventSerde(registry_url=args.schema_registry),
        ))  # fmt: skip
    finally:
        consumer.close()
    for skipped in (r for r in records if isinstance(r, SkippedRecord)):
        where = f"{skipped.role.value}/{skipped.partition}@{skipped.offset}"
        print(f"{where}: skipped: {skipped.reason}", file=sys.stderr)
    return [r for r in records if isinstance(r, LogRecord)]


def cmd_services_run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    config = RuntimeConfig(
        batch_size=args.batch_size,
        snapshot_every=args.snapshot_every,
        snapshot_interval_s=args.snapshot_interval_s,
        timer_interval_ms=args.timer_interval_ms,
        stop_deadline_s=args.stop_deadline_s,
        session_timeout_ms=args.session_timeout_ms,
    )
    runtime = ServiceRuntime(
        kafka.resolve_bootstrap(args.bootstrap),
        kafka.resolve_prefix(args.topic_prefix),
        config,
        registry_url=args.schema_registry,
    )
    try:
        runtime.run()
    except ServiceHalted:
        return 3  # logged at ERROR with what to do
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    records = _log_records(args)
    with open(args.file, "wb") as out:
        count = write_export(records, out)
    print(f"exported {count} records to {args.file}", file=sys.stderr)
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    records = _log_records(args)
    if args.verify:
        processed = _processed_by_services(args)
        matched, divergence = verify(records, processed=processed)
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
    limit = Limit(args.until_offset, args.until_time, args.count)
    result = replay(records, limit)
    if args.format == "json":
        print(json.dumps({"as_of": result.as_of(), "state": result.driver.to_dict()}, indent=2))
    else:
        print(state_table(result))
    return 0


def cmd_schemas_list(args: argparse.Namespace) -> int:
    for name, cls in EVENTS_BY_NAME.items():
        role, key = cls.topic_role.value, cls.key_field
        print(f"{name}\t{role}\tkey={key}")
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
        for name in stale:
            print(f"out of date: {name}", file=sys.stderr)
        return 1 if stale else 0
    for path in write_files():
        print(path.name)
    docs.README.write_text(docs.readme_with_table(readme))
    print(docs.README.name)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except broker.BrokerError as exc:
        print(f"jobledger: {exc}", file=sys.stderr)
        return 2
    except KafkaException as exc:
        print(f"jobledger: Kafka error: {exc.args[0]}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
