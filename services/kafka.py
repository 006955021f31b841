"""Kafka plumbing shared by every command: where the broker is, topics, clients.

Which broker to use is the command line's business (`cli/options.py`); this module only
talks to the one it is given.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
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
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    try:
        admin.list_topics(timeout=timeout_s)
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


def create_topics(
    bootstrap: str, prefix: str, partitions: int, replication_factor: int = 1
) -> list[TopicCreation]:
    """Create every topic of the cluster; existing topics are reported, not an error."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    specs = topic_specs(partitions)
    futures = admin.create_topics(
        [
            NewTopic(
                topic_name(spec.role, prefix),
                num_partitions=spec.partitions,
                replication_factor=replication_factor,
                config=spec.config,
            )
            for spec in specs
        ],
        operation_timeout=30,
        request_timeout=30,
    )
    results = []
    for spec in specs:
        name = topic_name(spec.role, prefix)
        try:
            futures[name].result()
            results.append(TopicCreation(name, spec.partitions, created=True))
        except KafkaException as exc:
            err = exc.args[0]
            if err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                results.append(TopicCreation(name, spec.partitions, created=False))
            else:
                results.append(TopicCreation(name, spec.partitions, False, err.str()))
    await_metadata(admin, {r.topic: r.partitions for r in results if r.error is None})
    return results


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


def list_topics(bootstrap: str) -> dict[str, int]:
    """Every topic of the cluster and its partition count."""
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return {name: len(topic.partitions) for name, topic in metadata.topics.items()}


def resolve_topic(name: str, prefix: str) -> str:
    """A role name (`job`, `taskexecutor`, ...) means that topic of the cluster."""
    roles = {role.value: role for role in TopicRole}
    return topic_name(roles[name], prefix) if name in roles else name


def transactional_producer(bootstrap: str, owner: str) -> Producer:
    """A producer whose writes become visible atomically, per transaction.

    Transactions also sidestep the embedded broker's watermark bug for batched writes.
    """
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"jobledger-{owner}-{uuid.uuid4()}",
            "enable.idempotence": True,
            "partitioner": PARTITIONER,
        }
    )
    producer.init_transactions(30)
    return producer


def append_events(
    producer: Producer, prefix: str, events: Iterable[Event], serde: EventSerde
) -> None:
    """Append events to their owners' topics, keyed by owner, in one transaction."""
    producer.begin_transaction()
    for event in events:
        role, key = event.route()
        topic = topic_name(role, prefix)
        producer.produce(topic, key=key.encode(), value=serde.encode(event, topic))
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
            **(extra or {}),
        }
    )


def partitions_of(consumer: Consumer, topic: str) -> list[int]:
    metadata = consumer.list_topics(topic, timeout=10)
    info = metadata.topics.get(topic)
    if info is None or info.error is not None or not info.partitions:
        reason = info.error.str() if info is not None and info.error else "no partitions"
        raise LookupError(f"topic {topic!r} not found ({reason}); run `jobledger topics create`")
    return sorted(info.partitions)


def read_topic(
    consumer: Consumer, topic: str, from_beginning: bool, stop_at_end: bool
) -> Iterator[Message]:
    """Records of every partition of `topic`, in order per partition."""
    return read_topics(consumer, [topic], from_beginning, stop_at_end)


def read_topics(
    consumer: Consumer, topics: list[str], from_beginning: bool, stop_at_end: bool
) -> Iterator[Message]:
    """Records of every partition of `topics`, in order per partition, read side by side.

    The end of a partition is found with `enable.partition.eof`, never from watermarks: the
    embedded broker under-reports high watermarks after non-transactional batches.
    """
    start = -2 if from_beginning else -1  # OFFSET_BEGINNING / OFFSET_END
    assignment = [
        TopicPartition(topic, p, start) for topic in topics for p in partitions_of(consumer, topic)
    ]
    consumer.assign(assignment)
    at_end: set[tuple[str, int]] = set()
    while not (stop_at_end and len(at_end) == len(assignment)):
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                at_end.add((msg.topic(), msg.partition()))
                continue
            raise KafkaException(msg.error())
        at_end.discard((msg.topic(), msg.partition()))
        yield msg


def read_partition(
    bootstrap: str, topic: str, partition: int, start: int = -2, silence_s: float = 10.0
) -> Iterator[Message]:
    """Every committed record of one partition from `start` (default: its beginning) to its
    current end (found with partition EOF, like `read_topics`). LookupError if the topic does
    not exist, TimeoutError if the broker says nothing for `silence_s`."""
    consumer = read_committed_consumer(bootstrap)
    try:
        partitions_of(consumer, topic)
        consumer.assign([TopicPartition(topic, partition, start)])
        while True:
            msg = consumer.poll(silence_s)
            if msg is None:
                raise TimeoutError(f"{topic}[{partition}] did not answer in {silence_s:.0f} s")
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return
                raise KafkaException(msg.error())
            yield msg
    finally:
        consumer.close()


def committed_offsets(bootstrap: str, group: str, topics: list[str]) -> dict[tuple[str, int], int]:
    """The offsets `group` has committed on every partition of `topics` (absent: none)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})  # fmt: skip
    try:
        wanted = [TopicPartition(t, p) for t in topics for p in partitions_of(consumer, t)]
        return {
            (tp.topic, tp.partition): tp.offset
            for tp in consumer.committed(wanted, timeout=30)
            if tp.offset >= 0
        }
    finally:
        consumer.close()
