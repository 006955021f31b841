"""Kafka clients and event writes, shared by the engine and the command line.

The one module that builds Kafka clients and writes events: every producer, consumer and
admin client of the engine, the runtime, the runner's driver and tasks, the projections and
the command line is made here, and every event record is written with one header policy.
(The runner's Spark data source, `runner/kafka_source.py`, builds its clients from the options
Spark hands it, as Spark's own connector does; the benchmarks build raw clients to measure.)
Which broker to use is the command line's business (`cli/options.py`); this module talks to
the one it is given. What the cluster holds (topics, groups) is `kafka_topics.py`; reading
the log through these clients is `kafka_reads.py`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
)
from confluent_kafka.admin import AdminClient

from jobledger.schemas import Event, EventSerde
from jobledger.schemas.topics import DEFAULT_PREFIX, topic_name

from . import signing

BOOTSTRAP_ENV = "JOBLEDGER_BOOTSTRAP"
PREFIX_ENV = "JOBLEDGER_TOPIC_PREFIX"
REGISTRY_ENV = "JOBLEDGER_SCHEMA_REGISTRY"

SERVICES_GROUP_PREFIX = "jobledger-services-"
"""The services' consumer group is this plus the topic prefix: its committed offsets say
which inputs have been decided."""

PARTITIONER = "murmur2_random"
"""Keyed records go where Java's client puts them (murmur2 of the key bytes, made positive,
modulo the partition count): the partitioner of every Kafka client that follows Java's, so an
owner's events land in one partition whichever language wrote them. librdkafka's own default
(CRC32) would split them."""

SESSION_TIMEOUT_MS = 3000
"""How long a group member may be silent before its partitions go to another: the bulk of the
time a service's partitions wait after a kill -9. Apache Kafka refuses sessions shorter than
its `group.min.session.timeout.ms` (6 s by default; the broker `jobledger broker` starts
allows 1 s): against such a broker pass `--session-timeout-ms 6000` to `services run`."""
HEARTBEAT_INTERVAL_MS = 500
"""A member learns that the group rebalances at its next heartbeat: a short interval lets the
survivor of a kill start taking over right after the session timeout."""


class _Retried(logging.Filter):
    """librdkafka's lines about what it retries by itself and gets past, which told an operator
    nothing but looked like failures: a transaction coordinator still loading its log after the
    broker started (`GETPID ... Coordinator load in progress: retrying`), events a client
    destroyed had not served (`BGQUEUE ... Purging`)."""

    PASSING = ("Coordinator load in progress", "Purging ")

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(passing in record.getMessage() for passing in self.PASSING)


LOG = logging.getLogger("jobledger.kafka")
"""Where librdkafka's own lines go (every client's `logger`), instead of raw `%3|...|FAIL|`
lines on stderr: `services run` and `runner` print them as their other log lines, a command
prints its warnings and errors in one line each (Python's last-resort handler)."""
LOG.addFilter(_Retried())
CLIENT_LOGGING = {"logger": LOG}


REACHABLE_TIMEOUT_S = 5.0
"""How long a command waits for a broker to answer before saying none does."""


class BrokerUnreachable(ConnectionError):
    """No broker answered at the bootstrap address; the message says what to do."""


def check_reachable(bootstrap: str, timeout_s: float = REACHABLE_TIMEOUT_S) -> None:
    """Ask the broker for its metadata once, quietly: a command that cannot reach it stops
    with one line instead of the client's retries and error logs for as long as it waits."""
    try:
        admin_client(bootstrap, quiet=True).list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise BrokerUnreachable(
            f"no Kafka broker answers at {bootstrap} (waited {timeout_s:.0f} s): start one with "
            "`jobledger broker --detach`, or pass --bootstrap HOST:PORT / set "
            f"{BOOTSTRAP_ENV}"
        ) from exc


def resolve_prefix(explicit: str | None) -> str:
    return explicit if explicit is not None else os.environ.get(PREFIX_ENV, DEFAULT_PREFIX)


_client_properties: dict[str, str] = {}


def use_client_properties(properties: dict[str, str]) -> None:
    """The operator's client properties (`client_properties.load`: security, tuning), given
    to every client this process builds from now on. Set once, by the command line as a
    command starts, or by a Spark task from the settings its driver sent."""
    _client_properties.clear()
    _client_properties.update(properties)


def refusal_of(properties: dict[str, str]) -> str | None:
    """What librdkafka says of `properties` (an unknown key, a value it does not accept), or
    None: a client with no broker to go to is built and thrown away."""
    try:
        Producer({**properties, "bootstrap.servers": "", "log_level": 0})
    except KafkaException as exc:
        return exc.args[0].str()
    return None


def client_properties() -> dict[str, str]:
    """The properties `use_client_properties` set (a copy, to hand to another process)."""
    return dict(_client_properties)


def admin_client(bootstrap: str, quiet: bool = False) -> AdminClient:
    """An admin client; `quiet` keeps librdkafka's connection errors off the terminal (for
    a probe whose failure the caller reports itself)."""
    return AdminClient({
        "bootstrap.servers": bootstrap, **CLIENT_LOGGING, **_client_properties,
        **({"log_level": 0} if quiet else {}),
    })  # fmt: skip


ONE_REQUEST_IN_FLIGHT = {"max.in.flight.requests.per.connection": 1}
"""Every transactional producer sends one request at a time per broker connection. With more
(librdkafka's default is 5), a write refused with a retriable error (its partition not led yet:
a topic just created, a leader moving) was overtaken by the next write, already in flight:
Kafka takes any sequence number as the first from a producer it has no state for on a
partition, and librdkafka then counted the refused records as written by the success after
them ("implicitly acked by subsequent batch success"), so the transaction committed without
them. One at a time, the refused write is sent again before anything after it. It cost nothing
measurable here (a 200k-record result, transactions over 9 partitions)."""


RETRY_BACKOFF = {"retry.backoff.ms": 2}
"""A transaction begun right after the last one committed (the next decisions of a partition,
the commit past an awaited record read back) finds the coordinator still writing the last
one's markers: it refuses the new transaction's offsets or partitions as CONCURRENT_TRANSACTIONS
until it is done, a few milliseconds later. librdkafka retries after `retry.backoff.ms`, 100 ms
by default, which would make a transaction with offsets right after another cost ~100 ms
instead of ~15 ms, on most hops of a job; at 2 ms `send_offsets_to_transaction` waits ~5 ms of
it (bench/e2e.py measures the hops). Java's producer retries that refusal after 20 ms.
The backoff doubles from this on each retry of one request (librdkafka's
`retry.backoff.max.ms`, 1 s), so a broker that keeps refusing is not asked much more often
than before."""


NO_LINGER = {"linger.ms": 0}
"""A transaction's records become visible at its commit, whenever they were sent, and the
commit waits for them: a record lingering (librdkafka's default, 5 ms) is sent only when
the commit flushes it, after the offsets, which makes a transaction of decisions up to ~10 ms
slower than one of offsets only; sent at once, the write overlaps them."""


REQUEST_TIMEOUT = {"socket.timeout.ms": 5_000}
"""A request unanswered this long is given up and sent again, to whichever broker leads or
coordinates by then. Kafka's controller fences a broker that stops heartbeating after its
`broker.session.timeout.ms` (9 s) and moves its leaderships and coordinators to the others,
but a paused broker (SIGSTOP, a long GC, a hung disk) still accepts connections: librdkafka
keeps asking it, one timeout after another (a request, then the reconnection's
ApiVersionRequest, then metadata), until one answer names another broker. With librdkafka's
default (60 s) that held the service's whole loop for a minute or more after the cluster had
moved on; with 10 s, 30 s (`bench/faults.py --fault pause`). A produce waiting for a dead
follower still in the ISR times out too, and is retried (idempotence keeps it once)."""


def clock_skew(error: KafkaError, what: str) -> str:
    """What to say when the broker refuses a record's timestamp: the writer's clock is off.
    Every record carries its writer's clock, and Kafka refuses one further ahead of its own
    than `message.timestamp.after.max.ms` (1 h by default) or further behind than
    `message.timestamp.before.max.ms` (no limit by default)."""
    return (
        f"the broker refused a record of {what} for its timestamp ({error.str()}): this "
        "machine's clock differs from the broker's by more than the topic allows "
        "(message.timestamp.after.max.ms, 1 h by default, or message.timestamp.before.max.ms; "
        "broker-wide log.message.timestamp.after.max.ms / .before.max.ms). Set the clock right "
        "(NTP) and start again"
    )


class SigningProducer(Producer):
    """A producer that knows whose key signs its records (`produce_encoded`)."""

    signer: signing.SigningKey | None = None


PROCESS_KEY: Any = object()
"""`signer` of a producer that signs with the process's key (`signing.use_signing_key`)."""


def producer(
    bootstrap: str,
    transactional_id: str,
    extra: dict[str, Any] | None = None,
    init_timeout_s: float = 60,
    init: bool = True,
    signer: signing.SigningKey | None = PROCESS_KEY,
) -> SigningProducer:
    """Every producer of jobledger: transactional (its writes become visible atomically, and
    making it fences every earlier producer with the same id), idempotent, and partitioning
    keys as Java's client does, one request in flight (ONE_REQUEST_IN_FLIGHT), retrying soon
    (RETRY_BACKOFF), sending at once (NO_LINGER). `extra` adds librdkafka settings (a delivery
    callback, a linger). Without `init`, the caller runs `init_transactions` itself (to retry
    it). Its records are signed with `signer`, by default the process's key (one process
    hosting several principals, the demo's, gives each its own)."""
    made = SigningProducer({
        "bootstrap.servers": bootstrap, "transactional.id": transactional_id,
        "enable.idempotence": True, "acks": "all", "partitioner": PARTITIONER,
        **ONE_REQUEST_IN_FLIGHT, **CLIENT_LOGGING,
        **RETRY_BACKOFF, **NO_LINGER, **REQUEST_TIMEOUT, **_client_properties, **(extra or {}),
    })  # fmt: skip
    made.signer = signing.signing_key() if signer is PROCESS_KEY else signer
    connect(made, init_timeout_s)
    if init:
        made.init_transactions(init_timeout_s)
    return made


def connect(producer: Producer, timeout_s: float) -> None:
    """Bring a new producer's first broker connection up before `init_transactions`.
    librdkafka looks for the transaction coordinator at once, and finding no connection up yet
    it waits for its coordinator query timer (500 ms) to ask again, a half second that about
    a third of transactional producers would pay (a Spark task's, a rebuilding partition's).
    A metadata request waits for the connection instead. An unreachable broker is left for
    `init_transactions` to report, as before."""
    with contextlib.suppress(KafkaException):
        producer.list_topics(timeout=min(timeout_s, CONNECT_TIMEOUT_S))


CONNECT_TIMEOUT_S = 5.0


def transactional_producer(
    bootstrap: str, owner: str, signer: signing.SigningKey | None = PROCESS_KEY
) -> SigningProducer:
    """A producer of its own for a client (`owner` names it in the transactional id): no
    other producer shares the id, so it fences nobody."""
    return producer(bootstrap, f"jobledger-{owner}-{uuid.uuid4()}", init_timeout_s=30,
                    signer=signer)  # fmt: skip


TYPE_HEADER = signing.TYPE_HEADER


def produce_encoded(
    producer: Producer, topic: str, key: bytes, value: bytes, type_name: str,
    on_delivery: Callable[[KafkaError | None, Message], None] | None = None,
) -> None:  # fmt: skip
    """Write one encoded event record: the one header policy of every writer. A producer
    with a signing key (`producer`) adds its signer and the record's signature; `on_delivery`
    hears how the record's delivery went."""
    headers: dict[str, str | bytes] = {TYPE_HEADER: type_name}
    signer = getattr(producer, "signer", None)
    if signer is not None:
        headers.update(signer.headers(topic, key, value, type_name))
    producer.produce(topic, key=key, value=value, headers=headers, on_delivery=on_delivery)


def produce_event(producer: Producer, prefix: str, event: Event, serde: EventSerde) -> None:
    """Write an event to its owner's topic, keyed by its owner (inside the caller's
    transaction)."""
    role, key = event.route()
    topic = topic_name(role, prefix)
    produce_encoded(producer, topic, key.encode(), serde.encode(event, topic), event.type_name())


def append_events(
    producer: Producer, prefix: str, events: Iterable[Event], serde: EventSerde
) -> None:
    """Append events to their owners' topics, keyed by owner, in one transaction."""
    producer.begin_transaction()
    for event in events:
        produce_event(producer, prefix, event, serde)
    producer.commit_transaction(30)


def read_committed_consumer(
    bootstrap: str, group: str | None = None, extra: dict[str, object] | None = None
) -> Consumer:
    """A consumer that sees committed records only; `extra` overrides librdkafka settings
    (e.g. a short `fetch.wait.max.ms` for a reader waiting on one record)."""
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group or f"jobledger-reader-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            **REQUEST_TIMEOUT,
            **CLIENT_LOGGING,
            **_client_properties,
            **(extra or {}),
        }
    )
