"""The runner's SparkSession: small, quiet, and able to read and write Kafka.

Python workers must run this interpreter (the project's virtualenv): tasks unpickle the Kafka
data source by importing `jobledger`, which another Python may not have.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from .kafka_source import register

# The runner executes many tiny micro-batches: Spark's 200 shuffle partitions would mean 200
# near-empty tasks per aggregation, and the UI is a port nobody reads.
DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.streaming.stopGracefullyOnShutdown": "true",
    "spark.ui.showConsoleProgress": "false",
    # A streaming query stopped or cancelled mid-batch hands Spark a long Python traceback,
    # which a recursive java.util.regex match overflowed the default 512 KiB thread stack on
    # (StackOverflowError in the stream execution thread, which then dies).
    "spark.driver.extraJavaOptions": "-Xss16m",
}


def spark_session(
    master: str = "local[*]", app_name: str = "jobledger", conf: dict[str, str] | None = None
) -> SparkSession:
    """A session with the `jobledger-kafka` format registered (see `kafka_source.register`).

    `conf` overrides the defaults. As with any `getOrCreate`, a session already running in
    this process is returned, and settings fixed at its start (master, UI) stay as they were.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**DEFAULT_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    return spark
