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
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import NamedTuple

from confluent_kafka import KafkaException
from py4j.protocol import Py4JError
from pyspark.sql import DataFrame, SparkSession

from jobledger.schemas import DecodeError, Event, EventSerde, topic_name
from jobledger.schemas.cluster import (
    TaskManagerConnectionClosed,
    TaskManagerRegistrationAccepted,
)
from jobledger.schemas.tasks import (
    ResultPartitionsReleased,
    TaskCancellationRequested,
    TaskDeploymentRequested,
    TaskSubmissionAccepted,
)
from jobledger.schemas.topics import TopicRole
from jobledger.schemas.types import ExecutionState

from ..client_properties import java_properties
from ..kafka import TYPE_HEADER, append_events
from . import checkpoint, exchange, task
from .instances import TaskExecutorInstances, shutdown_cause
from .kafka_source import FORMAT, register
from .metrics import RunnerMetrics
from .session import spark_session
from .start_gate import StartGate
from .task_producers import ProducerLeases

log = logging.getLogger("jobledger.runner")

BATCH_STARTERS = (
    TaskSubmissionAccepted, TaskCancellationRequested, TaskManagerConnectionClosed,
    ResultPartitionsReleased,
)  # fmt: skip
"""The records of the TaskExecutor topic that start a micro-batch: those the runner acts on at
once (a job's end may be the last record for a long time). A deployment waits for its
acceptance, which follows it in the same partition; the rest (slot requests, offers,
heartbeats, the runner's own reports) are read with the next batch."""

MAX_AWAITING_ACCEPTANCE = 100_000
"""Deployments kept while their TaskExecutor's verdict is pending; a refused one is never
accepted, so the oldest are forgotten past this many."""

SEEN_WINDOW = 100_000
"""Deployments remembered as read, the latest this many: a query started again from its
checkpoint reads its last micro-batch again, deployments and their acceptances, and a
deployment read twice must not run twice. A replay goes back one micro-batch, far fewer."""

LEASE_JOURNAL = "jobledger-leased-ids.json"
"""The task producers' ids leased now (`ProducerLeases`), in the checkpoint directory."""

QUERY_FAILURE_LOGGER = "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution"
"""Where Spark logs a failed query's error, with its Java stack trace and any Python traceback
inside it; the runner says why its query ended in one line of its own instead."""


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

    def __post_init__(self) -> None:
        roots = tuple(Path(root).resolve() for root in self.data_roots)
        object.__setattr__(self, "data_roots", roots)


class Received(NamedTuple):
    """A deployment as read: decoded for the driver's bookkeeping, and its record's bytes,
    which go to the executor as they are and are decoded there, once. Encoding the decoded
    deployment again cost more than decoding it, and shipping it pickled cost more than
    shipping the bytes (a few hundred bytes of Avro against several times that pickled)."""

    deployment: TaskDeploymentRequested
    payload: bytes


class RecentIds:
    """The latest `limit` ids added, the oldest forgotten first, as the services' driver keeps
    its `recent` input ids: a set of every id ever read would grow for the process's life.
    An OrderedDict because dropping the oldest id of a plain dict rescans the deleted slots
    at its front every time."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._ids: OrderedDict[str, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, item: object) -> bool:
        return item in self._ids

    def add(self, item: str) -> bool:
        """Remember `item`; False if it was among the latest already (nothing changes)."""
        if item in self._ids:
            return False
        self._ids[item] = None
        if len(self._ids) > self.limit:
            self._ids.popitem(last=False)
        return True


@dataclass
class Group:
    """The deployments of one job in one micro-batch: one Spark job."""

    name: str
    deployments: list[TaskDeploymentRequested]
    payloads: list[bytes]
    """The deployments' records, as read (`Received`), in the same order."""
    cancelled: set[str] = field(default_factory=set)
    batch_id: int = 0
    batch_started_ms: int = 0
    batch_read_ms: int = 0


@dataclass(frozen=True)
class GroupTiming:
    """Wall-clock milliseconds of one group's way through the runner, which the log cannot
    tell (only the deployments before it and the reports after): `bench/e2e.py` puts them
    beside the records' timestamps to show where a job's time goes."""

    group: str
    job_id: str
    batch_id: int
    """The micro-batch's id, as in the query's progress reports (`durationMs`)."""
    batch_started_ms: int
    """The micro-batch that read the group's acceptances reached `foreachBatch`."""
    batch_read_ms: int
    """...and had its rows in the driver."""
    spark_job_started_ms: int
    spark_job_ended_ms: int


MAX_TIMINGS = 1_000


class TaskRunner:
    def __init__(self, config: RunnerConfig, spark: SparkSession | None = None) -> None:
        self.config = config
        self.spark = spark or _session(config.master)
        self.format = register(self.spark)
        self.serde = EventSerde()
        self.transactional_id = f"jobledger-runner-{config.prefix}{config.runner_id}"
        self.gate = StartGate(
            self.spark.conf.get("spark.driver.host", "127.0.0.1"),
            ProducerLeases(self._fence, config.checkpoint / LEASE_JOURNAL),
        )
        self.settings = task.RunnerSettings(
            config.bootstrap, config.prefix, config.allowed_modules, self.gate.url,
            lease_url=self.gate.lease_url, transactional_id=f"{self.transactional_id}-task",
            data_roots=config.data_roots, client_properties=config.client_properties,
            signing_key=config.signing_key,
        )  # fmt: skip
        slots = max(1, config.slots or self.spark.sparkContext.defaultParallelism)
        self.task_executors = TaskExecutorInstances(
            config.runner_id, config.task_executors, slots, task.PRODUCER
        )
        self.pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="jobledger-task")
        self.lock = threading.Lock()
        # the driver's own reports; a restarted runner's producer fences what this left open
        self.producer = task.task_producer(config.bootstrap, f"{self.transactional_id}-driver")
        self.seen = RecentIds(SEEN_WINDOW)
        """The attempts whose deployment was read (`SEEN_WINDOW`)."""
        self.awaiting_acceptance: OrderedDict[str, Received] = OrderedDict()
        self.cancelled_before_acceptance: set[str] = set()
        self.groups: dict[str, Group] = {}
        self.group_of: dict[str, str] = {}
        self.timings: deque[GroupTiming] = deque(maxlen=MAX_TIMINGS)
        self.metrics = RunnerMetrics()
        """Served by `jobledger runner --metrics-port`."""
        """The last groups' timings, oldest first."""
        self.failure: str | None = None
        """Why the runner stopped on its own (`RunnerStopped`), if it did."""
        self.stopping = threading.Event()
        self.query = None
        self.heartbeats = threading.Thread(target=self._heartbeat, daemon=True)

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Start the query, then (once it has fixed its starting offsets) register the
        TaskExecutors, so no deployment for them can come before the query reads. A checkpoint
        that does not fit the log is dealt with first (`checkpoint.fit`), after the
        transactions a killed predecessor's tasks left open are aborted
        (`ProducerLeases.recover`), so no reader waits for them to time out."""
        aborted = self.gate.leases.recover()
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
        self._register()
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
        stream = stream.load()
        self.query = (
            stream.select("value").writeStream.foreachBatch(self._on_batch)
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
        as new instances (`_start_over`), whose predecessors' tasks the JobMasters fail and
        run again, rather than leave them waiting for reports that never come."""
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
            self._start_over(self.task_executors.resource_ids)

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
            log.warning("Spark's JVM is gone (%s); nothing left to stop there", _first_line(exc))
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.gate.close()
        self.producer.close()

    def _stop_spark_work(self) -> None:
        if self.query is not None:
            # stopping interrupts the micro-batch in flight, and py4j logs the interrupted
            # collect as an error with a long Java trace: expected here, so not shown
            logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)
            self.query.stop()
        with self.lock:
            running = list(self.groups.values())
        for group in running:
            self.spark.sparkContext.cancelJobGroup(group.name)

    def _shut_down(self) -> None:
        """The TaskExecutors' last word, once the heartbeats stopped (a beat after it would
        only be refused): each current instance is gone. Written before the tasks are
        stopped, so their JobMasters fail them over at once; a broker that cannot take it
        leaves the heartbeat timeout to find them gone."""
        if self.heartbeats.is_alive() and self.heartbeats is not threading.current_thread():
            self.heartbeats.join()
        if not self.heartbeats.ident:  # never started: nothing was registered
            return
        try:
            self._emit(self.task_executors.shutdowns(_now_ms()))
        except Exception as exc:
            log.error(
                "could not tell the ResourceManager that the TaskExecutors stop (%s); it "
                "finds them gone after its heartbeat timeout", _first_line(exc),
            )  # fmt: skip

    def await_termination(self) -> None:
        """Until `stop()`; the query may be restarted meanwhile. Raises `RunnerStopped` if the
        runner stopped on its own (`_fail`)."""
        self.stopping.wait()
        if self.failure is not None:
            raise RunnerStopped(self.failure)

    # -- TaskExecutors -------------------------------------------------------------------

    def _register(self, resource_ids: list[str] | None = None) -> None:
        """Register the runner's TaskExecutors (all, or those named) at the ResourceManager,
        each as a new instance holding no slot."""
        self._emit(self.task_executors.register(resource_ids, _now_ms()))

    def _on_registration_accepted(self, event: TaskManagerRegistrationAccepted) -> None:
        refusal = self.task_executors.accepted(event)
        if refusal is not None:
            self._fail(refusal)

    def _on_connection_closed(self, event: TaskManagerConnectionClosed) -> None:
        """The ResourceManager lost this instance (silent past its heartbeat timeout, e.g.
        paused): the JobMasters failed its tasks, so what it still runs is cancelled, and it
        registers again as a new instance, as Flink's TaskExecutor reconnects. Closed because
        another process's instance replaced it: this runner stops (exit code 1), so two
        runners never take one TaskExecutor from each other for ever."""
        refusal = self.task_executors.replaced(event)
        if refusal is not None:
            self._fail(refusal)
            return
        if self.stopping.is_set() or not self.task_executors.closed(event):
            return
        log.warning("the ResourceManager closed %s's connection (%s); cancelling its tasks and "
                    "registering again as a new instance", event.resource_id,
                    event.cause)  # fmt: skip
        self._start_over([event.resource_id])

    def _start_over(self, resource_ids: list[str]) -> None:
        """The TaskExecutors start over as new instances: what their current instances hold
        (their tasks, which the JobMasters fail once the new ones register) is cancelled
        first, then they register again."""
        for rid in resource_ids:
            self._abandon(rid)
        self._register(resource_ids)

    def _abandon(self, resource_id: str) -> None:
        """Cancel every attempt this runner holds for `resource_id`: waiting for its
        acceptance, or started."""
        for attempt, (d, _) in list(self.awaiting_acceptance.items()):
            if d.resource_id == resource_id:
                del self.awaiting_acceptance[attempt]
                self.cancelled_before_acceptance.discard(attempt)
        with self.lock:
            attempts = [
                (d.job_id, d.execution_attempt_id)
                for group in self.groups.values()
                for d in group.deployments
                if d.resource_id == resource_id
            ]
        for job_id, attempt in attempts:
            self._cancel_attempt(job_id, attempt, {})

    def _heartbeat(self) -> None:
        while not self.stopping.wait(self.config.heartbeat_interval_s):
            try:
                self._revive_query()
            except Exception as exc:  # tried again at the next heartbeat
                log.error("could not start the runner's query again (%s)", _first_line(exc))
            try:
                self._emit(self.task_executors.heartbeats(_now_ms()))
            except Exception:  # a broker hiccup: the next heartbeat tries again
                log.exception("heartbeat failed")

    def _emit(self, events: list[Event]) -> None:
        with self.lock:
            append_events(self.producer, self.config.prefix, events, self.serde)

    # -- deployments ---------------------------------------------------------------------

    def _on_batch(self, batch: DataFrame, batch_id: int) -> None:
        """Deployments wait for their TaskExecutor's acceptance (`TaskSubmissionAccepted`,
        later on the same partition), so nothing the TaskExecutor refused ever runs; the
        accepted ones of each job go to Spark as one job."""
        accepted: dict[str, list[Received]] = {}
        started = _now_ms()
        rows = batch.collect()
        read = _now_ms()
        for row in rows:
            try:
                event = self.serde.decode(row.value, "")
            except DecodeError:
                continue  # the services dead-letter what they cannot read
            if getattr(event, "resource_id", None) not in self.task_executors.resource_ids:
                continue
            if isinstance(event, TaskManagerRegistrationAccepted):
                self._on_registration_accepted(event)
            elif isinstance(event, TaskManagerConnectionClosed):
                self._on_connection_closed(event)
            elif not self.task_executors.is_live(event.resource_id):
                continue  # deployed to an earlier instance, which the JobMasters fail
            elif isinstance(event, TaskDeploymentRequested):
                if self.seen.add(event.execution_attempt_id):
                    self._await_acceptance(Received(event, bytes(row.value)))
            elif isinstance(event, TaskSubmissionAccepted):
                self._accept(event, accepted)
            elif isinstance(event, TaskCancellationRequested):
                self._cancel_attempt(event.job_id, event.execution_attempt_id, accepted)
            elif isinstance(event, ResultPartitionsReleased):
                self.pool.submit(self._release_partitions, event.job_id)
        for job_id, received in accepted.items():
            deployments = [d for d, _ in received]
            payloads = [payload for _, payload in received]
            group = Group(
                f"{job_id}/{batch_id}", deployments, payloads, set(), batch_id, started, read
            )
            with self.lock:
                self.groups[group.name] = group
                for d in deployments:
                    self.group_of[d.execution_attempt_id] = group.name
            self.pool.submit(self._run_group, group)
        self.metrics.micro_batch_seconds.observe((_now_ms() - started) / 1000)

    def _await_acceptance(self, received: Received) -> None:
        self.awaiting_acceptance[received.deployment.execution_attempt_id] = received
        while len(self.awaiting_acceptance) > MAX_AWAITING_ACCEPTANCE:  # refused long ago
            attempt, _ = self.awaiting_acceptance.popitem(last=False)
            self.cancelled_before_acceptance.discard(attempt)

    def _accept(self, event: TaskSubmissionAccepted, accepted: dict[str, list[Received]]) -> None:
        received = self.awaiting_acceptance.pop(event.execution_attempt_id, None)
        if received is None:
            return  # not deployed to this runner since it started, or accepted twice
        if event.execution_attempt_id in self.cancelled_before_acceptance:
            self.cancelled_before_acceptance.discard(event.execution_attempt_id)
            self._report(received.deployment, ExecutionState.CANCELED)
            return
        accepted.setdefault(received.deployment.job_id, []).append(received)

    def _cancel_attempt(
        self, job_id: str, attempt: str, pending: dict[str, list[Received]]
    ) -> None:
        """Not started yet: never starts, and is reported CANCELED here. Started: its Spark
        job is cancelled once every task of that job is to be cancelled (cancelling is per
        Spark job)."""
        if attempt in self.awaiting_acceptance:
            self.cancelled_before_acceptance.add(attempt)
            return
        queued = pending.get(job_id, [])
        for received in queued:
            if received.deployment.execution_attempt_id == attempt:
                queued.remove(received)
                self._report(received.deployment, ExecutionState.CANCELED)
                return
        with self.lock:
            group = self.groups.get(self.group_of.get(attempt, ""))
            if group is None:
                return
            group.cancelled.add(attempt)
            everything = len(group.cancelled) == len(group.deployments)
            deployment = next(d for d in group.deployments if d.execution_attempt_id == attempt)
        if self.gate.cancel_unstarted(attempt):
            self._report(deployment, ExecutionState.CANCELED)
        if everything:
            self.spark.sparkContext.cancelJobGroup(group.name)

    def _release_partitions(self, job_id: str) -> None:
        """The job ended for good: its result topics go. Each TaskExecutor a producer ran on
        is told; the first to act deletes them, the others find them gone."""
        try:
            deleted = exchange.delete_result_topics(
                self.config.bootstrap, self.config.prefix, job_id
            )
        except Exception as exc:
            log.warning("could not delete job %s's result topics (%s)", job_id, _first_line(exc))
            return
        if deleted:
            log.info("job %s ended: deleted its %d result topic(s)", job_id, len(deleted))

    def _run_group(self, group: Group) -> None:
        sc = self.spark.sparkContext
        sc.setJobGroup(group.name, f"{len(group.deployments)} task(s)", interruptOnCancel=True)
        # At most one Spark task per core: the cores, not the slots, bound how many run at
        # once, and a second wave of Spark tasks would pay a Spark task's cost again (a
        # Spark task costs more than a no-op deployment). Deployments keep their order
        # across the slices.
        slices = min(len(group.payloads), sc.defaultParallelism)
        settings = replace(self.settings, spark_job=group.name)
        self.gate.leases.begin(group.name)
        spark_job_started = _now_ms()
        try:
            sc.parallelize(group.payloads, slices).mapPartitions(
                partial(task.run_tasks, settings)
            ).collect()
        except Exception as exc:
            # A killed or failed Spark task may have left its transaction open, which would
            # hold back every read_committed reader of the partitions it wrote to.
            self.gate.leases.end(group.name, fence=True)
            never_started = self.gate.cancelled_before_start(
                d.execution_attempt_id for d in group.deployments
            )
            for d in group.deployments:
                if d.execution_attempt_id in never_started:
                    continue  # reported CANCELED when it was cancelled
                if d.execution_attempt_id in group.cancelled:
                    self._report(d, ExecutionState.CANCELED)
                elif self.stopping.is_set():
                    self._report(d, ExecutionState.FAILED, shutdown_cause(d.resource_id))
                else:
                    self._report(d, ExecutionState.FAILED, _first_line(exc))
        finally:
            self.gate.leases.end(group.name, fence=False)
            ended = _now_ms()
            self.timings.append(GroupTiming(
                group.name, group.deployments[0].job_id, group.batch_id, group.batch_started_ms,
                group.batch_read_ms, spark_job_started, ended,
            ))  # fmt: skip
            self.metrics.spark_job_seconds.observe((ended - spark_job_started) / 1000)
            self.gate.forget(d.execution_attempt_id for d in group.deployments)
            with self.lock:
                self.groups.pop(group.name, None)
                for d in group.deployments:
                    self.group_of.pop(d.execution_attempt_id, None)

    def _fence(self, transactional_id: str) -> None:
        """Abort whatever a Spark task left open under `transactional_id`, by starting a
        producer under it (`task_producers.ProducerLeases`)."""
        try:
            task.task_producer(self.config.bootstrap, transactional_id).close()
        except KafkaException:
            log.exception("could not fence %s", transactional_id)

    def _report(
        self, d: TaskDeploymentRequested, state: ExecutionState, error: str | None = None
    ) -> None:
        try:
            self._emit([task.state_event(d, state, error), task.final_state_event(d, state)])
        except Exception:
            log.exception("could not report %s of %s", state.value, d.execution_attempt_id)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:2000]


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
    jvm = spark.sparkContext._jvm
    level = jvm.org.apache.logging.log4j.Level.OFF
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(QUERY_FAILURE_LOGGER, level)


def _session(master: str | None) -> SparkSession:
    """A session of our own, or under spark-submit (no master) the one spark-submit
    configured: its --master and --packages apply, nothing is overridden."""
    if master:
        return spark_session(master, "jobledger-runner")
    return SparkSession.builder.appName("jobledger-runner").getOrCreate()
