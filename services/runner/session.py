"""The runner's SparkSession: small, quiet, and able to read and write Kafka.

Python workers must run this interpreter (the project's virtualenv): tasks unpickle the Kafka
data source by importing `jobledger`, which another Python may not have. Unless
`PYSPARK_PYTHON` says otherwise, they run it through `worker_python.py`'s script, which keeps
PySpark's daemons quiet when the JVM goes away. On a standalone
cluster the executors start their Python workers with the interpreter the driver names, so the
same holds there as long as the workers share this machine's paths.

On a standalone cluster (`spark://`) the runner reads Kafka through Spark's own connector,
resolved by Ivy from Maven Central in exactly this PySpark's version (as `spark.jars.packages`
would, but once and quietly: `connector.py`) and shipped to the executors as `spark.jars`:
that is the deployment Spark documents, and its executors then read Kafka in the JVM. Local
masters keep jobledger's Python data source: no download, so `local[*]` works offline, and the
test suite exercises both Kafka paths.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyspark
from pyspark import SparkConf, SparkContext
from pyspark.errors import PySparkRuntimeError
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from .connector import connector_jars
from .kafka_source import NATIVE_PROVIDER_CLASS, native_kafka_available, register
from .worker_python import worker_python

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
    # The JVM talks to Python workers over a socket; over TCP a task's input waits ~40 ms on
    # it (Nagle's algorithm meeting delayed ACKs), which every Spark job running tasks would
    # pay: a no-op Python job costs about twice what it does over a Unix domain socket.
    "spark.python.unix.domain.socket.enabled": "true",
    # PySpark's worker daemon, quiet about the JVM going away as the runner stops
    # (`quiet_daemon.py`): each worker it stopped under left a BrokenPipeError trace.
    "spark.python.daemon.module": "jobledger.services.runner.quiet_daemon",
    # The checkpoint's files on a local disk are written without Hadoop's checksum files
    # (ChecksumFileSystem writes a `.crc` beside each and renames both), which would triple
    # the cost of writing a batch's offsets, on every micro-batch's way to its deployments.
    # The rename that makes a file whole stays the same; a checkpoint elsewhere (HDFS, S3)
    # keeps its file system's own.
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
    # The query writes two checkpoint files per micro-batch (offsets, commits). The default
    # (FileContext) manager sets each file's permissions, which without Hadoop's native
    # library forks a `chmod` from the JVM: ~50 ms per file, more than anything else in a
    # runner's batch but its read. The FileSystem manager writes the same temporary file and
    # renames it into place (atomic on a local disk); what it gives up is the atomic refusal
    # to replace an existing batch file, checked just before the rename instead, which only
    # matters to two queries writing one checkpoint at once, a mistake either way.
    "spark.sql.streaming.checkpointFileManagerClass": (
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
    ),
}

PACKAGES = "spark.jars.packages"
EXECUTOR_WAIT_S = 120.0


def kafka_connector_package() -> str:
    """Maven coordinates of Spark's Kafka connector built for this PySpark: a connector of
    another Spark or Scala version fails inside the stream with linkage errors."""
    jars = Path(pyspark.__file__).parent / "jars"
    core = next(jars.glob("spark-core_*.jar"), None)
    if core is None:
        raise RuntimeError(f"no spark-core jar in {jars}: an incomplete PySpark installation")
    scala = core.name.removeprefix("spark-core_").split("-", 1)[0]
    return f"org.apache.spark:spark-sql-kafka-0-10_{scala}:{pyspark.__version__}"


def is_standalone(master: str) -> bool:
    return master.startswith("spark://")


def cluster_conf(master: str) -> dict[str, str]:
    """What a standalone master needs on top of the defaults: the native Kafka connector's
    jars (resolved on the first start, `connector.connector_jars`)."""
    if not is_standalone(master):
        return {}
    return {"spark.jars": ",".join(connector_jars(kafka_connector_package()))}


def spark_session(
    master: str = "local[*]", app_name: str = "jobledger", conf: dict[str, str] | None = None
) -> SparkSession:
    """A session with the `jobledger-kafka` format registered (see `kafka_source.register`).

    `conf` overrides the defaults and `cluster_conf`. On a standalone master it returns once an
    executor has registered (see `await_executor`). As with any `getOrCreate`, a session
    already running in this process is returned, and settings fixed at its start (master, UI,
    packages) stay as they were.
    """
    python = str(worker_python())
    os.environ.setdefault("PYSPARK_PYTHON", python)
    # the driver's Python workers too (the data source lookup at Spark's start)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", python)
    settings = {**DEFAULT_CONF, **cluster_conf(master), **(conf or {})}
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        _launch_jvm_apart(master, app_name, settings)
        spark = builder.getOrCreate()
    except PySparkRuntimeError as exc:
        if exc.getCondition() != "JAVA_GATEWAY_EXITED" or PACKAGES not in settings:
            raise
        # spark-submit resolves the packages before the JVM serves PySpark; when Ivy fails,
        # its report went to stderr and PySpark only learns that the JVM is gone.
        raise RuntimeError(
            f"Spark did not start: Ivy could not resolve {PACKAGES}={settings[PACKAGES]} "
            "(its report is above: a version Maven Central does not serve, or no way to "
            "reach it)"
        ) from exc
    spark.sparkContext.setLogLevel("WARN")
    _quiet_routine_warnings(spark)
    try:
        check_kafka_connector(spark)
        if is_standalone(master):
            await_executor(spark, EXECUTOR_WAIT_S)
    except RuntimeError:
        spark.stop()
        raise
    register(spark)
    return spark


def _launch_jvm_apart(master: str, app_name: str, settings: dict[str, str]) -> None:
    """Start Spark's JVM (as `getOrCreate` would, with the same configuration) in a session of
    its own, so that a signal to the runner's process group (a shell's `kill %1`, a terminal's
    hang-up) reaches the runner alone: the runner stops its query, its Spark jobs and then
    Spark in that order, instead of the JVM dying under it and the runner's stop ending in a
    trace. The JVM still ends with the runner: it exits when its stdin, a pipe from this
    process, closes. A process already served by a JVM (a session started before, or
    spark-submit's) keeps it."""
    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    conf = SparkConf(loadDefaults=False).setMaster(master).setAppName(app_name)
    conf.setAll(settings.items())
    gateway = launch_gateway(conf, popen_kwargs={"start_new_session": True})
    SparkContext._ensure_initialized(gateway=gateway)


ROUTINE_WARNINGS = (
    "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor",
    "org.apache.spark.sql.execution.streaming.runtime.ResolveWriteToStream",
)
"""Loggers whose warnings are routine for the runner: the trigger's "current batch is falling
behind" every time a micro-batch that runs tasks takes longer than the 0.5 s trigger, and
"spark.sql.adaptive.enabled is not supported in streaming" as every query starts (adaptive
execution stays on for the session's batch work; a stream only goes without it)."""


def _quiet_routine_warnings(spark: SparkSession) -> None:
    """Raise the routine loggers to ERROR in the driver's log4j2 (operators read these logs)."""
    jvm = spark.sparkContext._jvm
    level = jvm.org.apache.logging.log4j.Level.ERROR
    for name in ROUTINE_WARNINGS:
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, level)


def check_kafka_connector(spark: SparkSession) -> None:
    """Refuse a native Kafka connector of another Spark version than the one running: it
    loads, then fails inside the stream thread, where the runner would restart its query
    forever instead of saying why."""
    if not native_kafka_available(spark):
        return
    jvm = spark._jvm  # type: ignore[attr-defined]
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    provider = jvm.java.lang.Class.forName(NATIVE_PROVIDER_CLASS, False, loader)
    version = provider.getPackage().getImplementationVersion()
    if version is not None and version != spark.version:
        raise RuntimeError(
            f"Spark's Kafka connector on the classpath is version {version}, Spark is "
            f"{spark.version}; the connector's version must be Spark's"
        )


def await_executor(spark: SparkSession, timeout_s: float) -> None:
    """Until the first executor has registered. A standalone master grants executors after
    the session has started, or never (no worker with a free core and the executor memory),
    and an executor that cannot connect back to the driver never registers: either way Spark
    only logs warnings while every job waits, and a runner that had registered its
    TaskExecutors would leave each deployment hanging instead of failing."""
    sc = spark.sparkContext
    deadline = time.monotonic() + timeout_s
    while sc._jsc.sc().getExecutorIds().isEmpty():  # type: ignore[attr-defined]
        if time.monotonic() > deadline:
            conf = sc.getConf()
            raise RuntimeError(
                f"no executor registered from {sc.master} within {timeout_s:.0f} s: no worker "
                f"has a free core and spark.executor.memory="
                f"{conf.get('spark.executor.memory', '1g')}, or executors cannot reach this "
                f"driver at {conf.get('spark.driver.host')}:{conf.get('spark.driver.port')} "
                "(see the master's web UI and the workers' logs)"
            )
        time.sleep(0.1)
