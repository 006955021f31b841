"""The task runner: a Structured Streaming query over the TaskExecutor topic that runs the
tasks deployed to its TaskExecutors as Spark jobs.

The runner registers its TaskExecutors with the ResourceManager (slots default to Spark's
cores) and heartbeats them: those beats are what keeps them alive, judged by the
ResourceManager against `heartbeat.timeout`. Each registration is a new instance (a fresh
InstanceID): a restarted runner, or one whose connection the ResourceManager closed (it was
silent too long), starts over with empty slots, and runs only what is accepted for its
current instance; what was deployed to an earlier one is the JobMasters' to fail. The
ResourceManager, the TaskExecutor slot tables and the
JobMasters (the services) do the rest until a `TaskDeploymentRequested` for one of its
TaskExecutors arrives. Each micro-batch hands its deployments, grouped by job, to Spark as one
job each (one Spark task per deployment, see `task.py`) from a thread pool, so the query keeps
reading while tasks run and a `TaskCancellationRequested` can cancel them. The query's offsets
live in its checkpoint: a restarted runner resumes after the last micro-batch it finished,
and the few deployments it may see again report under the same event ids.

The work is split by job: this module keeps the query's life (start, revival from its
checkpoint, stop, in that order); `registration.py` the TaskExecutors' registrations and
heartbeats; `routing.py` what each micro-batch's records mean; `spark_jobs.py` the Spark jobs
and the fencing of their leases; `releases.py` the deletion of a released job's result
topics; `reports.py` what the driver writes itself.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from py4j.protocol import Py4JError
from pyspark.sql import SparkSession

from jobledger.schemas import topic_name
from jobledger.schemas.topics import TopicRole

from ..client_properties import java_properties
from ..kafka import TYPE_HEADER
from ..signing import Keyring
from . import checkpoint, task
from .instances import TaskExecutorInstances
from .kafka_source import FORMAT, register
from .metrics import RunnerMetrics
from .registration import Registration
from .releases import ResultReleases
from .reports import DriverReports, first_line
from .routing import BATCH_STARTERS, BatchRouter
from .session import spark_session
from .spark_jobs import SparkJobs
from .trust import SIGNED_COLUMNS, ServicesDecisions

log = logging.getLogger("jobledger.runner")

LEASE_JOURNAL = "jobledger-leased-ids.json"
"""The task producers' ids leased now (`ProducerLeases`), in the checkpoint directory."""

QUERY_FAILURE_LOGGER = "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution"
"""Where Spark logs a failed query's error, with its Java stack trace and any Python traceback
inside it; the runner says why its query ended in one line of its own instead."""

STOP_WARNINGS = ("org.apache.spark.scheduler.DAGScheduler", "org.apache.hadoop.util.Shell")
"""What warns as the query stops, each time and expectedly: that no job of its group was left
to cancel (every stop of an idle runner), and, with a Java stack trace, that a checkpoint
write's file command was interrupted (a stop during a micro-batch's commit). Raised to ERROR
only once the runner stops."""


class RunnerStopped(Exception):
    """The runner could not go on: its query did not start, its checkpoint no longer fits
    the log and it was told not to start afresh, or another process took its TaskExecutors.
    The message is one line saying why."""


@dataclass(frozen=True)
class RunnerConfig:
    bootstrap: str
    prefix: str
    checkpoint: Path
    runner_id: str = "runner"
    task_executors: int = 1
    slots: int | None = None
    """Slots per TaskExecutor; default: Spark's default parallelism (its cores)."""
    allowed_modules: frozenset[str] = frozenset()
    data_roots: tuple[Path, ...] = ()
    """The only directories `text_file` sources and `file` sinks may use (`--data-root`),
    resolved here, at startup; none: jobs read and write no files."""
    master: str | None = "local[*]"
    """None under spark-submit, whose --master then applies."""
    heartbeat_interval_s: float = 10.0
    """Flink's `heartbeat.interval`: well inside the services' `heartbeat.timeout` (50 s)."""
    trigger_interval: str = "20 milliseconds"
    """How often an idle query looks for new records (a busy one starts its next micro-batch
    as soon as the last ends): a deployment waits half of it on average. Each look asks the
    broker for the topic's offsets, which costs little next to a micro-batch; at 100 ms the
    wait would be half of Spark's whole produce-to-foreachBatch floor.

    Spark 4.1's Real-Time Mode (`trigger(realTime=...)`), which keeps long-running tasks
    reading instead of planning a batch per trigger, cannot run this query: it takes only
    sources that implement `SupportsRealTimeMode` (Spark's JVM Kafka connector; no Python data
    source) and only allow-listed sinks (Kafka, a foreach writer, console, memory), not
    `foreachBatch`, through which the driver hands deployments to Spark jobs it can cancel."""
    checkpoint_mismatch: checkpoint.OnMismatch = "restart"
    """What to do with a checkpoint that does not fit the log (`checkpoint.py`)."""
    client_properties: tuple[tuple[str, str], ...] = ()
    """The operator's Kafka client properties (`-F`/`-X`: SASL, TLS...), for the executors'
    clients and the Kafka source; the driver's own clients have them from the process
    (`kafka.use_client_properties`, which the command line calls with the same)."""
    signing_key: bytes | None = None
    """The runner principal's signing key (PEM) for the executors' records; the driver's own
    sign with the process's key (`signing.use_signing_key`, set from the same file)."""
    keyring: Keyring | None = None
    """The services' keyring (`--keyring`): given it, the runner acts only on decisions a
    `services` key signed (`trust.py`); a secured cluster's runners need it."""

    @property
    def secured(self) -> bool:
        """Whether the cluster is secured: the runner signs its records (the services check
        signatures) or its Kafka clients authenticate (SASL or TLS)."""
        protocol = dict(self.client_properties).get("security.protocol", "plaintext")
        return self.signing_key is not None or protocol.lower() != "plaintext"

    def __post_init__(self) -> None:
        roots = tuple(Path(root).resolve() for root in self.data_roots)
        object.__setattr__(self, "data_roots", roots)


def warn_if_unchecked(config: RunnerConfig) -> None:
    """One warning line where a secured cluster's runner has no keyring: it believes every
    decision it reads, whoever wrote it (`trust.py`), which the operator must hear of."""
    if config.keyring is None and config.secured:
        log.warning("runner %s has no keyring (--keyring) on a secured cluster: it acts on "
                    "every deployment, cancellation, release and registration answer on the "
                    "TaskExecutor topic, whoever wrote it", config.runner_id)  # fmt: skip


class TaskRunner:
    """One runner process: its Spark session, its query over the TaskExecutor topic and the
    parts that act on what the query reads (see the module's docstring). It owns the order
    of their lives: the query starts before the TaskExecutors register (no deployment can
    come before the query reads), a query that ended on its own starts again at the next
    heartbeat, and a stop tells the ResourceManager first, then stops reading, then the
    Spark jobs."""

    def __init__(self, config: RunnerConfig, spark: SparkSession | None = None) -> None:
        self.config = config
        self.spark = spark or _session(config.master)
        self.format = register(self.spark)
        self.transactional_id = f"jobledger-runner-{config.prefix}{config.runner_id}"
        self.metrics = RunnerMetrics()
        """Served by `jobledger runner --metrics-port`."""
        self.failure: str | None = None
        """Why the runner stopped on its own (`RunnerStopped`), if it did."""
        self.stopping = threading.Event()
        self.pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="jobledger-task")
        # the driver's own reports; a restarted runner's producer fences what this left open
        self.reports = DriverReports(
            config.bootstrap, config.prefix, f"{self.transactional_id}-driver"
        )
        settings = task.RunnerSettings(
            config.bootstrap, config.prefix, config.allowed_modules,
            transactional_id=f"{self.transactional_id}-task", data_roots=config.data_roots,
            client_properties=config.client_properties, signing_key=config.signing_key,
        )  # fmt: skip
        self.jobs = SparkJobs(
            self.spark, settings, config.checkpoint / LEASE_JOURNAL, self.reports, self.pool,
            self.stopping, self.metrics,
        )  # fmt: skip
        slots = max(1, config.slots or self.spark.sparkContext.defaultParallelism)
        self.task_executors = TaskExecutorInstances(
            config.runner_id, config.task_executors, slots, task.PRODUCER
        )
        self.registration = Registration(
            self.task_executors, self.reports, self._fail,
            lambda resource_id: self.router.abandon(resource_id), self.stopping,
        )  # fmt: skip
        self.router = BatchRouter(
            self.task_executors, self.registration, self.jobs,
            ResultReleases(config.bootstrap, config.prefix), ServicesDecisions(config.keyring),
            self.reports,
            self.pool, self.metrics,
        )  # fmt: skip
        self.query = None
        self.heartbeats = threading.Thread(target=self._heartbeat, daemon=True)

    def start(self) -> None:
        """Start the query, then (once it has fixed its starting offsets) register the
        TaskExecutors, so no deployment for them can come before the query reads. A checkpoint
        that does not fit the log is dealt with first (`checkpoint.fit`), after the
        transactions a killed predecessor's tasks left open are aborted
        (`ProducerLeases.recover`), so no reader waits for them to time out."""
        warn_if_unchecked(self.config)
        aborted = self.jobs.gate.leases.recover()
        if aborted:
            log.info("aborted what %d task producer(s) of the last run left open", len(aborted))
        self._fit_checkpoint()
        _quiet_query_failures(self.spark)
        self._start_query()
        deadline = time.monotonic() + 120
        while self.query.lastProgress is None:
            if not self.query.isActive:
                raise RunnerStopped(
                    f"the runner's query did not start: {_cause(self.query.exception())}"
                )
            if time.monotonic() > deadline:
                raise RunnerStopped("the runner's query did not start within 120 s")
            time.sleep(0.1)
        self.registration.register()
        self.heartbeats.start()
        log.info("runner %s: %d TaskExecutor(s) x %d slots on %s", self.config.runner_id,
                 len(self.task_executors.resource_ids), self.task_executors.slots,
                 self.spark.sparkContext.master)  # fmt: skip

    def _start_query(self) -> None:
        topic = topic_name(TopicRole.TASK_EXECUTOR, self.config.prefix)
        stream = (
            self.spark.readStream.format(self.format)
            .option("kafka.bootstrap.servers", self.config.bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "latest")
            # the native source reads uncommitted records unless told; the services write
            # transactionally, so both formats read committed records only
            .option("kafka.isolation.level", "read_committed")
            .options(**self._client_options())
        )
        if self.format == FORMAT:
            # a job's own slot records come just before its deployment: a micro-batch started
            # for them (Spark's fixed cost is ~0.2-0.5 s) made the deployment wait for its end
            names = ",".join(kind.type_name() for kind in BATCH_STARTERS)
            stream = stream.option("batchOnHeader", f"{TYPE_HEADER}={names}")
            # a task that opened a consumer to read a batch's few records took most of it
            stream = stream.option("readOnDriver", "true")
        columns = ["value"]
        if self.config.keyring is not None:  # a decision's signature is checked over these too
            stream = stream.option("includeHeaders", "true")
            columns += SIGNED_COLUMNS
        self.query = (
            stream.load().select(*columns).writeStream.foreachBatch(self.router.on_batch)
            .option("checkpointLocation", str(self.config.checkpoint))
            .trigger(processingTime=self.config.trigger_interval)
            .start()
        )  # fmt: skip

    def _client_options(self) -> dict[str, str]:
        """The client properties as the source's `kafka.*` options: librdkafka's names for
        jobledger's own source, Java's for Spark's connector."""
        properties = dict(self.config.client_properties)
        if self.format != FORMAT:
            properties = java_properties(properties)
        return {f"kafka.{key}": value for key, value in properties.items()}

    def _fit_checkpoint(self) -> bool:
        """Check the checkpoint against the log (`checkpoint.fit`): True if it did not fit and
        was moved aside, so the next query starts at the log's end."""
        topic = topic_name(TopicRole.TASK_EXECUTOR, self.config.prefix)
        now = checkpoint.read_log(self.config.bootstrap, topic)
        return (
            checkpoint.fit(self.config.checkpoint, now, self.config.checkpoint_mismatch) is not None
        )

    def _revive_query(self) -> None:
        """A query that ended without `stop()` (a failed micro-batch, a dying stream thread)
        starts again from its checkpoint: the runner must not die with it. Each end is one
        line. A checkpoint the log can no longer serve (records deleted by retention, topics
        created again) is moved aside first, and the query starts at the log's end: what the
        runner skipped there may include deployments to its TaskExecutors, so they start over
        as new instances (`Registration.start_over`), whose predecessors' tasks the JobMasters
        fail and run again, rather than leave them waiting for reports that never come."""
        if self.stopping.is_set() or self.query is None or self.query.isActive:
            return
        error = self.query.exception()
        log.debug("the runner's query ended: %s", error)
        log.error("the runner's query ended (%s); starting it again", _cause(error))
        try:
            afresh = self._fit_checkpoint()
        except checkpoint.CheckpointMismatch as exc:
            self._fail(f"{exc}; --checkpoint-mismatch restart moves it aside and starts afresh")
            return
        self._start_query()
        if afresh:
            self.registration.start_over(self.task_executors.resource_ids)

    def _fail(self, reason: str) -> None:
        """Stop on our own, from any thread (`stop` joins the query's): `await_termination`
        then raises `RunnerStopped` with `reason`."""
        self.failure = reason
        log.error("%s", reason)
        threading.Thread(target=self.stop, name="jobledger-runner-stop").start()

    def stop(self) -> None:
        """Tell the ResourceManager the TaskExecutors are gone (`_shut_down`), stop reading,
        cancel the Spark jobs still running (attempts the JobMasters asked to cancel are
        reported CANCELED, the others FAILED: the TaskExecutor shut down under them) and wait
        for them to end: nothing this runner started outlives it, and no job waits for it."""
        first = not self.stopping.is_set()
        self.stopping.set()
        if first:
            self._shut_down()
        try:
            self._stop_spark_work()
        except Py4JError as exc:  # its JVM is gone (killed): nothing runs there any more
            log.warning("Spark's JVM is gone (%s); nothing left to stop there", first_line(exc))
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.jobs.gate.close()
        self.reports.close()

    def _stop_spark_work(self) -> None:
        if self.query is not None:
            # stopping interrupts the micro-batch in flight, and py4j logs the interrupted
            # collect as an error with a long Java trace: expected here, so not shown; and
            # Spark warns twice that the query's job group had no job left to cancel
            logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)
            for logger in STOP_WARNINGS:
                _quiet(self.spark, logger)
            self.query.stop()
        self.jobs.cancel_all()

    def _shut_down(self) -> None:
        """Once the heartbeats stopped (a beat after it would only be refused), the
        TaskExecutors' last word (`Registration.shut_down`), if they ever registered."""
        if self.heartbeats.is_alive() and self.heartbeats is not threading.current_thread():
            self.heartbeats.join()
        if self.heartbeats.ident:  # started: the TaskExecutors registered
            self.registration.shut_down()

    def await_termination(self) -> None:
        """Until `stop()`; the query may be restarted meanwhile. Raises `RunnerStopped` if the
        runner stopped on its own (`_fail`)."""
        self.stopping.wait()
        if self.failure is not None:
            raise RunnerStopped(self.failure)

    def _heartbeat(self) -> None:
        """Every `heartbeat_interval_s` until the stop: the query revived if it ended on its
        own, and the TaskExecutors' heartbeats sent."""
        while not self.stopping.wait(self.config.heartbeat_interval_s):
            try:
                self._revive_query()
            except Exception as exc:  # tried again at the next heartbeat
                log.error("could not start the runner's query again (%s)", first_line(exc))
            self.registration.send_heartbeats()


def _cause(error: BaseException | None) -> str:
    """One line of why a query ended: the first line of Spark's message (the rest describes
    the query and names its run, so no two ends would read alike), a Python traceback in it
    replaced by its last line, the exception raised."""
    if error is None:
        return "stopped without an error"
    first, _, rest = str(error).partition("\n")
    head, traceback, _ = first.partition("Traceback (most recent call last):")
    if not traceback:
        return first.strip()
    raised = [line.strip() for line in rest.split("\n=== Streaming Query ===")[0].splitlines()
              if line.strip() and not line.strip().startswith("SQLSTATE")]  # fmt: skip
    return f"{head.strip()} {raised[-1] if raised else ''}".strip()


def _quiet_query_failures(spark: SparkSession) -> None:
    """`QUERY_FAILURE_LOGGER` off in the driver's log4j2."""
    _quiet(spark, QUERY_FAILURE_LOGGER, "OFF")


def _quiet(spark: SparkSession, logger: str, level: str = "ERROR") -> None:
    """The driver's log4j2 `logger` at `level` from now on."""
    jvm = spark.sparkContext._jvm
    log4j = jvm.org.apache.logging.log4j
    log4j.core.config.Configurator.setLevel(logger, getattr(log4j.Level, level))


def _session(master: str | None) -> SparkSession:
    """A session of our own, or under spark-submit (no master) the one spark-submit
    configured: its --master and --packages apply, nothing is overridden."""
    if master:
        return spark_session(master, "jobledger-runner")
    return SparkSession.builder.appName("jobledger-runner").getOrCreate()
