"""Kafka as a PySpark streaming source (`jobledger-kafka`) without the JVM Kafka connector.

Spark's own `kafka` format needs the `spark-sql-kafka` jars, which a plain `pip install pyspark`
lacks and which this project cannot fetch offline. This format speaks Kafka through
confluent-kafka (already a dependency) behind PySpark 4's Python data source API, keeping the
native connector's schema, option names and offset JSON so a query runs unchanged with either
format; `register` says which one to use. It only reads: the runner's tasks write with their
own transactional producers (`task.py`), so what an attempt produces commits in one
transaction with its FINISHED. This module is what Spark sees (the format, its schema, its
registration); `kafka_reader_options.py` checks the options below and
`kafka_stream_readers.py` reads Kafka into micro-batches.

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

from typing import TYPE_CHECKING

from pyspark.errors import PySparkNotImplementedError
from pyspark.sql.datasource import DataSource
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

from .kafka_reader_options import ReaderOptions, bool_option
from .kafka_stream_readers import DriverKafkaStreamReader, KafkaStreamReader

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

FORMAT = "jobledger-kafka"
NATIVE_FORMAT = "kafka"
NATIVE_PROVIDER_CLASS = "org.apache.spark.sql.kafka010.KafkaSourceProvider"

HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)


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


class KafkaDataSource(DataSource):
    """The `jobledger-kafka` format: a streaming reader, nothing to write with."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return kafka_schema(bool_option(self.options, "includeHeaders", False))

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
