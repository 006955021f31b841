"""`jobledger ui`: Flink's REST API and a dashboard over the log, at any point of it, served
by uvicorn (`projections/rest/web_monitor.py` is the application). Over an exported file, or live
on the broker's topics: a reader thread follows the log as it grows, and every request
answers over the records read so far."""

from __future__ import annotations

import argparse
import socket
import sys
import threading
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, TopicPartition

from jobledger.projections.log.log_file import LOG_ROLES, LogRecord, read_export
from jobledger.projections.log.positions import log_order
from jobledger.projections.log.provenance import provenance_of
from jobledger.schemas import DecodeError, EventSerde, roles_by_topic
from jobledger.services import kafka, kafka_reads, kafka_topics

from .log_source import archive_option, keyring_option, reducers_of, writers_of
from .options import (
    bootstrap_of,
    configuration_option,
    non_negative_int,
    positive_float,
    prefix_of,
    registry_option,
)

Subparsers = argparse._SubParsersAction
POLL_S = 0.5


def add_parsers(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "ui", parents=[common],
        help="Flink's REST API and a web dashboard over the log, with a time slider",
    )  # fmt: skip
    p.add_argument("--file", type=Path, help="an exported .avro file instead of the broker")
    archive_option(p)
    registry_option(p)
    keyring_option(p)
    configuration_option(p)
    p.add_argument("--port", type=non_negative_int, default=8081, help="port (0: any free one)")
    p.add_argument(
        "--bind", default="127.0.0.1",
        help="address to listen on (loopback by default: the log may hold what others should "
        "not read)",
    )  # fmt: skip
    p.add_argument(
        "--catch-up-timeout", type=positive_float, default=60.0, metavar="S",
        help="seconds to wait for the broker's log to be read to its end before serving",
    )  # fmt: skip
    p.set_defaults(func=cmd_ui, parser=p)


class FileLog:
    """An exported log: read once, in log order."""

    def __init__(self, path: Path) -> None:
        self.ordered = log_order(read_export(path))

    def __call__(self) -> list[LogRecord]:
        return self.ordered

    def close(self) -> None:
        """Nothing to release."""


class LiveLog:
    """The broker's log, followed by a reader thread: every record read so far, in log
    order. Each poll waits at most POLL_S, so the thread stops within that of `close()`."""

    def __init__(self, consumer: Consumer, prefix: str, serde: EventSerde) -> None:
        self.consumer = consumer
        self.serde = serde
        self.roles = roles_by_topic(prefix, LOG_ROLES)
        self.assignment = [
            TopicPartition(topic, p, -2)
            for topic in self.roles
            for p in kafka_topics.partitions_of(consumer, topic)
        ]
        self.partitions = {
            role: sum(tp.topic == topic for tp in self.assignment)
            for topic, role in self.roles.items()
        }
        self.read: list[LogRecord] = []
        self.ordered: list[LogRecord] = []
        self.lock = threading.Lock()
        self.caught_up = threading.Event()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._follow, name="log-reader", daemon=True)
        self.thread.start()

    def __call__(self) -> list[LogRecord]:
        with self.lock:
            if len(self.ordered) != len(self.read):
                self.ordered = log_order(self.read)
            return self.ordered

    def read_from(self, start: int) -> list[LogRecord]:
        """The records read so far from the `start`-th on, in the order read."""
        with self.lock:
            return self.read[start:]

    def _follow(self) -> None:
        self.consumer.assign(self.assignment)
        at_end: set[tuple[str, int]] = set()
        while not self.stopping.is_set():
            read = []
            for msg in self.consumer.consume(kafka_reads.READ_BATCH, POLL_S):
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        at_end.add((msg.topic(), msg.partition()))
                        if len(at_end) == len(self.assignment):
                            self.caught_up.set()
                    elif msg.error().fatal():
                        print(f"jobledger ui: Kafka error: {msg.error().str()}", file=sys.stderr)
                        return
                    continue
                try:
                    event = self.serde.decode(msg.value(), msg.topic())
                except DecodeError:
                    continue  # the dead-letter topic holds it
                signed = provenance_of(msg, msg.value())
                role = self.roles[msg.topic()]
                read.append(LogRecord(role, msg.partition(), msg.offset(), msg.timestamp()[1],
                                      event, signed))  # fmt: skip
            with self.lock:
                self.read += read

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(POLL_S * 4)
        self.consumer.close()


def cmd_ui(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from jobledger.projections.rest.web_monitor import create_app
    except ImportError as exc:  # the `ui` extra is not installed
        raise SystemExit(
            f"jobledger: {exc.name} is not installed: pip install 'jobledger[ui]'"
        ) from None

    if args.file is not None:
        log: FileLog | LiveLog = FileLog(args.file)
        where = str(args.file)
    else:
        consumer = kafka.read_committed_consumer(bootstrap_of(args), extra=kafka_reads.BULK_READ)
        log = LiveLog(consumer, prefix_of(args), EventSerde(registry_url=args.schema_registry))
        where = f"{bootstrap_of(args)} (following the log)"
        if not log.caught_up.wait(args.catch_up_timeout):
            print(f"jobledger ui: the log is still being read after {args.catch_up_timeout:g} s; "
                  "serving what is read so far", file=sys.stderr)  # fmt: skip
    followed = log if isinstance(log, LiveLog) else None
    app = create_app(log, driver_factory=reducers_of(args), followed=followed,
                     writers=writers_of(args))  # fmt: skip
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    try:
        listening = _listen(args.bind, args.port)
        host, port = listening.getsockname()[:2]
        url = f"http://{f'[{host}]' if ':' in host else host}:{port}/"
        print(f"jobledger ui on {url} over {where}: {len(log())} records", file=sys.stderr)
        server.run(sockets=[listening])
    finally:
        log.close()
    return 0


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket on `host`:`port` (port 0: any free one), so the address printed is
    the one served, and a port in use is one line (OSError) before anything starts."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listening = socket.socket(family, socket.SOCK_STREAM)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listening.bind((host, port))
        listening.listen(128)
    except OSError as exc:
        listening.close()
        raise OSError(exc.errno, exc.strerror, f"--bind {host} --port {port}") from None
    return listening
