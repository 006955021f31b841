"""Reading the log: committed records of a partition or of whole topics, to their end or as
they are appended, in batches sized for replay."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from .kafka import read_committed_consumer
from .kafka_topics import partitions_of


def consume_available(consumer: Consumer, limit: int, timeout_s: float) -> list[Message]:
    """Up to `limit` records: waits up to `timeout_s` for the first, then takes what has
    already arrived without waiting. librdkafka's `consume(limit, timeout)` waits the whole
    timeout unless `limit` records come, which a reader that is handed one decision at a time
    pays on every hop."""
    first = consumer.consume(1, timeout_s)
    if not first or limit <= 1:
        return first
    return first + consumer.consume(limit - 1, 0)


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

READ_TO_END = {"fetch.wait.max.ms": 10}
"""A consumer that reads to the end and stops: the broker answers a fetch at a partition's end
at once instead of holding it for new records (librdkafka asks it to wait 500 ms), so the end
is found in one round trip; a small log's `job list` spent a second there. Not for a consumer
that follows the log: idle, it would ask a hundred times a second."""


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
        # in batches (a call per record was a third of reading a million), each as soon as
        # anything arrived: a batch waited out its whole timeout, a small log's read was
        # that timeout several times over
        for msg in consume_available(consumer, READ_BATCH, 0.5):
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
