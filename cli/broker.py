"""`jobledger broker` and `jobledger topics`: the local broker on loopback and the cluster's
topics."""

from __future__ import annotations

import argparse
import signal
import sys

from jobledger.services import apache_kafka, broker, kafka
from jobledger.services.home import home

from .options import bootstrap_of, positive_int, prefix_of

Subparsers = argparse._SubParsersAction


def add_parsers(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("broker", help="run Apache Kafka (KRaft, one node) on loopback")
    p.add_argument(
        "--port", type=positive_int,
        help=f"port (default {broker.DEFAULT_PORT}; --detach picks a free one if it is taken)",
    )  # fmt: skip
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
    c.add_argument("--partitions", type=positive_int, default=8, help="partitions per owner topic")
    c.add_argument(
        "--replication-factor", type=positive_int, default=1, help="replicas per partition"
    )
    c.set_defaults(func=cmd_topics_create)
    c = topics.add_parser("list", parents=[common], help="list the cluster's topics")
    c.set_defaults(func=cmd_topics_list)


def cmd_broker(args: argparse.Namespace) -> int:
    if args.install:
        print(f"Apache Kafka {apache_kafka.KAFKA_VERSION}: {apache_kafka.install()}")
        return 0
    record = broker.read_record()
    if args.status:
        print(_describe(record) if record else "not running")
        return 0 if record else 1
    if args.stop:
        stopped = broker.stop()
        print(f"stopped {_describe(stopped)}" if stopped else "no broker was running")
        return 0
    if record is not None and args.detach and args.port in (None, record.port):
        print(_describe(record))
        print(f"export {kafka.BOOTSTRAP_ENV}={record.bootstrap}")
        return 0
    if record is not None:
        print(
            f"jobledger: {_describe(record)} already; one local broker at a time: use it, or "
            "stop it first with `jobledger broker --stop`",
            file=sys.stderr,
        )
        return 1
    if args.detach:
        record = broker.start_detached(args.port)
        print(_describe(record))
        print(f"export {kafka.BOOTSTRAP_ENV}={record.bootstrap}")
        return 0
    return _run_broker_in_foreground(args.port or broker.DEFAULT_PORT)


def _describe(record: broker.BrokerRecord) -> str:
    return f"{record.name} listening on {record.bootstrap} (pid {record.pid}, log {record.log})"


def _run_broker_in_foreground(port: int) -> int:
    print(f"starting {broker.NAME} on {broker.LOOPBACK}:{port} ...", flush=True)
    proc = broker.spawn(port, home() / "broker", detach=False)
    record = broker.BrokerRecord(proc.pid, port, str(broker.log_path_of(port, home() / "broker")))
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
    results = kafka.create_topics(
        bootstrap_of(args), prefix_of(args), args.partitions, args.replication_factor
    )
    for r in results:
        state = "created" if r.created else f"failed: {r.error}" if r.error else "exists"
        print(f"{r.topic}\t{r.partitions} partitions\t{state}")
    return 1 if any(r.error for r in results) else 0


def cmd_topics_list(args: argparse.Namespace) -> int:
    prefix = prefix_of(args)
    for name, partitions in sorted(kafka.list_topics(bootstrap_of(args)).items()):
        if name.startswith(prefix):
            print(f"{name}\t{partitions} partitions")
    return 0
