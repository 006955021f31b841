"""Where an event belongs: its topic by its route, its partition by its key.

Keys are placed by Kafka's default partitioner (Java's `BuiltInPartitioner`: murmur2 of the
key bytes, made positive, modulo the partition count), the one every client that follows
Java's uses and jobledger's own producers are set to (`murmur2_random`). Each partition is a
reducer copy of its own, so an event read anywhere else than where it belongs would be acted
on by an owner that is not the real one: the runtime refuses it instead, with the reason.
"""

from __future__ import annotations

from jobledger.schemas import Event
from jobledger.schemas.topics import TopicRole

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 of `data` (`org.apache.kafka.common.utils.Utils.murmur2`),
    as an unsigned number."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length & ~3
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length - whole
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def partition_of(key: str, partitions: int) -> int:
    """The partition Kafka's default partitioner gives `key` among `partitions`."""
    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


def misrouted(event: Event, role: TopicRole, partition: int, partitions: int) -> str | None:
    """Why `event`, read from partition `partition` of the `role` topic (which has
    `partitions`), is not where it belongs; None where it is."""
    belongs, key = event.route()
    if belongs is not role:
        return (
            f"{event.type_name()} belongs on the {belongs.value} topic (key {key!r}), "
            f"not on the {role.value} topic"
        )
    expected = partition_of(key, partitions)
    if expected != partition:
        return (
            f"{event.type_name()} with key {key!r} belongs on partition {expected} of "
            f"{partitions} (Kafka's murmur2 partitioner), not on partition {partition}"
        )
    return None
