"""Kafka plumbing shared by the engine and the command line: topics, clients, event writes.

The one module that builds Kafka clients and writes events: every producer, consumer and
admin client of the engine, the runtime, the runner's driver and tasks, the projections and
the command line is made here, and every event record is written with one header policy.
(The runner's Spark data source, `runner/kafka_source.py`, builds its clients from the options
Spark hands it, as Spark's own connector does; the benchmarks build raw clients to measure.)
Which broker to use is the command line's business (`cli/options.py`); this module talks to
the one it is given.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from jobledger.schemas import Event, EventSerde
from jobledger.schemas.topics import DEFAULT_PREFIX, TopicRole, topic_name, topic_specs

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


@dataclass(frozen=True)
class TopicCreation:
    topic: str
    partitions: int
    created: bool
    error: str | None = None
    short: str | None = None
    """For a topic that existed: why it is less safe than asked (fewer replicas)."""


def replication(admin: AdminClient, asked: int | None = None) -> tuple[int, dict[str, str]]:
    """The replication factor of the topics jobledger creates (`asked`, else the smaller of 3
    and the broker count), and the config that goes with it: `min.insync.replicas` one less
    where there is more than one replica, so a committed record is on two brokers at least
    and one broker may be lost without stopping writes."""
    if asked is None:  # the brokers alone, not every topic's metadata (a runner asks per task)
        nodes = admin.describe_cluster(request_timeout=30).result(timeout=30).nodes
        asked = min(3, max(1, len(nodes)))
    factor = asked
    return factor, {"min.insync.replicas": str(max(1, factor - 1))}


def create_topics(
    bootstrap: str, prefix: str, partitions: int, replication_factor: int | None = None
) -> list[TopicCreation]:
    """Create every topic of the cluster (replicated as `replication` says); existing topics
    are reported, not an error, with fewer replicas than asked said in `short`."""
    admin = admin_client(bootstrap)
    factor, config = replication(admin, replication_factor)
    wanted = {
        topic_name(spec.role, prefix): NewTopic(
            topic_name(spec.role, prefix), num_partitions=spec.partitions,
            replication_factor=factor, config={**spec.config, **config},
        )
        for spec in topic_specs(partitions)
    }  # fmt: skip
    results = ensure_topics(admin, wanted)
    if all(r.created or r.error for r in results):
        return results
    topics = admin.list_topics(timeout=30).topics
    return [_short(r, topics.get(r.topic), wanted[r.topic]) for r in results]


def ensure_topics(admin: AdminClient, wanted: dict[str, NewTopic]) -> list[TopicCreation]:
    """Create the topics that do not exist yet (existing ones are reported as such, not as
    errors, and left as they are), then wait until the broker serves every one created."""
    futures = admin.create_topics(list(wanted.values()), operation_timeout=30, request_timeout=30)
    results = []
    for name, new in wanted.items():
        try:
            futures[name].result()
            results.append(TopicCreation(name, new.num_partitions, created=True))
        except KafkaException as exc:
            err = exc.args[0]
            if err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                results.append(TopicCreation(name, new.num_partitions, created=False))
            else:
                results.append(TopicCreation(name, new.num_partitions, False, err.str()))
    await_metadata(admin, {r.topic: r.partitions for r in results if r.created})
    return results


def _short(result: TopicCreation, held: Any, asked: NewTopic) -> TopicCreation:
    """`result`, saying so if the topic existed with fewer replicas than `asked`."""
    if result.created or result.error or held is None:
        return result
    replicas = min((len(p.replicas) for p in held.partitions.values()), default=0)
    if replicas >= asked.replication_factor:
        return result
    return replace(result, short=(
        f"{replicas} replica(s) where {asked.replication_factor} were asked: a broker lost "
        "loses its records (kafka-reassign-partitions adds replicas)"
    ))  # fmt: skip


def await_metadata(admin: AdminClient, topics: dict[str, int], timeout_s: float = 30.0) -> None:
    """Until the broker's metadata lists every topic with (at least) its partitions. Apache
    Kafka answers CreateTopics once the controller has the topic, a moment before the broker
    serving it does, and makes its partitions known one by one: a client asking in between is
    told the topic, or a partition of it, does not exist, and a record produced to such a
    partition is lost."""
    deadline = time.monotonic() + timeout_s
    missing = set(topics)
    while missing:
        listed = admin.list_topics(timeout=max(1.0, deadline - time.monotonic())).topics
        missing = {t for t in missing if t not in listed or len(listed[t].partitions) < topics[t]}
        if missing and time.monotonic() > deadline:
            raise KafkaException(
                KafkaError(KafkaError._TIMED_OUT, f"topics not in metadata: {sorted(missing)}")
            )
        if missing:
            time.sleep(0.05)


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
        "bootstrap.servers": bootstrap, **_client_properties,
        **({"log_level": 0} if quiet else {}),
    })  # fmt: skip


def list_topics(bootstrap: str) -> dict[str, int]:
    """Every topic of the cluster and its partition count."""
    metadata = admin_client(bootstrap).list_topics(timeout=10)
    return {name: len(topic.partitions) for name, topic in metadata.topics.items()}


def resolve_topic(name: str, prefix: str) -> str:
    """A role name (`job`, `taskexecutor`, ...) means that topic of the cluster."""
    roles = {role.value: role for role in TopicRole}
    return topic_name(roles[name], prefix) if name in roles else name


ONE_REQUEST_IN_FLIGHT = {"max.in.flight.requests.per.connection": 1}
"""Every transactional producer sends one request at a time per broker connection. With more
(librdkafka's default is 5), a write refused with a retriable error (its partition not led yet:
a topic just created, a leader moving) was overtaken by the next write, already in flight:
Kafka takes any sequence number as the first from a producer it has no state for on a
partition, and librdkafka then counted the refused records as written by the success after
them ("implicitly acked by subsequent batch success"), so the transaction committed without
them. One at a time, the refused write is sent again before anything after it. It cost nothing
measurable here (a 200k-record result, transactions over 9 partitions)."""


RETRY_BACKOFF = {"retry.backoff.ms": 10}
"""A transaction begun right after the last one committed (the next decisions of a partition,
the commit past an awaited record read back) finds the coordinator still writing the last
one's markers: it refuses the new transaction's offsets or partitions as CONCURRENT_TRANSACTIONS
until it is done, a few milliseconds later. librdkafka retries after `retry.backoff.ms`, 100 ms
by default: a transaction with offsets right after another took ~100 ms instead of ~15 ms here,
on most hops of a job. Java's producer retries that refusal after 20 ms. The backoff doubles
from this on each retry of one request (librdkafka's `retry.backoff.max.ms`, 1 s), so a broker
that keeps refusing is not asked much more often than before."""


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


def producer(
    bootstrap: str,
    transactional_id: str,
    extra: dict[str, Any] | None = None,
    init_timeout_s: float = 60,
    init: bool = True,
) -> Producer:
    """Every producer of jobledger: transactional (its writes become visible atomically, and
    making it fences every earlier producer with the same id), idempotent, and partitioning
    keys as Java's client does, one request in flight (ONE_REQUEST_IN_FLIGHT), retrying soon
    (RETRY_BACKOFF). `extra` adds librdkafka settings (a delivery callback, a linger). Without
    `init`, the caller runs `init_transactions` itself (to retry it)."""
    made = Producer({
        "bootstrap.servers": bootstrap, "transactional.id": transactional_id,
        "enable.idempotence": True, "acks": "all", "partitioner": PARTITIONER,
        **ONE_REQUEST_IN_FLIGHT,
        **RETRY_BACKOFF, **REQUEST_TIMEOUT, **_client_properties, **(extra or {}),
    })  # fmt: skip
    connect(made, init_timeout_s)
    if init:
        made.init_transactions(init_timeout_s)
    return made


def connect(producer: Producer, timeout_s: float) -> None:
    """Bring a new producer's first broker connection up before `init_transactions`.
    librdkafka looks for the transaction coordinator at once, and finding no connection up yet
    it waits for its coordinator query timer (500 ms) to ask again: about a third of all
    transactional producers paid that half second (a Spark task's, a rebuilding partition's).
    A metadata request waits for the connection instead. An unreachable broker is left for
    `init_transactions` to report, as before."""
    with contextlib.suppress(KafkaException):
        producer.list_topics(timeout=min(timeout_s, CONNECT_TIMEOUT_S))


CONNECT_TIMEOUT_S = 5.0


def transactional_producer(bootstrap: str, owner: str) -> Producer:
    """A producer of its own for a client (`owner` names it in the transactional id): no
    other producer shares the id, so it fences nobody."""
    return producer(bootstrap, f"jobledger-{owner}-{uuid.uuid4()}", init_timeout_s=30)


TYPE_HEADER = "jobledger.type"
"""Every event record carries its type in this header, so a consumer can filter without
decoding (and a person reading the topic with kcat sees what each record is)."""


def produce_encoded(
    producer: Producer, topic: str, key: bytes, value: bytes, type_name: str
) -> None:
    """Write one encoded event record: the one header policy of every writer."""
    producer.produce(topic, key=key, value=value, headers={TYPE_HEADER: type_name})


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
            **_client_properties,
            **(extra or {}),
        }
    )


def consume_available(consumer: Consumer, limit: int, timeout_s: float) -> list[Message]:
    """Up to `limit` records: waits up to `timeout_s` for the first, then takes what has
    already arrived without waiting. librdkafka's `consume(limit, timeout)` waits the whole
    timeout unless `limit` records come, which a reader that is handed one decision at a time
    pays on every hop."""
    first = consumer.consume(1, timeout_s)
    if not first or limit <= 1:
        return first
    return first + consumer.consume(limit - 1, 0)


class TopicNotFound(LookupError):
    """A topic the command or service needs does not exist (or has no such partition)."""


def partitions_of(consumer: Consumer | Producer, topic: str) -> list[int]:
    metadata = consumer.list_topics(topic, timeout=10)
    info = metadata.topics.get(topic)
    if info is None or info.error is not None or not info.partitions:
        reason = info.error.str() if info is not None and info.error else "no partitions"
        raise TopicNotFound(f"topic {topic!r} not found ({reason}); run `jobledger topics create`")
    return sorted(info.partitions)


def read_topic(
    consumer: Consumer, topic: str, from_beginning: bool, stop_at_end: bool
) -> Iterator[Message]:
    """Records of every partition of `topic`, in order per partition."""
    return read_topics(consumer, [topic], from_beginning, stop_at_end)


READ_BATCH = 10_000
"""Records asked of the consumer at once when reading topics through."""
BULK_READ = {"queued.min.messages": 1_000_000}
"""A consumer that reads a whole log keeps up to a million records fetched ahead (librdkafka
keeps 100,000 by default): a million records were read in 6 s, now in 2.3."""


def read_topics(
    consumer: Consumer, topics: list[str], from_beginning: bool, stop_at_end: bool
) -> Iterator[Message]:
    """Records of every partition of `topics`, in order per partition, read side by side.

    The end of a partition is found with `enable.partition.eof`, never from watermarks (a
    broker may under-report them after non-transactional batches). With
    `stop_at_end`, a partition is read up to the end it has when reading reaches it, and no
    further: waiting for every partition to be at its end at one moment never ended on a
    cluster whose partitions all keep growing (500 TaskExecutors beating).
    """
    start = -2 if from_beginning else -1  # OFFSET_BEGINNING / OFFSET_END
    assignment = [
        TopicPartition(topic, p, start) for topic in topics for p in partitions_of(consumer, topic)
    ]
    consumer.assign(assignment)
    at_end: set[tuple[str, int]] = set()
    while not (stop_at_end and len(at_end) == len(assignment)):
        # in batches: a call per record was a third of reading a million
        for msg in consumer.consume(READ_BATCH, 0.5):
            where = (msg.topic(), msg.partition())
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(where)
                    if stop_at_end:
                        consumer.pause([TopicPartition(*where)])
                    continue
                raise KafkaException(msg.error())
            if stop_at_end and where in at_end:
                continue  # fetched before the pause: past the end this read stops at
            at_end.discard(where)
            yield msg


def read_range(
    consumer: Consumer,
    topic: str,
    partition: int,
    start: int = OFFSET_BEGINNING,
    end: int | None = None,
    on_silence: Callable[[float], None] | None = None,
    poll_s: float = 0.05,
) -> Iterator[Message]:
    """Committed records of one partition from `start` up to `end` (exclusive) or its current
    end (found with partition EOF, never from watermarks), read through `consumer` (which
    must have `enable.partition.eof`). While the broker is silent, `on_silence(seconds)` is
    called after each empty poll: it raises to give up (a deadline, a stop request)."""
    if end is not None and start >= end:
        return
    consumer.assign([TopicPartition(topic, partition, start)])
    try:
        heard = time.monotonic()
        while True:
            msg = consumer.poll(poll_s)
            if msg is None:
                if on_silence is not None:
                    on_silence(time.monotonic() - heard)
                continue
            if msg.error() and msg.error().code() != KafkaError._PARTITION_EOF:
                raise KafkaException(msg.error())
            if (msg.topic(), msg.partition()) != (topic, partition):
                continue  # left in the queue by an earlier read
            heard = time.monotonic()
            if msg.error():  # the end of the partition
                return
            if end is not None and msg.offset() >= end:
                return
            yield msg
            if end is not None and msg.offset() + 1 >= end:
                return
    finally:
        consumer.unassign()


def read_partition(
    bootstrap: str, topic: str, partition: int, start: int = OFFSET_BEGINNING,
    silence_s: float = 10.0,
) -> Iterator[Message]:  # fmt: skip
    """Every committed record of one partition from `start` (default: its beginning) to its
    current end, with a client of its own. TopicNotFound if the topic does not exist,
    TimeoutError if the broker says nothing for `silence_s`."""

    def give_up(silent_for: float) -> None:
        if silent_for > silence_s:
            raise TimeoutError(f"{topic}[{partition}] did not answer in {silence_s:.0f} s")

    consumer = read_committed_consumer(bootstrap)
    try:
        partitions_of(consumer, topic)
        yield from read_range(consumer, topic, partition, start, on_silence=give_up, poll_s=0.5)
    finally:
        consumer.close()


def committed_offsets(bootstrap: str, group: str, topics: list[str]) -> dict[tuple[str, int], int]:
    """The offsets `group` has committed on every partition of `topics` (absent: none)."""
    consumer = read_committed_consumer(bootstrap, group)
    try:
        wanted = [TopicPartition(t, p) for t in topics for p in partitions_of(consumer, t)]
        return {
            (tp.topic, tp.partition): tp.offset
            for tp in consumer.committed(wanted, timeout=30)
            if tp.offset >= 0
        }
    finally:
        consumer.close()


def group_members(bootstrap: str, group: str) -> int:
    """How many consumers are members of `group` now (0 for a group that has none, or that
    does not exist)."""
    admin = admin_client(bootstrap)  # kept while its futures run: they die with it
    futures = admin.describe_consumer_groups([group], request_timeout=30)
    try:
        return len(futures[group].result(timeout=30).members)
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND:
            return 0
        raise


def follow(consumer: Consumer, starts: dict[tuple[str, int], int]) -> Iterator[Message]:
    """Committed records from each (topic, partition)'s start offset on, as they are
    appended, until the caller stops iterating (a follower is stopped with Ctrl-C)."""
    consumer.assign([TopicPartition(t, p, offset) for (t, p), offset in starts.items()])
    while True:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        error = msg.error()
        if error is None:
            yield msg
        elif error.code() != KafkaError._PARTITION_EOF and error.fatal():
            raise KafkaException(error)
