"""The runner's Spark jobs: each job's accepted deployments of one micro-batch run as one Spark
job (one Spark task per slice of deployments, `task.py`) on a thread pool, so the query keeps
reading while they run and a cancellation can reach them. Apart from the routing because a
Spark job outlives the micro-batch that started it and is fenced when it ends badly: the ids
its tasks' transactional producers use are leased (`task_producers.ProducerLeases`) and a
killed or failed Spark job's leases are fenced, so no transaction it left open holds back the
read_committed readers of what it wrote."""

from __future__ import annotations

import logging
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import NamedTuple

from confluent_kafka import KafkaException
from pyspark.sql import SparkSession

from jobledger.schemas.tasks import TaskDeploymentRequested
from jobledger.schemas.types import ExecutionState

from . import task
from .instances import shutdown_cause
from .metrics import RunnerMetrics
from .reports import DriverReports, first_line, now_ms
from .start_gate import StartGate
from .task_producers import ProducerLeases

log = logging.getLogger("jobledger.runner")

MAX_TIMINGS = 1_000


class Received(NamedTuple):
    """A deployment as read: decoded for the driver's bookkeeping, and its record's bytes,
    which go to the executor as they are and are decoded there, once. Encoding the decoded
    deployment again cost more than decoding it, and shipping it pickled cost more than
    shipping the bytes (a few hundred bytes of Avro against several times that pickled)."""

    deployment: TaskDeploymentRequested
    payload: bytes


@dataclass
class Group:
    """The deployments of one job in one micro-batch: one Spark job."""

    name: str
    tasks: list[Received]
    cancelled: set[str] = field(default_factory=set)
    batch_id: int = 0
    batch_started_ms: int = 0
    batch_read_ms: int = 0

    @property
    def deployments(self) -> list[TaskDeploymentRequested]:
        return [received.deployment for received in self.tasks]


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


class SparkJobs:
    """The Spark jobs running now, by group and by attempt, and the start gate their tasks
    ask before each attempt starts (`start_gate.py`)."""

    def __init__(
        self,
        spark: SparkSession,
        settings: task.RunnerSettings,
        lease_journal: Path,
        reports: DriverReports,
        pool: ThreadPoolExecutor,
        stopping: threading.Event,
        metrics: RunnerMetrics,
    ) -> None:
        self.spark = spark
        self.reports = reports
        self.pool = pool
        self.stopping = stopping
        self.metrics = metrics
        self.gate = StartGate(
            spark.conf.get("spark.driver.host", "127.0.0.1"),
            ProducerLeases(self.fence, lease_journal),
        )
        self.settings = replace(settings, gate_url=self.gate.url, lease_url=self.gate.lease_url)
        self.lock = threading.Lock()
        self.groups: dict[str, Group] = {}
        self.group_of: dict[str, str] = {}
        self.timings: deque[GroupTiming] = deque(maxlen=MAX_TIMINGS)
        """The last groups' timings, oldest first."""

    def submit(self, group: Group) -> None:
        with self.lock:
            self.groups[group.name] = group
            for d in group.deployments:
                self.group_of[d.execution_attempt_id] = group.name
        self.pool.submit(self.run, group)

    def cancel(self, attempt: str) -> None:
        """A started attempt: reported CANCELED if its task has not started yet; its Spark job
        is cancelled once every task of that job is to be cancelled (cancelling is per Spark
        job). An attempt in no Spark job of this runner is left alone."""
        with self.lock:
            group = self.groups.get(self.group_of.get(attempt, ""))
            if group is None:
                return
            group.cancelled.add(attempt)
            everything = len(group.cancelled) == len(group.tasks)
            deployment = next(d for d in group.deployments if d.execution_attempt_id == attempt)
        if self.gate.cancel_unstarted(attempt):
            self.reports.report(deployment, ExecutionState.CANCELED)
        if everything:
            self.spark.sparkContext.cancelJobGroup(group.name)

    def attempts_on(self, resource_id: str) -> list[str]:
        """The attempts this runner's Spark jobs hold for `resource_id`."""
        with self.lock:
            return [
                d.execution_attempt_id
                for group in self.groups.values()
                for d in group.deployments
                if d.resource_id == resource_id
            ]

    def cancel_all(self) -> None:
        with self.lock:
            running = list(self.groups.values())
        for group in running:
            self.spark.sparkContext.cancelJobGroup(group.name)

    def run(self, group: Group) -> None:
        sc = self.spark.sparkContext
        sc.setJobGroup(group.name, f"{len(group.tasks)} task(s)", interruptOnCancel=True)
        # At most one Spark task per core: the cores, not the slots, bound how many run at
        # once, and a second wave of Spark tasks would pay a Spark task's cost again (a
        # Spark task costs more than a no-op deployment). Deployments keep their order
        # across the slices.
        slices = min(len(group.tasks), sc.defaultParallelism)
        settings = replace(self.settings, spark_job=group.name)
        payloads = [received.payload for received in group.tasks]
        self.gate.leases.begin(group.name)
        spark_job_started = now_ms()
        try:
            sc.parallelize(payloads, slices).mapPartitions(
                partial(task.run_tasks, settings)
            ).collect()
        except Exception as exc:
            # A killed or failed Spark task may have left its transaction open, which would
            # hold back every read_committed reader of the partitions it wrote to.
            self.gate.leases.end(group.name, fence=True)
            self._report_ended(group, exc)
        finally:
            self.gate.leases.end(group.name, fence=False)
            self._forget(group, spark_job_started)

    def _report_ended(self, group: Group, exc: Exception) -> None:
        """A Spark job that raised: its attempts the JobMasters asked to cancel are CANCELED,
        those the runner's stop cut short FAILED as their TaskExecutor shut down, the others
        FAILED with the error; an attempt cancelled before its task started was reported
        then."""
        never_started = self.gate.cancelled_before_start(
            d.execution_attempt_id for d in group.deployments
        )
        for d in group.deployments:
            if d.execution_attempt_id in never_started:
                continue
            if d.execution_attempt_id in group.cancelled:
                self.reports.report(d, ExecutionState.CANCELED)
            elif self.stopping.is_set():
                self.reports.report(d, ExecutionState.FAILED, shutdown_cause(d.resource_id))
            else:
                self.reports.report(d, ExecutionState.FAILED, first_line(exc))

    def _forget(self, group: Group, spark_job_started: int) -> None:
        ended = now_ms()
        self.timings.append(GroupTiming(
            group.name, group.tasks[0].deployment.job_id, group.batch_id,
            group.batch_started_ms, group.batch_read_ms, spark_job_started, ended,
        ))  # fmt: skip
        self.metrics.spark_job_seconds.observe((ended - spark_job_started) / 1000)
        self.gate.forget(d.execution_attempt_id for d in group.deployments)
        with self.lock:
            self.groups.pop(group.name, None)
            for d in group.deployments:
                self.group_of.pop(d.execution_attempt_id, None)

    def fence(self, transactional_id: str) -> None:
        """Abort whatever a Spark task left open under `transactional_id`, by starting a
        producer under it (`task_producers.ProducerLeases`)."""
        try:
            task.task_producer(self.settings.bootstrap, transactional_id).close()
        except KafkaException:
            log.exception("could not fence %s", transactional_id)
