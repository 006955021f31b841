"""The `jobledger-kafka` PySpark data source against a real broker.

What Spark reads must be exactly what a plain read_committed consumer reads, offset for offset,
across restarts and rate limits. Test data is written in transactions, as the runner writes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from jobledger.services.kafka import read_committed_consumer, transactional_producer
from jobledger.services.kafka_reads import read_topic
from jobledger.services.kafka_topics import await_metadata

pytest.importorskip("pyspark")

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.datasource import ReadAllAvailable

from jobledger.services.runner import kafka_source
from jobledger.services.runner.kafka_reader_options import ReaderOptions
from jobledger.services.runner.kafka_source import (
    FORMAT,
    kafka_schema,
    native_kafka_available,
    register,
)
from jobledger.services.runner.kafka_stream_readers import (
    DriverKafkaStreamReader,
    KafkaStreamReader,
    split_limit,
)

from ..conftest import Cluster

pytestmark = pytest.mark.broker

QUERY_TIMEOUT_S = 120

READERS = pytest.mark.parametrize("on_driver", ["false", "true"], ids=["tasks", "driver"])
"""Both ways of reading: offset ranges in tasks, or one consumer on the driver (`readOnDriver`)."""

Header = tuple[str, bytes | None]
Record = tuple[int, bytes | None, bytes | None, list[Header]]
"""What a test writes: partition, key, value, headers."""
Read = tuple[int, int, bytes | None, bytes | None, tuple[Header, ...], int, int]
"""What a reader saw: partition, offset, key, value, headers, timestamp ms, timestamp type."""


def new_topic(cluster: Cluster, name: str, partitions: int = 3) -> str:
    topic = f"{cluster.prefix}{name}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=30)
    futures[topic].result()
    return topic


def write_transaction(bootstrap: str, topic: str, records: list[Record]) -> None:
    producer = transactional_producer(bootstrap, "spark-test")
    producer.begin_transaction()
    for partition, key, value, headers in records:
        producer.produce(topic, value=value, key=key, partition=partition, headers=headers)
    producer.commit_transaction(30)


def records(partition: int, tag: str, n: int) -> list[Record]:
    """Keys, values and headers that vary: null keys, null and repeated header values."""
    return [
        (
            partition,
            None if i % 4 == 3 else f"k{partition}-{i}".encode(),
            f"{tag}-{partition}-{i}".encode(),
            [("n", str(i).encode()), ("nil", None)] if i % 2 else [],
        )
        for i in range(n)
    ]


def consumer_reads(bootstrap: str, topic: str) -> list[Read]:
    """The reference: everything a plain read_committed consumer returns, in offset order."""
    consumer = read_committed_consumer(bootstrap)
    try:
        # librdkafka numbers CreateTime 1, Kafka (and Spark) 0.
        out = [
            (
                m.partition(),
                m.offset(),
                m.key(),
                m.value(),
                tuple(m.headers() or ()),
                m.timestamp()[1],
                m.timestamp()[0] - 1,
            )
            for m in read_topic(consumer, topic, True, True)
        ]
    finally:
        consumer.close()
    return sorted(out, key=lambda r: (r[0], r[1]))


def source(spark: SparkSession, bootstrap: str, topic: str, **options: str) -> DataFrame:
    reader = (
        spark.readStream.format(FORMAT)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
    )
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def as_read(row: Row) -> Read:
    def blob(value: Any) -> bytes | None:
        return None if value is None else bytes(value)

    headers = tuple((h["key"], blob(h["value"])) for h in row["headers"])
    return (
        row["partition"],
        row["offset"],
        blob(row["key"]),
        blob(row["value"]),
        headers,
        row["ts"],
        row["timestampType"],
    )


def collecting(batches: list[list[Read]]) -> Callable[[DataFrame, int], None]:
    def collect(batch: DataFrame, _batch_id: int) -> None:
        rows = batch.withColumn("ts", F.unix_millis("timestamp")).collect()
        batches.append([as_read(r) for r in rows])

    return collect


def run_available_now(df: DataFrame, checkpoint: Path) -> tuple[list[list[Read]], list[dict]]:
    """Rows of every micro-batch and the query's progress reports."""
    batches: list[list[Read]] = []
    query = (
        df.writeStream.foreachBatch(collecting(batches))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(QUERY_TIMEOUT_S), "availableNow query did not finish"
    assert query.exception() is None
    return batches, query.recentProgress


def flat(batches: list[list[Read]]) -> list[Read]:
    return sorted((r for batch in batches for r in batch), key=lambda r: (r[0], r[1]))


@READERS
def test_reads_exactly_what_a_read_committed_consumer_reads(
    spark: SparkSession, cluster: Cluster, tmp_path: Path, on_driver: str
) -> None:
    topic = new_topic(cluster, "contents")
    write_transaction(cluster.bootstrap, topic, records(0, "a", 5) + records(1, "a", 3))
    write_transaction(cluster.bootstrap, topic, records(0, "b", 2) + records(2, "b", 4))
    expected = consumer_reads(cluster.bootstrap, topic)
    assert len(expected) == 14

    df = source(spark, cluster.bootstrap, topic, startingOffsets="earliest", readOnDriver=on_driver)
    assert df.schema == kafka_schema(include_headers=True)
    batches, _ = run_available_now(df, tmp_path / "checkpoint")

    assert flat(batches) == expected
    assert {r[6] for r in flat(batches)} == {0}  # CreateTime


def test_schema_without_headers_is_natives_default(spark: SparkSession, cluster: Cluster) -> None:
    df = (
        spark.readStream.format(FORMAT)
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("subscribe", "unused")
        .load()
    )
    assert df.schema == kafka_schema(include_headers=False)
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int>"
    )


@READERS
def test_restart_from_checkpoint_reads_every_record_once(
    spark: SparkSession, cluster: Cluster, tmp_path: Path, on_driver: str
) -> None:
    topic = new_topic(cluster, "restart")
    checkpoint = tmp_path / "checkpoint"
    write_transaction(cluster.bootstrap, topic, records(0, "a", 4) + records(1, "a", 2))
    df = source(spark, cluster.bootstrap, topic, startingOffsets="earliest", readOnDriver=on_driver)
    first, _ = run_available_now(df, checkpoint)
    first_expected = consumer_reads(cluster.bootstrap, topic)
    assert flat(first) == first_expected

    write_transaction(cluster.bootstrap, topic, records(1, "b", 3) + records(2, "b", 2))
    second, _ = run_available_now(df, checkpoint)

    everything = consumer_reads(cluster.bootstrap, topic)
    assert flat(second) == [r for r in everything if r not in first_expected]
    assert flat(first + second) == everything


@READERS
def test_a_batch_not_committed_before_a_restart_is_read_again_whole(
    spark: SparkSession, cluster: Cluster, tmp_path: Path, on_driver: str
) -> None:
    """A batch whose offsets the checkpoint holds but whose commit it does not (the query
    stopped in it) is read again on restart between the same offsets: `readOnDriver` reads it
    in a task (`readBetweenOffsets`), as it has no records held for it; then the query goes on
    after it."""
    topic = new_topic(cluster, "replay")
    checkpoint = tmp_path / "checkpoint"
    write_transaction(cluster.bootstrap, topic, records(0, "a", 4) + records(1, "a", 2))
    df = source(spark, cluster.bootstrap, topic, startingOffsets="earliest", readOnDriver=on_driver)
    first, _ = run_available_now(df, checkpoint)
    assert flat(first) == consumer_reads(cluster.bootstrap, topic)
    last = max(int(f.name) for f in (checkpoint / "commits").iterdir() if f.name.isdigit())
    (checkpoint / "commits" / str(last)).unlink()

    before = consumer_reads(cluster.bootstrap, topic)
    write_transaction(cluster.bootstrap, topic, records(2, "b", 3))
    second, _ = run_available_now(df, checkpoint)

    assert sorted(second[0]) == sorted(first[-1])
    assert flat(second[1:]) == [
        r for r in consumer_reads(cluster.bootstrap, topic) if r not in before
    ]


@READERS
def test_a_topic_subscribed_on_restart_is_read_from_its_beginning(
    spark: SparkSession, cluster: Cluster, tmp_path: Path, on_driver: str
) -> None:
    """Partitions the checkpoint does not know (here: a whole topic) start at their earliest
    offset, as native's newly discovered partitions do; the others resume."""
    first_topic, added_topic = new_topic(cluster, "first"), new_topic(cluster, "added", 2)
    checkpoint = tmp_path / "checkpoint"
    write_transaction(cluster.bootstrap, first_topic, records(0, "a", 3))
    write_transaction(cluster.bootstrap, added_topic, records(1, "a", 2))
    run_available_now(
        source(spark, cluster.bootstrap, first_topic, readOnDriver=on_driver), checkpoint
    )  # latest: none
    write_transaction(cluster.bootstrap, first_topic, records(2, "b", 2))

    both = source(spark, cluster.bootstrap, f"{first_topic},{added_topic}", readOnDriver=on_driver)
    batches, _ = run_available_now(both, checkpoint)

    got = sorted((r[3] for r in flat(batches)), key=str)
    assert got == sorted([f"b-2-{i}".encode() for i in range(2)] + [b"a-1-0", b"a-1-1"], key=str)


def test_max_offsets_per_trigger_bounds_every_batch(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    topic = new_topic(cluster, "limited")
    write_transaction(cluster.bootstrap, topic, records(0, "a", 12) + records(1, "a", 5))
    write_transaction(cluster.bootstrap, topic, records(2, "b", 1))
    limit = 5
    df = source(
        spark, cluster.bootstrap, topic, startingOffsets="earliest", maxOffsetsPerTrigger=str(limit)
    )
    batches, progress = run_available_now(df, tmp_path / "checkpoint")

    assert flat(batches) == consumer_reads(cluster.bootstrap, topic)
    assert all(len(batch) <= limit for batch in batches), [len(b) for b in batches]
    # 18 records and 3 commit markers: at least five batches of at most five offsets.
    assert len(batches) >= 5
    assert len(progress) == len(batches)
    for report in progress:
        (src,) = report["sources"]
        # The first batch reports no start: it began at the earliest offsets, 0 in a new topic.
        start = json.loads(src["startOffset"] or "null") or {topic: {}}
        end = json.loads(src["endOffset"])
        advanced = sum(o - start[topic].get(p, 0) for p, o in end[topic].items())
        assert 0 <= advanced <= limit


@READERS
def test_starting_offsets_latest_skips_what_was_there(
    spark: SparkSession, cluster: Cluster, tmp_path: Path, on_driver: str
) -> None:
    topic = new_topic(cluster, "latest")
    write_transaction(cluster.bootstrap, topic, records(0, "old", 3) + records(2, "old", 2))
    old = consumer_reads(cluster.bootstrap, topic)
    batches: list[list[Read]] = []
    query = (
        source(spark, cluster.bootstrap, topic, startingOffsets="latest", readOnDriver=on_driver)
        .writeStream.foreachBatch(collecting(batches))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()  # the first trigger has fixed where `latest` was
        write_transaction(cluster.bootstrap, topic, records(0, "new", 2) + records(1, "new", 1))
        new = [r for r in consumer_reads(cluster.bootstrap, topic) if r not in old]
        deadline = time.monotonic() + QUERY_TIMEOUT_S
        while len(flat(batches)) < len(new) and time.monotonic() < deadline:
            query.processAllAvailable()
    finally:
        query.stop()
    assert flat(batches) == new


@READERS
def test_starting_offsets_json_per_partition(
    spark: SparkSession, cluster: Cluster, tmp_path: Path, on_driver: str
) -> None:
    topic = new_topic(cluster, "json")
    write_transaction(
        cluster.bootstrap, topic, records(0, "a", 5) + records(1, "a", 3) + records(2, "a", 2)
    )
    starting = json.dumps({topic: {"0": 2, "1": -2, "2": -1}})
    df = source(spark, cluster.bootstrap, topic, startingOffsets=starting, readOnDriver=on_driver)
    batches, _ = run_available_now(df, tmp_path / "checkpoint")

    expected = [
        r
        for r in consumer_reads(cluster.bootstrap, topic)
        if (r[0] == 0 and r[1] >= 2) or r[0] == 1
    ]
    assert flat(batches) == expected


def test_register_picks_this_source_without_the_native_connector(spark: SparkSession) -> None:
    assert not native_kafka_available(spark)
    assert register(spark) == FORMAT


def test_register_picks_native_kafka_when_its_class_loads(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe itself works: a class that is on the classpath is found."""
    monkeypatch.setattr(kafka_source, "NATIVE_PROVIDER_CLASS", "org.apache.spark.sql.SparkSession")
    assert register(spark) == "kafka"


def test_split_limit_is_proportional_and_never_exceeds() -> None:
    backlog = {("t", "0"): 90, ("t", "1"): 9, ("t", "2"): 1, ("t", "3"): 0}
    shares = split_limit(backlog, 10)
    assert sum(shares.values()) == 10
    assert shares[("t", "0")] == 9 and shares[("t", "3")] == 0
    assert all(0 <= shares[tp] <= n for tp, n in backlog.items())
    assert split_limit(backlog, 1000) == backlog
    for limit in range(1, 101):
        shares = split_limit({("a", "0"): 7, ("a", "1"): 50, ("b", "0"): 43}, limit)
        assert sum(shares.values()) == limit


def test_reader_options_are_checked_up_front() -> None:
    base = {"kafka.bootstrap.servers": "localhost:9092", "subscribe": "a,b"}
    options = ReaderOptions.parse(base)
    assert options.topics == ("a", "b") and options.starting == "latest"
    assert options.consumer_config()["isolation.level"] == "read_committed"
    with pytest.raises(ValueError, match="subscribe"):
        ReaderOptions.parse({"kafka.bootstrap.servers": "localhost:9092"})
    with pytest.raises(ValueError, match="bootstrap"):
        ReaderOptions.parse({"subscribe": "a"})
    with pytest.raises(ValueError, match="names topics"):
        ReaderOptions.parse({**base, "startingOffsets": '{"a": {"0": 1}}'})
    with pytest.raises(ValueError, match="startingOffsets"):
        ReaderOptions.parse({**base, "startingOffsets": "oldest"})
    with pytest.raises(ValueError, match="batchOnHeader"):
        ReaderOptions.parse({**base, "batchOnHeader": "kind"})
    with pytest.raises(ValueError, match="readOnDriver"):
        ReaderOptions.parse({**base, "readOnDriver": "true", "maxOffsetsPerTrigger": "5"})


def test_batch_on_header_holds_other_records_until_a_wanted_one(cluster: Cluster) -> None:
    """Records without the header start no micro-batch; the first with it starts one that
    reads them all, from where the last batch ended."""
    topic = new_topic(cluster, "batch-on", partitions=2)
    await_metadata(AdminClient({"bootstrap.servers": cluster.bootstrap}), {topic: 2})
    options = {"kafka.bootstrap.servers": cluster.bootstrap, "subscribe": topic}
    reader = KafkaStreamReader(ReaderOptions.parse({**options, "batchOnHeader": "kind=go, now"}))
    impatient = KafkaStreamReader(
        ReaderOptions.parse({**options, "batchOnHeader": "kind=go", "batchOnHeaderMaxWaitMs": "0"})
    )
    try:
        start = reader.initialOffset()
        assert impatient.initialOffset() == start
        write_transaction(cluster.bootstrap, topic, [(0, None, b"a", [("kind", b"wait")])])
        write_transaction(cluster.bootstrap, topic, [(1, None, b"b", [])])
        assert reader.latestOffset(start, ReadAllAvailable()) == start
        assert reader.latestOffset(start, ReadAllAvailable()) == start  # asked again: held
        held = impatient.latestOffset(start, ReadAllAvailable())
        assert held == impatient.reportLatestOffset() != start  # waited long enough

        write_transaction(cluster.bootstrap, topic, [(1, None, b"c", [("kind", b"now")])])
        end = reader.latestOffset(start, ReadAllAvailable())
        assert end == reader.reportLatestOffset()
        planned = {(p.partition, p.start, p.end) for p in reader.partitions(start, end)}
        assert planned == {
            (0, start[topic]["0"], end[topic]["0"]),
            (1, start[topic]["1"], end[topic]["1"]),
        }
        assert reader.latestOffset(end, ReadAllAvailable()) == end
    finally:
        reader.stop()
        impatient.stop()


def test_read_on_driver_holds_other_records_until_a_wanted_one(cluster: Cluster) -> None:
    """`readOnDriver` under `batchOnHeader`: records fetched without the header are held, not
    a batch; the first with it makes one of them all, in order, ending after the last; and a
    replay of that batch (`readBetweenOffsets`, a restart's) reads the same records."""
    topic = new_topic(cluster, "driver-batch-on", partitions=2)
    await_metadata(AdminClient({"bootstrap.servers": cluster.bootstrap}), {topic: 2})
    reader = DriverKafkaStreamReader(
        ReaderOptions.parse({
            "kafka.bootstrap.servers": cluster.bootstrap, "subscribe": topic,
            "batchOnHeader": "kind=go", "readOnDriver": "true", "includeHeaders": "true",
        })
    )  # fmt: skip
    start = reader.initialOffset()
    write_transaction(cluster.bootstrap, topic, [(0, None, b"a", [("kind", b"wait")])])
    write_transaction(cluster.bootstrap, topic, [(1, None, b"b", [])])

    def read_until(done: Callable[[list[tuple]], bool]) -> tuple[list[tuple], dict]:
        deadline = time.monotonic() + QUERY_TIMEOUT_S
        while time.monotonic() < deadline:
            rows, end = reader.read(start)
            rows = list(rows)
            if done(rows):
                return rows, end
            assert (rows, end) == ([], start)
        raise AssertionError("the reader never got there")

    read_until(lambda _: len(reader._held) == 2)  # both fetched, neither a batch
    write_transaction(cluster.bootstrap, topic, [(1, None, b"c", [("kind", b"go")])])
    rows, end = read_until(bool)

    assert sorted((r[3], r[1]) for r in rows) == [(0, b"a"), (1, b"b"), (1, b"c")]
    # after the last record, or past the commit marker behind it once the consumer saw it
    (s0, s1), (e0, e1) = (start[topic]["0"], start[topic]["1"]), (end[topic]["0"], end[topic]["1"])
    assert s0 + 1 <= e0 <= s0 + 2 and s1 + 3 <= e1 <= s1 + 4
    assert list(reader.read(end)[0]) == []
    assert sorted(reader.readBetweenOffsets(start, end)) == sorted(rows)
