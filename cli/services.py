"""`jobledger services run`: host the reducers as Kafka services."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from confluent_kafka import KafkaException

from jobledger.schemas.topics import INPUT_ROLES, topic_name
from jobledger.services import kafka, kafka_topics, signing
from jobledger.services.control.event_time import MAX_AHEAD_MS
from jobledger.services.host import gc_policy, retention
from jobledger.services.host.errors import ServiceHalted
from jobledger.services.host.metrics import ServiceMetrics
from jobledger.services.host.snapshot_fork import FORK_ABOVE_BYTES
from jobledger.services.host.transaction_loop import RuntimeConfig, ServiceRuntime

from .logging_setup import configure_logging
from .options import (
    CommandFailed,
    bootstrap_of,
    configuration_of,
    configuration_option,
    metrics_option,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    prefix_of,
    registry_option,
    serve_metrics,
)

Subparsers = argparse._SubParsersAction


def add_parsers(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("services", help="the reducers as Kafka services")
    services = p.add_subparsers(dest="services_command", required=True, metavar="ACTION")
    c = services.add_parser(
        "run", parents=[common], help="host reducers for owned partitions",
    )  # fmt: skip
    c.add_argument("--batch-size", type=positive_int, default=500, help="records per transaction")
    c.add_argument(
        "--snapshot-every", type=positive_int, default=10_000, help="inputs between snapshots"
    )
    c.add_argument(
        "--snapshot-interval-s", type=positive_float, default=60.0,
        help="seconds between snapshots",
    )  # fmt: skip
    c.add_argument(
        "--snapshot-fork-bytes", type=int, default=FORK_ABOVE_BYTES, metavar="BYTES",
        help="encode a partition's snapshot in a forked child, off the loop, once its last "
        "snapshot was this large (0: always; -1: never)",
    )  # fmt: skip
    c.add_argument(
        "--timer-interval-ms", type=non_negative_int, default=1_000,
        help="clock period (0: no clock)",
    )  # fmt: skip
    c.add_argument(
        "--max-event-time-ahead-ms", type=non_negative_int, default=MAX_AHEAD_MS,
        help="dead-letter an input dated further ahead of its record's timestamp (0: no bound)",
    )  # fmt: skip
    c.add_argument(
        "--session-timeout-ms", type=positive_int, default=kafka.SESSION_TIMEOUT_MS,
        help="group session: how soon a dead instance's partitions move (the broker's "
        "group.min.session.timeout.ms bounds it)",
    )  # fmt: skip
    c.add_argument(
        "--stop-deadline-s", type=non_negative_float, default=15.0,
        help="after SIGTERM, exit (code 3) if still running this long",
    )  # fmt: skip
    c.add_argument(
        "--keyring", type=Path, default=os.environ.get(signing.KEYRING_ENV), metavar="FILE",
        help="accept only inputs signed by a key of this keyring (`jobledger keys`), each "
        "written by a principal allowed to (default: $JOBLEDGER_KEYRING; none: believe "
        "every writer)",
    )  # fmt: skip
    metrics_option(c)
    registry_option(c)
    configuration_option(c)
    c.set_defaults(func=cmd_services_run)


def cmd_services_run(args: argparse.Namespace) -> int:
    unsafe = retention_refusal(bootstrap_of(args), prefix_of(args), args.snapshot_interval_s)
    if unsafe is not None:
        raise CommandFailed(f"refused to start: {unsafe}")
    configure_logging()
    keyring = signing.Keyring.load(args.keyring) if args.keyring else None
    config = RuntimeConfig(
        batch_size=args.batch_size,
        snapshot_every=args.snapshot_every,
        snapshot_interval_s=args.snapshot_interval_s,
        snapshot_fork_bytes=args.snapshot_fork_bytes if args.snapshot_fork_bytes >= 0 else None,
        timer_interval_ms=args.timer_interval_ms,
        stop_deadline_s=args.stop_deadline_s,
        session_timeout_ms=args.session_timeout_ms,
        max_event_time_ahead_ms=args.max_event_time_ahead_ms,
    )
    runtime = ServiceRuntime(
        bootstrap_of(args), prefix_of(args), config,
        driver_factory=configuration_of(args).new_driver, registry_url=args.schema_registry,
        keyring=keyring, metrics=ServiceMetrics() if args.metrics_port else None,
    )  # fmt: skip
    if runtime.metrics is not None:
        serve_metrics(args.metrics_port, runtime.metrics.registry)
    gc_policy.live_service()
    try:
        runtime.run()
    except ServiceHalted:
        return 3  # logged at ERROR with what to do
    return 0


def retention_refusal(bootstrap: str, prefix: str, snapshot_interval_s: float) -> str | None:
    """Why the input topics' retention is unsafe for services snapshotting this often
    (`retention.py`), or None: started so, they could lose records no snapshot covers, and
    a later restart would rebuild without them."""
    topics = [topic_name(role, prefix) for role in INPUT_ROLES]
    try:
        kept = kafka_topics.topic_configs(bootstrap, topics, (retention.RETENTION_CONFIG,))
    except KafkaException:
        return None  # a topic missing: the runtime says so, and what to do
    for topic in topics:
        value = kept.get(topic, {}).get(retention.RETENTION_CONFIG)
        reason = None if value is None else retention.retention_refusal(
            int(value), snapshot_interval_s
        )  # fmt: skip
        if reason is not None:
            return f"{topic}: {reason}"
    return None
