"""How `jobledger-kafka` reads Kafka into micro-batches, two ways: `KafkaStreamReader` plans
offset ranges from watermarks on the driver and reads each range in a task;
`DriverKafkaStreamReader` (`readOnDriver`) keeps one consumer on the driver and hands Spark
what it fetched. Both read committed records only and end a range at the partition's end as
well as at its last offset, so a transaction marker there never stalls a batch.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from pyspark.sql.datasource import (
    DataSourceStreamReader,
    InputPartition,
    SimpleDataSourceStreamReader,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from .kafka_reader_options import EARLIEST, LATEST, Offsets, ReaderOptions, Watermarks, canonical

# Spark reports Java's TimestampType ids; librdkafka numbers the same kinds differently.
_TIMESTAMP_TYPE_IDS = {
    TIMESTAMP_NOT_AVAILABLE: -1,
    TIMESTAMP_CREATE_TIME: 0,
    TIMESTAMP_LOG_APPEND_TIME: 1,
}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# Errors librdkafka recovers from by itself; a read only gives up on them after its timeout.
_TRANSIENT = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT}


def split_limit(backlog: Mapping[tuple[str, str], int], limit: int) -> dict[tuple[str, str], int]:
    """How many offsets each partition may advance so that the total is min(limit, backlog).

    Shares are proportional to the backlog, rounded down, and the offsets left over go to the
    largest remainders: the total never exceeds `limit` and always makes progress.
    """
    total = sum(n for n in backlog.values() if n > 0)
    if total <= limit:
        return {tp: max(n, 0) for tp, n in backlog.items()}
    share = {tp: limit * max(n, 0) // total for tp, n in backlog.items()}
    leftover = limit - sum(share.values())
    by_remainder = sorted(backlog, key=lambda tp: -(limit * max(backlog[tp], 0) % total))
    for tp in by_remainder[:leftover]:
        share[tp] += 1
    return share


@dataclass
class KafkaInputPartition(InputPartition):
    """One topic-partition's offsets [start, end) of a micro-batch; start may be EARLIEST."""

    topic: str
    partition: int
    start: int
    end: int


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches from watermarks on the driver and reads offset ranges in tasks.

    The driver keeps one consumer for watermark queries. Spark pickles this object into every
    task, so the consumer is never part of its state and `read` opens a consumer of its own.
    """

    def __init__(self, options: ReaderOptions) -> None:
        self._options = options
        self._consumer: Consumer | None = None
        self._peeker: Consumer | None = None
        self._initial: Offsets | None = None
        self._target: Watermarks | None = None
        self._latest: Offsets | None = None
        self._looked_at: dict[tuple[str, str], int] = {}
        """`batchOnHeader`: per partition, where the records that start no batch end."""
        self._held_since: float | None = None
        """`batchOnHeader`: since when new records have waited for a batch."""

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_consumer": None, "_peeker": None}

    def _metadata_consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(self._options.consumer_config())
        return self._consumer

    def _watermarks(self) -> Watermarks:
        consumer = self._metadata_consumer()
        timeout = self._options.timeout_s
        marks: Watermarks = {}
        for topic in sorted(self._options.topics):
            info = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
            if info is None or info.error is not None or not info.partitions:
                reason = info.error.str() if info is not None and info.error else "no partitions"
                raise LookupError(f"topic {topic!r} cannot be read: {reason}")
            marks[topic] = {
                str(p): consumer.get_watermark_offsets(
                    TopicPartition(topic, p), timeout=timeout, cached=False
                )
                for p in sorted(info.partitions)
            }
        return marks

    def initialOffset(self) -> dict:
        """Resolved once per run, so `latest` names the same offsets however often Spark asks."""
        if self._initial is None:
            self._initial = self._resolve_starting(self._watermarks())
        return self._initial

    def _resolve_starting(self, marks: Watermarks) -> Offsets:
        starting = self._options.starting
        if starting == "earliest":
            return canonical({t: {p: lo for p, (lo, _) in ps.items()} for t, ps in marks.items()})
        if starting == "latest":
            return canonical({t: {p: hi for p, (_, hi) in ps.items()} for t, ps in marks.items()})
        assert isinstance(starting, dict)
        resolved: Offsets = {}
        for topic, parts in marks.items():
            named = starting[topic]
            if set(named) != set(parts):
                raise ValueError(
                    f"startingOffsets must name every partition of {topic!r} "
                    f"({sorted(parts, key=int)}), not {sorted(named, key=int)}"
                )
            resolved[topic] = {
                p: {EARLIEST: lo, LATEST: hi}.get(named[p], named[p])
                for p, (lo, hi) in parts.items()
            }
        return canonical(resolved)

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the end of an availableNow run: nothing written after this call is read."""
        self._target = self._watermarks()

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self._options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        marks = self._target if self._target is not None else self._watermarks()
        ends: Offsets = {topic: dict(parts) for topic, parts in start.items()}
        lows: dict[tuple[str, str], int] = {}
        for topic, parts in marks.items():
            for p, (low, high) in parts.items():
                begin = start.get(topic, {}).get(p)
                lows[(topic, p)] = low if begin is None else begin
                # A last stable offset behind where we are (a broker's glitch) never rewinds.
                ends.setdefault(topic, {})[p] = high if begin is None else max(begin, high)
        self._latest = canonical(ends)
        if self._target is None and not self._batch_due(start, ends):
            return canonical(start)
        if isinstance(limit, ReadMaxRows):
            backlog = {tp: ends[tp[0]][tp[1]] - begin for tp, begin in lows.items()}
            for (topic, p), n in split_limit(backlog, limit.max_rows).items():
                ends[topic][p] = lows[(topic, p)] + n
        return canonical(ends)

    def _batch_due(self, start: Offsets, ends: Offsets) -> bool:
        """Whether the records between `start` and `ends` start a micro-batch: always,
        unless `batchOnHeader` is set; then once one of them carries the header, or they have
        waited `batchOnHeaderMaxWaitMs`. Each record is looked at once, however often asked."""
        if self._options.batch_on is None:
            return True
        new = {
            (topic, p): (start.get(topic, {}).get(p), end)
            for topic, parts in ends.items()
            for p, end in parts.items()
            if end > start.get(topic, {}).get(p, EARLIEST)
        }
        if not new:
            self._held_since = None
            return False
        now = time.monotonic()
        self._held_since = self._held_since if self._held_since is not None else now
        if now - self._held_since >= self._options.batch_on_max_wait_s:
            self._held_since = None
            return True
        for (topic, p), (begin, end) in new.items():
            if begin is None:  # a partition that appeared since: read it at once
                self._held_since = None
                return True
            looked = max(begin, self._looked_at.get((topic, p), begin))
            if looked < end and self._wanted_in(KafkaInputPartition(topic, int(p), looked, end)):
                self._held_since = None
                return True
            self._looked_at[(topic, p)] = end
        return False

    def _wanted_in(self, part: KafkaInputPartition) -> bool:
        assert self._options.batch_on is not None
        if self._peeker is None:
            self._peeker = Consumer(self._options.consumer_config())
        messages = _read_messages(self._peeker, part, self._options.timeout_s)
        return any(_starts_batch(msg, self._options.batch_on) for msg in messages)

    def reportLatestOffset(self) -> dict | None:
        return self._latest

    def partitions(self, start: dict, end: dict) -> list[KafkaInputPartition]:
        planned = []
        for topic, parts in end.items():
            for p, stop in parts.items():
                # A partition that appeared after `start` is read from its beginning.
                begin = start.get(topic, {}).get(p, EARLIEST)
                if stop > max(begin, 0):
                    planned.append(KafkaInputPartition(topic, int(p), begin, stop))
        return planned

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        assert isinstance(partition, KafkaInputPartition)
        consumer = Consumer(self._options.consumer_config())
        try:
            yield from _read_range(
                consumer, partition, self._options.include_headers, self._options.timeout_s
            )
        finally:
            consumer.close()

    def stop(self) -> None:
        for consumer in (self._consumer, self._peeker):
            if consumer is not None:
                consumer.close()
        self._consumer = self._peeker = None


def _starts_batch(msg: Message, batch_on: tuple[str, frozenset[bytes]]) -> bool:
    """Whether the record carries `batchOnHeader`'s header with one of its values: read from
    the headers, so the records that start no batch are never decoded here."""
    header, values = batch_on
    return any(k == header and v in values for k, v in msg.headers() or ())


PARTITION_CHECK_INTERVAL_S = 1.0
"""How often `readOnDriver` looks for partitions that appeared since it assigned."""


class DriverKafkaStreamReader(SimpleDataSourceStreamReader, SupportsTriggerAvailableNow):
    """`readOnDriver`: one consumer, assigned once, whose fetched records Spark takes as its
    batches. Spark asks `read(start)` at every trigger; the records fetched since `start` are
    a batch (or wait for one, under `batchOnHeader`), and its end is the offset after them.
    A `start` other than where the records held begin (the first call, a restart, a replayed
    batch) assigns the consumer there again. Spark pickles this object into the tasks of a
    replayed batch (`readBetweenOffsets`), so the consumer is never part of its state."""

    def __init__(self, options: ReaderOptions) -> None:
        self._options = options
        self._ranges = KafkaStreamReader(options)
        """Initial offsets and replayed batches: the partitioned reader's work."""
        self._consumer: Consumer | None = None
        self._from: Offsets | None = None
        """Where the records held begin: the start of the next batch."""
        self._next: Offsets = {}
        """Per partition, the offset after the last record fetched (or its EOF)."""
        self._held: list[Message] = []
        self._due = False
        self._held_since: float | None = None
        self._checked_at = 0.0
        self._target: Watermarks | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_consumer": None, "_from": None, "_held": []}

    def initialOffset(self) -> dict:
        return self._ranges.initialOffset()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._ranges._watermarks()

    def read(self, start: dict) -> tuple[Iterator[tuple], dict]:
        if start != self._from:
            self._assign(start)
        self._fetch()
        if not self._held or not self._batch_due():
            return iter(()), start
        rows = [_row(msg, self._options.include_headers) for msg in self._held]
        end = canonical({topic: dict(parts) for topic, parts in self._next.items()})
        self._from, self._held, self._due, self._held_since = end, [], False, None
        return iter(rows), end

    def readBetweenOffsets(self, start: dict, end: dict) -> Iterator[tuple]:
        return (
            row for part in self._ranges.partitions(start, end) for row in self._ranges.read(part)
        )

    def _assign(self, start: Offsets) -> None:
        if self._consumer is None:
            self._consumer = Consumer(self._options.consumer_config())
        self._next = {topic: dict(parts) for topic, parts in start.items()}
        self._consumer.assign(
            [TopicPartition(t, int(p), o) for t, parts in start.items() for p, o in parts.items()]
        )
        self._from, self._held, self._due, self._held_since = start, [], False, None
        self._add_new_partitions()

    def _add_new_partitions(self) -> None:
        """Partitions `start` does not know are read from their beginning, as in
        `KafkaStreamReader.partitions`."""
        consumer = self._consumer
        assert consumer is not None
        self._checked_at = time.monotonic()
        timeout = self._options.timeout_s
        added = []
        for topic in self._options.topics:
            known = self._next.setdefault(topic, {})
            if self._target is not None:
                partitions = [int(p) for p in self._target[topic]]
            else:
                info = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
                partitions = [] if info is None or info.error else list(info.partitions)
            for p in partitions:
                if str(p) not in known:
                    tp = TopicPartition(topic, p)
                    low, _ = consumer.get_watermark_offsets(tp, timeout=timeout, cached=False)
                    known[str(p)] = low
                    added.append(TopicPartition(topic, p, low))
        if added:
            self._consumer.incremental_assign(added)
            self._due = True

    def _fetch(self) -> None:
        """Take what the consumer has fetched; under availableNow, wait for the target."""
        assert self._consumer is not None
        if time.monotonic() - self._checked_at >= PARTITION_CHECK_INTERVAL_S:
            self._add_new_partitions()
        deadline = time.monotonic() + self._options.timeout_s
        while True:
            messages = self._consumer.consume(1000, 0 if self._target is None else 0.1)
            for msg in messages:
                self._take(msg)
            if self._target is None:
                if not messages:
                    return
            elif self._reached_target():
                return
            elif time.monotonic() > deadline:
                raise TimeoutError(
                    f"the end offsets {self._target} were not all read within "
                    f"{self._options.timeout_s:.0f} s"
                )

    def _take(self, msg: Message) -> None:
        """Hold a fetched record for the next batch (an end of partition only moves where
        the partition is read to: a read_committed consumer skips markers and aborted
        records, so the last record's offset alone would leave the batch's end short)."""
        error = msg.error()
        topic, p = msg.topic(), str(msg.partition())
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                self._advance(topic, p, msg.offset())
            elif error.code() not in _TRANSIENT:
                raise KafkaException(error)
            return
        target = None if self._target is None else self._target[topic][p][1]
        if target is not None and msg.offset() >= target:
            return  # written after availableNow started: not this run's
        self._held.append(msg)
        self._advance(topic, p, msg.offset() + 1)
        if self._options.batch_on is None or _starts_batch(msg, self._options.batch_on):
            self._due = True

    def _advance(self, topic: str, p: str, offset: int) -> None:
        """Move where a partition is read to, never back and, under availableNow, never past
        the target (records written after the run started belong to the next one)."""
        target = None if self._target is None else self._target[topic][p][1]
        offset = offset if target is None else min(offset, target)
        self._next[topic][p] = max(self._next[topic].get(p, offset), offset)

    def _reached_target(self) -> bool:
        assert self._target is not None
        return all(
            self._next.get(topic, {}).get(p, low) >= high
            for topic, parts in self._target.items()
            for p, (low, high) in parts.items()
        )

    def _batch_due(self) -> bool:
        """Under `batchOnHeader`, once a record held carries the header or the first has
        waited `batchOnHeaderMaxWaitMs`; else (and under availableNow) always."""
        if self._due or self._target is not None:
            return True
        now = time.monotonic()
        self._held_since = self._held_since if self._held_since is not None else now
        return now - self._held_since >= self._options.batch_on_max_wait_s


def _read_range(
    consumer: Consumer, part: KafkaInputPartition, include_headers: bool, timeout_s: float
) -> Iterator[tuple]:
    """Rows of offsets [start, end) of one partition."""
    return (_row(msg, include_headers) for msg in _read_messages(consumer, part, timeout_s))


def _read_messages(
    consumer: Consumer, part: KafkaInputPartition, timeout_s: float
) -> Iterator[Message]:
    """Records of offsets [start, end) of one partition.

    The last offsets of a range may hold a transaction marker or an aborted record, which a
    read_committed consumer never returns, so the range also ends at partition EOF past it.
    """
    consumer.assign([TopicPartition(part.topic, part.partition, part.start)])
    deadline = time.monotonic() + timeout_s
    while True:
        msg = consumer.poll(1.0)
        error = None if msg is None else msg.error()
        if msg is not None and error is None:
            offset = msg.offset()
            if offset >= part.end:
                return
            yield msg
            if offset >= part.end - 1:
                return
            deadline = time.monotonic() + timeout_s
            continue
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                if msg.offset() >= part.end:
                    return
            elif error.code() not in _TRANSIENT:
                raise KafkaException(error)
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"no progress reading {part.topic}[{part.partition}] offsets "
                f"[{part.start}, {part.end}) for {timeout_s:.0f} s"
            )


def _row(msg: Message, include_headers: bool) -> tuple:
    ts_type, ts_ms = msg.timestamp()
    timestamp = (
        None if ts_type == TIMESTAMP_NOT_AVAILABLE else _EPOCH + timedelta(milliseconds=ts_ms)
    )
    row = (
        msg.key(),
        msg.value(),
        msg.topic(),
        msg.partition(),
        msg.offset(),
        timestamp,
        _TIMESTAMP_TYPE_IDS[ts_type],
    )
    if include_headers:
        row += ([(k, v) for k, v in msg.headers() or []],)
    return row
