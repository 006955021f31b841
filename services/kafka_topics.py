"""What the Kafka cluster holds: the topics jobledger creates (replicated as one setting says),
their partitions, and the consumer groups' offsets and members."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from jobledger.schemas.topics import TopicRole, topic_name, topic_specs

from .kafka import admin_client, read_committed_consumer


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
    bootstrap: str,
    prefix: str,
    partitions: int,
    replication_factor: int | None = None,
    log_config: dict[str, str] | None = None,
) -> list[TopicCreation]:
    """Create every topic of the cluster (replicated as `replication` says); existing topics
    are reported, not an error, with fewer replicas than asked said in `short`. `log_config`
    (a retention, say) goes to the log's topics, the inputs and the dead letters, and is set
    on those that exist already too; the compacted topics keep their latest record per key
    whatever it says."""
    admin = admin_client(bootstrap)
    factor, config = replication(admin, replication_factor)
    logged = log_config or {}
    wanted = {
        topic_name(spec.role, prefix): NewTopic(
            topic_name(spec.role, prefix), num_partitions=spec.partitions,
            replication_factor=factor,
            config={**spec.config, **config, **(logged if spec.role in LOG_TOPICS else {})},
        )
        for spec in topic_specs(partitions)
    }  # fmt: skip
    results = ensure_topics(admin, wanted)
    if logged:
        existing = [topic_name(r, prefix) for r in LOG_TOPICS]
        results = [
            replace(r, error=_altered(admin, r.topic, logged))
            if r.topic in existing and not r.created and not r.error else r
            for r in results
        ]  # fmt: skip
    if all(r.created or r.error for r in results):
        return results
    topics = admin.list_topics(timeout=30).topics
    return [_short(r, topics.get(r.topic), wanted[r.topic]) for r in results]


LOG_TOPICS = (
    TopicRole.JOB,
    TopicRole.RESOURCE_MANAGER,
    TopicRole.TASK_EXECUTOR,
    TopicRole.DEAD_LETTER,
)
"""The topics that grow with every event, and that a retention bounds."""


def _altered(admin: AdminClient, topic: str, config: dict[str, str]) -> str | None:
    """Set `config` on an existing topic, leaving its other settings; the error, if any."""
    resource = ConfigResource(
        ResourceType.TOPIC, topic,
        incremental_configs=[
            ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
            for key, value in config.items()
        ],
    )  # fmt: skip
    try:
        admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    except KafkaException as exc:
        return exc.args[0].str()
    return None


def topic_configs(bootstrap: str, topics: list[str], keys: tuple[str, ...]) -> dict[str, dict]:
    """Topic -> the values of `keys` it has now (its own, or the broker's default)."""
    admin = admin_client(bootstrap)
    resources = [ConfigResource(ResourceType.TOPIC, topic) for topic in topics]
    found: dict[str, dict] = {}
    for resource, future in admin.describe_configs(resources, request_timeout=30).items():
        entries = future.result(timeout=30)
        found[resource.name] = {k: entries[k].value for k in keys if k in entries}
    return found


def watermarks(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    """Partition -> (the oldest offset the topic holds, the next offset it will write)."""
    consumer = read_committed_consumer(bootstrap)
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            for p in partitions_of(consumer, topic)
        }
    finally:
        consumer.close()


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
    partition is lost. A partition counts once it has a leader: one listed before its leader
    is elected answers a ListOffsets with NOT_LEADER_OR_FOLLOWER."""
    deadline = time.monotonic() + timeout_s
    missing = set(topics)
    while missing:
        listed = admin.list_topics(timeout=max(1.0, deadline - time.monotonic())).topics
        missing = {t for t in missing if not _served(listed.get(t), topics[t])}
        if missing and time.monotonic() > deadline:
            raise KafkaException(
                KafkaError(KafkaError._TIMED_OUT, f"topics not in metadata: {sorted(missing)}")
            )
        if missing:
            time.sleep(0.05)


def list_topics(bootstrap: str) -> dict[str, int]:
    """Every topic of the cluster and its partition count."""
    metadata = admin_client(bootstrap).list_topics(timeout=10)
    return {name: len(topic.partitions) for name, topic in metadata.topics.items()}


def delete_prefixed(bootstrap: str, prefix: str, timeout_s: float = 30.0) -> list[str]:
    """Delete every topic whose name starts with `prefix` (one gone meanwhile is no error);
    the topics deleted. For a cluster of one run only: its inboxes, log and result topics."""
    admin = admin_client(bootstrap)
    topics = sorted(t for t in admin.list_topics(timeout=timeout_s).topics if t.startswith(prefix))
    if not topics:
        return []
    deleted = []
    for topic, future in admin.delete_topics(topics, operation_timeout=timeout_s).items():
        try:
            future.result(timeout_s)
            deleted.append(topic)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise
    return sorted(deleted)


def resolve_topic(name: str, prefix: str) -> str:
    """A role name (`job`, `taskexecutor`, ...) means that topic of the cluster."""
    roles = {role.value: role for role in TopicRole}
    return topic_name(roles[name], prefix) if name in roles else name


class TopicNotFound(LookupError):
    """A topic the command or service needs does not exist (or has no such partition)."""


def partitions_of(consumer: Consumer | Producer, topic: str) -> list[int]:
    metadata = consumer.list_topics(topic, timeout=10)
    info = metadata.topics.get(topic)
    if info is None or info.error is not None or not info.partitions:
        reason = info.error.str() if info is not None and info.error else "no partitions"
        raise TopicNotFound(f"topic {topic!r} not found ({reason}); run `jobledger topics create`")
    return sorted(info.partitions)


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


def _served(topic: Any, partitions: int) -> bool:
    """Whether the topic's metadata lists at least `partitions` partitions, each led."""
    if topic is None or len(topic.partitions) < partitions:
        return False
    return all(p.leader >= 0 and p.error is None for p in topic.partitions.values())
