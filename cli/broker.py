"""`jobledger broker` and `jobledger topics`: the local broker on loopback and the cluster's
topics."""

from __future__ import annotations

import argparse
import signal
import sys

from jobledger.projections.log.live_log import latest_snapshots
from jobledger.schemas.topics import INPUT_ROLES, topic_name
from jobledger.services import kafka, kafka_reads, kafka_topics
from jobledger.services.host import retention
from jobledger.services.host.transaction_loop import RuntimeConfig
from jobledger.services.local import apache_kafka, broker, secure

from .options import bootstrap_of, install_local_kafka, positive_int, prefix_of

Subparsers = argparse._SubParsersAction


def add_parsers(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("broker", help="run Apache Kafka (KRaft, one node) on loopback")
    p.add_argument(
        "--nodes", type=positive_int, default=1,
        help="a KRaft cluster of this many nodes (each broker and controller, internal topics "
        "on three replicas), listening on --port and the ports after it",
    )  # fmt: skip
    p.add_argument(
        "--port", type=positive_int,
        help=f"port (default {broker.DEFAULT_PORT}; --detach picks a free one if it is taken)",
    )  # fmt: skip
    p.add_argument(
        "--secure", action="store_true",
        help="TLS, SASL/SCRAM-SHA-512 with one principal per role (admin, services, runner, "
        "client), ACLs; client property files under $JOBLEDGER_HOME/secure/",
    )  # fmt: skip
    p.add_argument(
        "--topic-prefix",
        help=f"with --secure: the topic prefix the ACLs are for (default: ${kafka.PREFIX_ENV}, "
        "else jobledger.); on a running secure broker with --detach, grant them for it too",
    )  # fmt: skip
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--detach", action="store_true", help="start in the background and return")
    mode.add_argument("--stop", action="store_true", help="stop the background broker")
    mode.add_argument("--status", action="store_true", help="say whether one is running")
    mode.add_argument(
        "--address", action="store_true",
        help="print the running broker's bootstrap address alone, for other clients (kcat -b, "
        "the Java example); exit 1 if none runs",
    )  # fmt: skip
    mode.add_argument(
        "--install", action="store_true",
        help="fetch Apache Kafka's jars from Maven Central (needs Maven) and exit",
    )  # fmt: skip
    p.set_defaults(func=cmd_broker)

    p = sub.add_parser("topics", help="manage the cluster's topics")
    topics = p.add_subparsers(dest="topics_command", required=True, metavar="ACTION")
    c = topics.add_parser("create", parents=[common], help="create every topic explicitly")
    c.add_argument("--partitions", type=positive_int, default=8, help="partitions per owner topic")
    c.add_argument(
        "--replication-factor", type=positive_int,
        help="replicas per partition, min.insync.replicas one less (default: the smaller of 3 "
        "and the broker count)",
    )  # fmt: skip
    c.add_argument(
        "--retention", type=_duration,
        help="how long the log's topics keep a record: -1 (forever, the default), ms, or "
        "with a unit (30s, 10m, 12h, 7d); refused if the snapshots cannot make it safe",
    )  # fmt: skip
    c.add_argument(
        "-D", dest="topic_config", metavar="KEY=VALUE", action="append", default=[],
        type=_topic_setting,
        help="a Kafka topic setting for the log's topics (retention.ms, segment.ms, ...)",
    )  # fmt: skip
    _snapshot_interval_option(c)
    c.set_defaults(func=cmd_topics_create)
    c = topics.add_parser("list", parents=[common], help="list the cluster's topics")
    c.set_defaults(func=cmd_topics_list)
    c = topics.add_parser(
        "describe", parents=[common],
        help="per partition of the log: its retention, the oldest offset a restart needs, the "
        "oldest one held",
    )  # fmt: skip
    c.set_defaults(func=cmd_topics_describe)


def _duration(text: str) -> int:
    try:
        return retention.duration_ms(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _topic_setting(text: str) -> tuple[str, str]:
    key, equals, value = text.partition("=")
    if not equals or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def _snapshot_interval_option(p: argparse.ArgumentParser) -> None:
    default = RuntimeConfig.snapshot_interval_s
    p.add_argument(
        "--snapshot-interval-s", type=float, default=default,
        help=f"the services' --snapshot-interval-s, which a retention is checked against "
        f"(default {default:g})",
    )  # fmt: skip


def cmd_broker(args: argparse.Namespace) -> int:
    if args.install:
        print(f"Apache Kafka {apache_kafka.KAFKA_VERSION}: {apache_kafka.install()}")
        return 0
    record = broker.read_record()
    if args.address:
        if record is None:
            print("jobledger: no local broker runs: start one with `jobledger broker --detach`",
                  file=sys.stderr)  # fmt: skip
            return 1
        print(record.bootstrap)
        return 0
    if args.status:
        print(_describe(record) if record else "not running")
        if record is not None and record.secure:
            print(_properties_line())
        return 0 if record else 1
    if args.stop:
        stopped = broker.stop()
        print(f"stopped {_describe(stopped)}" if stopped else "no broker was running")
        return 0
    if args.topic_prefix is not None and not args.secure:
        print("jobledger: --topic-prefix names the prefix the ACLs of --secure are for: give "
              "--secure too", file=sys.stderr)  # fmt: skip
        return 2
    prefix = kafka.resolve_prefix(args.topic_prefix) if args.secure else None
    if record is not None and args.secure and not record.secure:
        print(
            f"jobledger: {_describe(record)} already, started without --secure: stop it first "
            "with `jobledger broker --stop`, then start it with --secure",
            file=sys.stderr,
        )
        return 1
    if record is not None and args.detach and args.port in (None, record.port):
        if prefix is not None:
            count = secure.grant(secure.ensure_secrets(), record.bootstrap, prefix)
            print(f"granted {count} ACLs for topic prefix {prefix!r}", file=sys.stderr)
        _announce(record)
        return 0
    if record is not None:
        print(
            f"jobledger: {_describe(record)} already; one local broker at a time: use it, or "
            "stop it first with `jobledger broker --stop`",
            file=sys.stderr,
        )
        return 1
    install_local_kafka()
    if args.detach:
        _announce(broker.start_detached(args.port, args.nodes, prefix))
        return 0
    return _run_broker_in_foreground(
        broker.node_ports(args.port or broker.DEFAULT_PORT, args.nodes), prefix
    )


def _describe(record: broker.BrokerRecord) -> str:
    pids = ", ".join(map(str, record.pids))
    return f"{record.name} listening on {record.bootstrap} (pid {pids}, log {record.log})"


def _properties_line() -> str:
    files = ",".join(secure.PRINCIPALS)
    folder = secure.secure_dir()
    return (
        f"client properties (librdkafka, kcat -F): {folder}/{{{files}}}.properties\n"
        f"signing keys (--signing-key): {folder}/{{{files}}}.key; the services' keyring "
        f"(services run --keyring): {secure.keyring_path()}"
    )


def _announce(record: broker.BrokerRecord, tail: str = "") -> None:
    """What a started broker tells its user: where it is, and for a secure one, the files
    a client needs."""
    print(_describe(record), flush=True)
    if record.secure:
        print(_properties_line(), flush=True)
    print(f"export {kafka.BOOTSTRAP_ENV}={record.bootstrap}{tail}", flush=True)


def _run_broker_in_foreground(ports: list[int], secure_prefix: str | None) -> int:
    nodes = f" ({len(ports)} nodes)" if len(ports) > 1 else ""
    where = ",".join(f"{broker.LOOPBACK}:{port}" for port in ports)
    print(f"starting {broker.NAME}{nodes} on {where} ...", flush=True)
    procs, record = broker.start(ports, False, secure_prefix)
    _announce(record, "; Ctrl-C stops it")
    signal.signal(signal.SIGTERM, lambda *_: [proc.terminate() for proc in procs])
    try:
        return max(proc.wait() for proc in procs)
    except KeyboardInterrupt:
        for proc in procs:
            proc.terminate()
        return max(proc.wait() for proc in procs)
    finally:
        broker.clear_record(procs[0].pid)


def cmd_topics_create(args: argparse.Namespace) -> int:
    config = dict(args.topic_config)
    if args.retention is not None:
        config[retention.RETENTION_CONFIG] = str(args.retention)
    if retention.RETENTION_CONFIG in config:
        try:
            asked = int(config[retention.RETENTION_CONFIG])
        except ValueError:
            asked = None
        refusal = (
            f"{config[retention.RETENTION_CONFIG]!r} is no number of ms" if asked is None
            else retention.retention_refusal(asked, args.snapshot_interval_s)
        )  # fmt: skip
        if refusal is not None:
            print(f"jobledger: refused: {refusal}", file=sys.stderr)
            return 2
    results = kafka_topics.create_topics(
        bootstrap_of(args), prefix_of(args), args.partitions, args.replication_factor, config
    )
    for r in results:
        state = "created" if r.created else f"failed: {r.error}" if r.error else "exists"
        print(f"{r.topic}\t{r.partitions} partitions\t{state}"
              + (f" with {r.short}" if r.short else ""))  # fmt: skip
    return 1 if any(r.error for r in results) else 0


def cmd_topics_list(args: argparse.Namespace) -> int:
    prefix = prefix_of(args)
    for name, partitions in sorted(kafka_topics.list_topics(bootstrap_of(args)).items()):
        if name.startswith(prefix):
            print(f"{name}\t{partitions} partitions")
    return 0


def cmd_topics_describe(args: argparse.Namespace) -> int:
    rows = retention_rows(bootstrap_of(args), prefix_of(args))
    print("partition\tretention\toldest needed\toldest held\tend\twhy")
    for row in rows:
        kept = "-" if row.retention_ms is None else (
            "forever" if row.retention_ms < 0 else f"{row.retention_ms} ms"
        )  # fmt: skip
        needed = "-" if row.oldest_needed is None else str(row.oldest_needed)
        why = f"LOST: {row.why}" if row.lost else row.why
        print(f"{row.topic}/{row.partition}\t{kept}\t{needed}\t{row.oldest_held}\t{row.end}"
              f"\t{why}")  # fmt: skip
    return 1 if any(row.lost for row in rows) else 0


def retention_rows(bootstrap: str, prefix: str) -> list[retention.PartitionRetention]:
    """Every partition of the log's topics: what it keeps, holds and a restart needs of it."""
    topics = {topic_name(role, prefix): role for role in kafka_topics.LOG_TOPICS}
    configs = kafka_topics.topic_configs(bootstrap, list(topics), (retention.RETENTION_CONFIG,))
    committed = kafka_topics.committed_offsets(
        bootstrap, f"{kafka.SERVICES_GROUP_PREFIX}{prefix}",
        [t for t, role in topics.items() if role in INPUT_ROLES],
    )  # fmt: skip
    consumer = kafka.read_committed_consumer(bootstrap, extra=kafka_reads.READ_TO_END)
    try:
        found = latest_snapshots(consumer, prefix)
        snapshots = {owner: taken.next_offset for owner, taken in found.items()}
    finally:
        consumer.close()
    rows = []
    for topic, role in topics.items():
        kept = configs.get(topic, {}).get(retention.RETENTION_CONFIG)
        for partition, (low, high) in sorted(kafka_topics.watermarks(bootstrap, topic).items()):
            needed, why = (None, "read by replay and the debugging commands only")
            if role in INPUT_ROLES:
                needed, why = retention.oldest_needed(
                    snapshots.get(f"{topic}/{partition}"), committed.get((topic, partition))
                )
            rows.append(retention.PartitionRetention(
                topic, partition, None if kept is None else int(kept), low, high, needed, why,
            ))  # fmt: skip
    return rows
