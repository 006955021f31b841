"""Routing the TaskExecutor topic's records, micro-batch by micro-batch: the ResourceManager's
answers go to the registration, a deployment waits for its TaskExecutor's acceptance
(`TaskSubmissionAccepted`, later on the same partition) so nothing the TaskExecutor refused
ever runs, the accepted ones of each job go to Spark as one job, cancellations reach an
attempt wherever it is (waiting, queued in this batch, or in a Spark job) and a job's release
deletes its result topics; where the runner has a keyring, each only if the services signed
it (`trust.py`). Apart
from the Spark jobs because it runs on the query's thread and must return quickly: the query
reads nothing while a micro-batch is routed."""

from __future__ import annotations

from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

from pyspark.sql import DataFrame

from jobledger.schemas import DecodeError, EventSerde
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
from jobledger.schemas.types import ExecutionState

from .instances import TaskExecutorInstances
from .metrics import RunnerMetrics
from .registration import Registration
from .releases import ResultReleases
from .reports import DriverReports, now_ms
from .spark_jobs import Group, Received, SparkJobs
from .trust import ServicesDecisions

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


class BatchRouter:
    """What each micro-batch's records mean for this runner's TaskExecutors."""

    def __init__(
        self,
        task_executors: TaskExecutorInstances,
        registration: Registration,
        jobs: SparkJobs,
        releases: ResultReleases,
        decisions: ServicesDecisions,
        reports: DriverReports,
        pool: ThreadPoolExecutor,
        metrics: RunnerMetrics,
    ) -> None:
        self.task_executors = task_executors
        self.registration = registration
        self.jobs = jobs
        self.releases = releases
        self.decisions = decisions
        self.reports = reports
        self.pool = pool
        self.metrics = metrics
        self.serde = EventSerde()
        self.seen = RecentIds(SEEN_WINDOW)
        """The attempts whose deployment was read (`SEEN_WINDOW`)."""
        self.awaiting_acceptance: OrderedDict[str, Received] = OrderedDict()
        self.cancelled_before_acceptance: set[str] = set()

    def on_batch(self, batch: DataFrame, batch_id: int) -> None:
        """The query's `foreachBatch`: the batch's records in order, then each job's accepted
        deployments handed to Spark as one job."""
        accepted: dict[str, list[Received]] = {}
        started = now_ms()
        rows = batch.collect()
        read = now_ms()
        for row in rows:
            try:
                event = self.serde.decode(row.value, "")
            except DecodeError:
                continue  # the services dead-letter what they cannot read
            if getattr(event, "resource_id", None) not in self.task_executors.resource_ids:
                continue
            if not self.decisions.believes(event, row):
                continue
            if isinstance(event, TaskManagerRegistrationAccepted):
                self.registration.on_registration_accepted(event)
            elif isinstance(event, TaskManagerConnectionClosed):
                self.registration.on_connection_closed(event)
            elif not self.task_executors.is_live(event.resource_id):
                continue  # deployed to an earlier instance, which the JobMasters fail
            elif isinstance(event, TaskDeploymentRequested):
                if self.seen.add(event.execution_attempt_id):
                    self._await_acceptance(Received(event, bytes(row.value)))
            elif isinstance(event, TaskSubmissionAccepted):
                self._accept(event, accepted)
            elif isinstance(event, TaskCancellationRequested):
                self.cancel_attempt(event.job_id, event.execution_attempt_id, accepted)
            elif isinstance(event, ResultPartitionsReleased):
                self.pool.submit(self.releases.release, event.job_id)
        for job_id, received in accepted.items():
            if received:  # not all cancelled while queued
                self.jobs.submit(
                    Group(f"{job_id}/{batch_id}", received, set(), batch_id, started, read)
                )
        self.metrics.micro_batch_seconds.observe((now_ms() - started) / 1000)

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
            self.reports.report(received.deployment, ExecutionState.CANCELED)
            return
        accepted.setdefault(received.deployment.job_id, []).append(received)

    def cancel_attempt(self, job_id: str, attempt: str, pending: dict[str, list[Received]]) -> None:
        """Not started yet (awaiting its acceptance, or accepted in this batch): never starts,
        and is reported CANCELED here. Started: its Spark job's (`SparkJobs.cancel`)."""
        if attempt in self.awaiting_acceptance:
            self.cancelled_before_acceptance.add(attempt)
            return
        queued = pending.get(job_id, [])
        for received in queued:
            if received.deployment.execution_attempt_id == attempt:
                queued.remove(received)
                self.reports.report(received.deployment, ExecutionState.CANCELED)
                return
        self.jobs.cancel(attempt)

    def abandon(self, resource_id: str) -> None:
        """Cancel every attempt this runner holds for `resource_id`: waiting for its
        acceptance, or started."""
        for attempt, (d, _) in list(self.awaiting_acceptance.items()):
            if d.resource_id == resource_id:
                del self.awaiting_acceptance[attempt]
                self.cancelled_before_acceptance.discard(attempt)
        for attempt in self.jobs.attempts_on(resource_id):
            self.jobs.cancel(attempt)
