"""Queryable keyed state on a compacted topic: the runner's stand-in for a KvState server.

A keyed operator registered as queryable publishes each key's value under
`<KvStateID>/<key as JSON>`; all entries of one KvState instance go to one partition (chosen
from the KvStateID), so a lookup reads that partition only. A client finds the KvStateID the
way Flink's does: the key's key group, then the job's KvState location registry
(`KvStateRegistered` events replayed by the JobMaster).
"""

from __future__ import annotations

import json
import zlib
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer

from jobledger.schemas import topic_name
from jobledger.schemas.topics import TopicRole

from ..kafka import read_committed_consumer
from ..kafka_reads import read_partition
from ..kafka_topics import partitions_of


class KvStateLookupError(LookupError):
    """The state could not be read (topic missing, broker not answering)."""


def _topic(prefix: str) -> str:
    return topic_name(TopicRole.KV_STATE, prefix)


def _partition(kv_state_id: str, partitions: int) -> int:
    return zlib.crc32(kv_state_id.encode()) % partitions


def _entry_key(kv_state_id: str, key: Any) -> bytes:
    return f"{kv_state_id}/{json.dumps(key)}".encode()


def _partitions(client: Producer | Consumer, topic: str) -> int:
    try:
        return len(partitions_of(client, topic))
    except LookupError as exc:
        raise KvStateLookupError(str(exc)) from exc


def publish(producer: Producer, prefix: str, kv_state_id: str, state: dict[Any, Any]) -> None:
    """Write every key's value (inside the caller's transaction)."""
    topic = _topic(prefix)
    partition = _partition(kv_state_id, _partitions(producer, topic))
    for key, value in state.items():
        producer.produce(
            topic, partition=partition, key=_entry_key(kv_state_id, key),
            value=json.dumps(value).encode(),
        )  # fmt: skip


def lookup(bootstrap: str, prefix: str, kv_state_id: str, key: Any) -> Any | None:
    """The latest value published for `key` by the KvState instance, or None."""
    topic = _topic(prefix)
    probe = read_committed_consumer(bootstrap)
    try:
        partition = _partition(kv_state_id, _partitions(probe, topic))
    finally:
        probe.close()
    wanted = _entry_key(kv_state_id, key)
    found = None
    try:
        for msg in read_partition(bootstrap, topic, partition):
            if msg.key() == wanted:
                found = json.loads(msg.value())
    except (TimeoutError, KafkaException) as exc:
        raise KvStateLookupError(f"{topic}[{partition}]: {exc}") from exc
    return found
