"""What every `jobledger` command shares: where the broker and the topics are, the schema
registry, and argument types that refuse a bad value with one line saying what is wanted.

In a module of its own so that the runner's command line (`runner.py`, also run under
`spark-submit` through `spark_submit.py`) has it without importing `main.py`.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from prometheus_client import CollectorRegistry, start_http_server

from jobledger.projections.log.positions import FORMS, Position, PositionError, time_ms
from jobledger.services import client_properties, kafka, signing
from jobledger.services.configuration import Configuration, ConfigurationError
from jobledger.services.local import apache_kafka, broker, secure

log = logging.getLogger("jobledger.cli")


class CommandFailed(Exception):
    """An expected failure of a command (a job already ended, a key with no value): the
    message is the one line `main` prints before exiting 1."""


def _option_pair(text: str) -> str:
    try:
        Configuration.parse([text])
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def configuration_option(parser: argparse.ArgumentParser) -> None:
    """`-D KEY=VALUE`, Flink's dynamic properties: the cluster's configuration the reducers
    run under (services/configuration.py). Replaying a log needs the services' options."""
    parser.add_argument(
        "-D", dest="conf", metavar="KEY=VALUE", action="append", default=[], type=_option_pair,
        help="a Flink option, repeatable: jobmanager.execution.failover-strategy=full|region, "
        "restart-strategy=none|fixed-delay|failure-rate (for jobs that set none), "
        "restart-strategy.fixed-delay.attempts=N, slot.request.timeout=5 min, ... "
        "(replay under the options the services ran with)",
    )  # fmt: skip


def configuration_of(args: argparse.Namespace) -> Configuration:
    return Configuration.parse(getattr(args, "conf", []))


def output_option(parser: argparse.ArgumentParser) -> None:
    """`-o text|json`: lines for people, or one JSON document for programs."""
    parser.add_argument(
        "-o", "--output", choices=("text", "json"), default="text", help="how to answer"
    )


def connection_options(
    prefix_default: str = "else 'jobledger.'",
) -> argparse.ArgumentParser:
    """A parent parser with `--bootstrap` and `--topic-prefix` (`prefix_default` says what
    the prefix is when neither the option nor the variable gives one)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--bootstrap",
        help=f"Kafka bootstrap servers (default: ${kafka.BOOTSTRAP_ENV}, else the local broker, "
        "started in the background if none runs)",
    )
    common.add_argument(
        "--topic-prefix",
        help=f"prefix of every topic name (default: ${kafka.PREFIX_ENV}, {prefix_default})",
    )
    common.add_argument(
        "-F", "--client-config", dest="client_config", action="append", type=Path,
        default=[], metavar="FILE",
        help="Kafka client properties file, key=value lines as kcat's -F reads them (SASL, "
        f"TLS...; default: ${client_properties.FILE_ENV})",
    )  # fmt: skip
    common.add_argument(
        "-X",
        dest="client_property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a librdkafka client property, as kcat's -X (after the file's)",
    )
    common.add_argument(
        "--signing-key", type=Path, default=os.environ.get(signing.SIGNING_KEY_ENV),
        metavar="FILE",
        help="Ed25519 private key (PEM) that signs every record this command writes, on a "
        f"cluster whose services check signatures (default: ${signing.SIGNING_KEY_ENV})",
    )  # fmt: skip
    return common


def use_client_settings(args: argparse.Namespace) -> None:
    """Give the client properties of `-F`/`-X` to every Kafka client this command builds,
    and `--signing-key` to every producer. A property jobledger owns or librdkafka refuses,
    or a key that cannot be read, stops the command in one line."""
    files, pairs = getattr(args, "client_config", []), getattr(args, "client_property", [])
    try:
        kafka.use_client_properties(client_properties.load(files, pairs))
        key = getattr(args, "signing_key", None)
        signing.use_signing_key(signing.SigningKey.load(Path(key)) if key else None)
    except (client_properties.ClientPropertiesError, signing.KeyFileError) as exc:
        raise CommandFailed(str(exc)) from exc


def registry_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--schema-registry",
        default=os.environ.get(kafka.REGISTRY_ENV),
        help="schema registry URL: write the Confluent wire format instead of Avro "
        f"single-object encoding (default: ${kafka.REGISTRY_ENV})",
    )


def bootstrap_of(args: argparse.Namespace) -> str:
    """The broker to use: `--bootstrap`, then `$JOBLEDGER_BOOTSTRAP`, then the local broker
    (started in the background if none is running). Whichever it is must answer within
    `kafka.REACHABLE_TIMEOUT_S`, or the command stops with one line saying what to do.
    Resolved once per command (`replay --verify` asks twice: the log, then the services'
    committed offsets), so the broker is probed once."""
    resolved = getattr(args, "resolved_bootstrap", None)
    if resolved is not None:
        return resolved
    bootstrap = args.bootstrap or os.environ.get(kafka.BOOTSTRAP_ENV)
    if not bootstrap:
        record = broker.read_record()
        if record is None:
            install_local_kafka()
            record = broker.start_detached()
            print(
                f"started {record.name} on {record.bootstrap} (pid {record.pid}); "
                "stop it with `jobledger broker --stop`",
                file=sys.stderr,
            )
        bootstrap = record.bootstrap
    _check_credentials(args, bootstrap)
    kafka.check_reachable(bootstrap)
    args.resolved_bootstrap = bootstrap
    return bootstrap


ROLE_OF_COMMAND = {"services": "services", "runner": "runner", "topics": "admin"}
"""Whose credentials a command needs on the home's secure broker; any other, `client`'s."""


def _check_credentials(args: argparse.Namespace, bootstrap: str) -> None:
    """On the home's secure broker, a command given no security settings would be refused
    by every listener and reported as no broker at all: it stops at once, naming the files
    to pass (credentials are never chosen for it: the role is who it acts as)."""
    if "security.protocol" in kafka.client_properties():
        return
    record = broker.read_record()
    if record is None or not record.secure:
        return
    if not set(bootstrap.split(",")) & set(record.bootstrap.split(",")):
        return
    where = (
        f"the home's broker at {record.bootstrap} is secure and takes only authenticated clients"
    )
    if args.command == "demo":
        raise CommandFailed(f"{where}: run the demo with --secure")
    folder = secure.secure_dir()
    role = ROLE_OF_COMMAND.get(args.command, "client")
    raise CommandFailed(
        f"{where}: pass -F {folder}/{role}.properties --signing-key {folder}/{role}.key (the "
        f"{role} principal's; the other principals' files are beside them)"
    )


def install_local_kafka() -> None:
    """The local broker's first start installs Apache Kafka (once, into the download cache)
    instead of failing on jars that are not there yet."""
    if apache_kafka.installed():
        return
    print(
        f"Apache Kafka {apache_kafka.KAFKA_VERSION} is not installed yet: fetching it from "
        f"Maven Central into {apache_kafka.libs_dir()} (once; `jobledger broker --install` "
        "does only this) ...",
        file=sys.stderr,
        flush=True,
    )
    apache_kafka.install()


def prefix_of(args: argparse.Namespace) -> str:
    return kafka.resolve_prefix(args.topic_prefix)


def _number(convert, minimum, what: str):
    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text} is less than {minimum}: {what}")
        return value

    parse.__name__ = what
    return parse


positive_int = _number(int, 1, "a whole number of at least 1")
non_negative_int = _number(int, 0, "a whole number of at least 0")
positive_float = _number(float, 1e-9, "a number greater than 0")
non_negative_float = _number(float, 0.0, "a number of at least 0")


def epoch_ms(text: str) -> int:
    """A point in time: milliseconds since the epoch, or an ISO 8601 time (a time without a
    zone is UTC)."""
    try:
        value = time_ms(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither epoch milliseconds nor an ISO time "
            "(e.g. 1764010000000 or 2026-11-24T18:47:44Z)"
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is before 1970")
    return value


def position(text: str) -> Position:
    """An argument naming a point in the log (`projections/log/positions.py`)."""
    try:
        return Position.parse(text)
    except PositionError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def at_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--at", type=position, metavar="POS",
        help=f"answer as of this point of the log: {FORMS}",
    )  # fmt: skip


def position_of(args: argparse.Namespace) -> Position:
    return args.at or Position.parse("end")


def metrics_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metrics-port", type=metrics_address, metavar="[HOST:]PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics (HOST: 127.0.0.1 unless "
        "given; off by default)",
    )  # fmt: skip


def metrics_address(text: str) -> tuple[str, int]:
    """`PORT` (on loopback) or `HOST:PORT`."""
    host, _, port = text.rpartition(":")
    try:
        number = int(port)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not [HOST:]PORT") from None
    if not 0 < number < 65536:
        raise argparse.ArgumentTypeError(f"port {number} is not 1-65535")
    return host or "127.0.0.1", number


def serve_metrics(address: tuple[str, int] | None, registry: CollectorRegistry) -> None:
    """Serve `registry` at `address` in a thread of its own (none: nothing is served); a port
    taken stops the command in one line."""
    if address is None:
        return
    host, port = address
    try:
        start_http_server(port, host, registry)
    except OSError as exc:
        raise CommandFailed(f"cannot serve metrics on {host}:{port}: {exc.strerror}") from exc
    log.info("metrics at http://%s:%d/metrics", host, port)
