"""Kafka as a PySpark streaming source (`jobledger-kafka`) without the JVM Kafka connector.

Spark's own `kafka` format needs the `spark-sql-kafka` jars, which a plain `pip install pyspark`
lacks and which this project cannot fetch offline. This module speaks Kafka through
confluent-kafka (already a dependency) behind PySpark 4's Python data source API, keeping the
native connector's schema, option names and offset JSON so a query runs unchanged with either
format; `register` says which one to use. It only reads: the runner's tasks write with their
own transactional producers (`task.py`), so what an attempt produces commits in one
transaction with its FINISHED.

Reading (`spark.readStream.format("jobledger-kafka")`):

- `kafka.bootstrap.servers` (required) and `subscribe` (comma-separated topics).
- `startingOffsets`: `latest` (default, as native), `earliest`, or the native JSON
  `{"topic": {"0": 23, "1": -2}}` (-2 earliest, -1 latest), which must name every partition of
  every subscribed topic. It only applies to a new query: a restarted one resumes from the
  offsets in its checkpoint.
- `maxOffsetsPerTrigger`: offsets per micro-batch in total, split over partitions in proportion
  to their backlog and never exceeding the limit (Spark's own split rounds small shares up and
  can overshoot). Offsets, not records: transaction markers occupy offsets too.
- `includeHeaders` (default false, as native) adds the `headers` column.
- `batchOnHeader` (jobledger's own, e.g. `jobledger.type=TaskDeploymentRequested,...`): start a
  micro-batch only once a new record carries that header with one of those values; records
  without one wait for the next such batch, or `batchOnHeaderMaxWaitMs` (default 5000) at most.
  Every record is still read, in order: only when batches start changes. A reader that acts on
  a few kinds of record among many then pays no micro-batch for the others, and a record it
  wants does not queue behind one that started for them.
- `readOnDriver` (jobledger's own, default false): read on the driver with one consumer that
  stays assigned for the query's life and hand Spark each batch's records with its offsets
  (PySpark's `SimpleDataSourceStreamReader`); a batch's tasks then read them from Spark's block
  store, and only a batch replayed after a restart reads Kafka in a task. For small topics
  that one query follows closely (the runner's TaskExecutor topic): no task opens a consumer
  and waits for its first fetch, and records are already fetched when the trigger looks.
  Not with `maxOffsetsPerTrigger`, which would have to leave fetched records unread.
- `kafkaConsumer.pollTimeoutMs` (default 120000): how long a read may make no progress.
- Every other `kafka.*` option goes, prefix stripped, to the confluent-kafka consumer.

`isolation.level` defaults to `read_committed` (native: `read_uncommitted`): every jobledger
writer is transactional, so an uncommitted read could see events of a transaction that later
aborts. The latest offset of a partition is then its last stable offset. A position that has
fallen off the log (retention) fails the read, as native's default `failOnDataLoss=true`.
Offsets in the checkpoint are `{topic: {partition: next offset}}`, exactly native's form.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

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
from pyspark.errors import PySparkNotImplementedError
from pyspark.sql.datasource import (
    DataSource,
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
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

FORMAT = "jobledger-kafka"
NATIVE_FORMAT = "kafka"
NATIVE_PROVIDER_CLASS = "org.apache.spark.sql.kafka010.KafkaSourceProvider"

EARLIEST = -2  # native JSON (and librdkafka's OFFSET_BEGINNING)
LATEST = -1  # native JSON (and librdkafka's OFFSET_END)

Offsets = dict[str, dict[str, int]]
"""{topic: {partition: offset}}; partitions are strings because offsets round-trip via JSON."""

Watermarks = dict[str, dict[str, tuple[int, int]]]
"""{topic: {partition: (low, high)}}, high being the last stable offset under read_committed."""

HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)

# Spark reports Java's TimestampType ids; librdkafka numbers the same kinds differently.
_TIMESTAMP_TYPE_IDS = {
    TIMESTAMP_NOT_AVAILABLE: -1,
    TIMESTAMP_CREATE_TIME: 0,
    TIMESTAMP_LOG_APPEND_TIME: 1,
}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# Errors librdkafka recovers from by itself; a read only gives up on them after its timeout.
_TRANSIENT = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT}


def kafka_schema(include_headers: bool) -> StructType:
    """The native source's schema: every field nullable, `headers` only when asked for."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


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


def _bool_option(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = options.get(name)
    if value is None:
        return default
    if value.strip().lower() not in ("true", "false"):
        raise ValueError(f"option {name} must be true or false, not {value!r}")
    return value.strip().lower() == "true"


def _client_config(options: Mapping[str, str]) -> dict[str, str]:
    """`kafka.*` options without their prefix; Spark lower-cases option names, as does Kafka."""
    config = {k[len("kafka.") :]: v for k, v in options.items() if k.lower().startswith("kafka.")}
    if not config.get("bootstrap.servers"):
        raise ValueError("option kafka.bootstrap.servers is required")
    return config


def _canonical(offsets: Offsets) -> Offsets:
    """Topics and partitions in a fixed order: Spark keeps offsets as JSON text, so equal
    offsets must serialize alike."""
    return {
        topic: {p: offsets[topic][p] for p in sorted(offsets[topic], key=int)}
        for topic in sorted(offsets)
    }


@dataclass(frozen=True)
class ReaderOptions:
    """The reader's options, checked on the driver before any task runs."""

    topics: tuple[str, ...]
    starting: str | Offsets
    max_offsets_per_trigger: int | None
    include_headers: bool
    timeout_s: float
    client: dict[str, str]
    batch_on: tuple[str, frozenset[bytes]] | None = None
    """`batchOnHeader`: the header and the values that start a micro-batch."""
    batch_on_max_wait_s: float = 5.0
    read_on_driver: bool = False

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReaderOptions:
        for unsupported in ("assign", "subscribePattern"):
            if unsupported in options:
                raise ValueError(f"option {unsupported} is not supported; use subscribe")
        topics = tuple(t.strip() for t in options.get("subscribe", "").split(",") if t.strip())
        if not topics:
            raise ValueError("option subscribe (comma-separated topics) is required")
        limit = options.get("maxOffsetsPerTrigger")
        if limit is not None and int(limit) < 1:
            raise ValueError(f"maxOffsetsPerTrigger must be positive, not {limit}")
        read_on_driver = _bool_option(options, "readOnDriver", False)
        if read_on_driver and limit is not None:
            raise ValueError("readOnDriver reads all that is available: no maxOffsetsPerTrigger")
        return cls(
            topics=topics,
            starting=_parse_starting(options.get("startingOffsets", "latest"), topics),
            max_offsets_per_trigger=None if limit is None else int(limit),
            include_headers=_bool_option(options, "includeHeaders", False),
            timeout_s=int(options.get("kafkaConsumer.pollTimeoutMs", "120000")) / 1000,
            client=_client_config(options),
            batch_on=_parse_batch_on(options.get("batchOnHeader")),
            batch_on_max_wait_s=int(options.get("batchOnHeaderMaxWaitMs", "5000")) / 1000,
            read_on_driver=read_on_driver,
        )

    def consumer_config(self) -> dict[str, Any]:
        """Consumer settings: the user's, then what reading exact offset ranges requires."""
        return {
            "group.id": f"jobledger-spark-{uuid.uuid4()}",
            "isolation.level": "read_committed",
            # A task reads a known range and ends at its last offsets, often a transaction
            # marker it only passes by fetching on: librdkafka's 500 ms wait would add to each.
            "fetch.wait.max.ms": 50,
            **self.client,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
        }


def _parse_batch_on(value: str | None) -> tuple[str, frozenset[bytes]] | None:
    if value is None:
        return None
    header, _, wanted = value.partition("=")
    values = frozenset(v.strip().encode() for v in wanted.split(",") if v.strip())
    if not header.strip() or not values:
        raise ValueError(f"batchOnHeader must be like 'header=value1,value2', not {value!r}")
    return header.strip(), values


def _parse_starting(value: str, topics: tuple[str, ...]) -> str | Offsets:
    if value.strip().lower() in ("earliest", "latest"):
        return value.strip().lower()
    try:
        parsed = json.loads(value)
        offsets = {
            t: {str(int(p)): int(o) for p, o in parts.items()} for t, parts in parsed.items()
        }
    except (ValueError, AttributeError, TypeError) as exc:
        raise ValueError(
            f"startingOffsets must be earliest, latest or JSON like "
            f'{{"topic": {{"0": 23}}}}, not {value!r}'
        ) from exc
    if set(offsets) != set(topics):
        raise ValueError(f"startingOffsets names topics {sorted(offsets)}, subscribed {topics}")
    return offsets


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
            return _canonical({t: {p: lo for p, (lo, _) in ps.items()} for t, ps in marks.items()})
        if starting == "latest":
            return _canonical({t: {p: hi for p, (_, hi) in ps.items()} for t, ps in marks.items()})
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
        return _canonical(resolved)

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
        self._latest = _canonical(ends)
        if self._target is None and not self._batch_due(start, ends):
            return _canonical(start)
        if isinstance(limit, ReadMaxRows):
            backlog = {tp: ends[tp[0]][tp[1]] - begin for tp, begin in lows.items()}
            for (topic, p), n in split_limit(backlog, limit.max_rows).items():
                ends[topic][p] = lows[(topic, p)] + n
        return _canonical(ends)

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
        end = _canonical({topic: dict(parts) for topic, parts in self._next.items()})
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


class KafkaDataSource(DataSource):
    """The `jobledger-kafka` format: a streaming reader, nothing to write with."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return kafka_schema(_bool_option(self.options, "includeHeaders", False))

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        options = self._reader_options(schema)
        if options.read_on_driver:
            # PySpark then asks simpleStreamReader, as documented for sources without one
            raise PySparkNotImplementedError(
                errorClass="NOT_IMPLEMENTED", messageParameters={"feature": "streamReader"}
            )
        return KafkaStreamReader(options)

    def simpleStreamReader(self, schema: StructType) -> DriverKafkaStreamReader:
        return DriverKafkaStreamReader(self._reader_options(schema))

    def _reader_options(self, schema: StructType) -> ReaderOptions:
        options = ReaderOptions.parse(self.options)
        if schema != kafka_schema(options.include_headers):
            raise ValueError("the Kafka source has a fixed schema; do not set one")
        return options


def native_kafka_available(spark: SparkSession) -> bool:
    """Whether the JVM Kafka connector is on the driver's classpath; any error means no."""
    try:
        jvm = spark._jvm  # type: ignore[attr-defined]
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName(NATIVE_PROVIDER_CLASS, False, loader)
    except Exception:
        return False
    return True


def register(spark: SparkSession) -> str:
    """Register `jobledger-kafka` and name the format the runner should use: the native
    connector when present (JVM speed, same schema and options), else this one. Registered
    once per session: the runner's own session registered it already, and registering it
    again has Spark warn that it replaced it in every runner's log."""
    manager = spark._jsparkSession.sessionState().dataSourceManager()  # type: ignore[attr-defined]
    if not manager.dataSourceExists(FORMAT):
        spark.dataSource.register(KafkaDataSource)
    return NATIVE_FORMAT if native_kafka_available(spark) else FORMAT
