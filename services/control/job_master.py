"""JobMaster: one job's leader. It keeps leadership and fencing (the JobMasterId), the job's
submission and its queryable-state routing, and hands the rest to the two components it
holds, as Flink's JobMaster does: the SlotPool (slots) and the Scheduler (ExecutionGraph,
status, scheduling, failover, restarts, rescale). Seed 001.

Invariants:
- inputs carrying a JobMasterId other than the leader's are refused (fencing);
- a job is submitted once; a new leader starts it over from a fresh ExecutionGraph, the
  same leader again changes nothing (JM-9);
- the pool's slot requests are the scheduler's, answered through the pool's listener.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from jobledger.schemas import Event
from jobledger.schemas.cluster import (
    JobManagerDisconnected,
    JobMasterRegistrationRequested,
    ResourceManagerConnected,
    ResourceManagerDisconnected,
    TaskManagerDisconnected,
)
from jobledger.schemas.jobs import (
    GlobalAggregateUpdated,
    GlobalAggregateUpdateRequested,
    JobCancellationRequested,
    JobMasterLeadershipGranted,
    JobMasterLeadershipRevoked,
    JobMasterStopped,
    JobSubmitted,
    RescaleRequested,
)
from jobledger.schemas.kvstate import (
    KvStateRegistered,
    KvStateRegistrationRejected,
    KvStateUnregistered,
)
from jobledger.schemas.slots import (
    AllocationFailed,
    AvailableSlotAllocationRequested,
    BatchSlotRequestTimeoutCheckDisabled,
    NewAllocatedSlotRequested,
    SlotOffered,
    SlotRequestRefused,
    SlotRequestReleased,
)
from jobledger.schemas.tasks import TaskExecutionStateChanged, TaskSubmissionRejected
from jobledger.schemas.timers import TimerFired
from jobledger.schemas.types import JobStatus, OwnerKind, RestartStrategy

from .decisions import Decisions
from .execution_graph import ExecutionGraph, InvalidJobGraph, JobLimits
from .failover_strategy import FailoverStrategyName
from .key_groups import KeyGroupRange
from .kv_state_location_registry import KvStateLocationRegistry, KvStateRegistration
from .queries import ArchivedExecutionGraph, JobMasterInfo, PendingRestartInfo, query
from .reducer import Reducer, handles
from .scheduler import (
    DEFAULT_DEPLOYMENT_TIMEOUT_MS,
    DEFAULT_MAX_PENDING_DEPLOYMENTS,
    NO_RESTART,
    Scheduler,
)
from .slot_pool import SlotPool, SlotPoolConfig
from .tenants import principal_refusal

PRODUCER = "jobmaster"

FORMER_LEADERS_LIMIT = 64
"""How many of a job's earlier JobMasterIds its JobMaster remembers, so a grant of one re-sent
is refused: each leadership after the submission's is an admin's grant, so a job reaches
this only by an operator's hand, and the oldest is forgotten first."""

AGGREGATE_FUNCTIONS = frozenset({"sum"})
"""The aggregate functions a global aggregate may name (Flink's are user code)."""


@dataclass(frozen=True)
class JobMasterConfig:
    """The cluster's configuration of every JobMaster: `slot.request.timeout`,
    `jobmanager.execution.failover-strategy` (region, Flink's default, or full), the cluster
    default `restart-strategy` a job that configures none runs under (RS-10) and
    `task.deployment.timeout`."""

    slot_request_timeout_ms: int = 300_000
    pool: SlotPoolConfig = field(default_factory=SlotPoolConfig)
    failover_strategy: str = FailoverStrategyName.REGION.value
    """A plain string (kept in snapshots as such), checked here: 'full' or 'region'."""
    restart_strategy: RestartStrategy = NO_RESTART
    deployment_timeout_ms: int = DEFAULT_DEPLOYMENT_TIMEOUT_MS
    """How long a deployed attempt may take to report INITIALIZING before it fails (Flink's
    `submitTask` RPC timeout plays this part)."""
    max_pending_deployments: int = DEFAULT_MAX_PENDING_DEPLOYMENTS
    """Deployments a job has unreported at once (`Scheduler.max_pending_deployments`)."""
    limits: JobLimits = field(default_factory=JobLimits)
    """What one JobGraph may cost (`jobledger.job.max-subtasks`, `...max-deployment-bytes`):
    a JobSubmitted beyond them is refused with the reason, before anything is derived."""

    def __post_init__(self) -> None:
        checked = FailoverStrategyName.from_option(self.failover_strategy).value
        object.__setattr__(self, "failover_strategy", checked)


@dataclass
class JobMaster(Reducer):
    job_id: str
    config: JobMasterConfig = field(default_factory=JobMasterConfig)
    scheduler: Scheduler = field(init=False)
    job_master_id: str | None = None
    former_leaders: list[str] = field(default_factory=list)
    """The JobMasterIds that led this job before, oldest first (FORMER_LEADERS_LIMIT): a
    leadership is never granted twice, so a grant of one of these is an old record re-sent."""
    global_aggregates: dict[str, int] = field(default_factory=dict)
    """The job's global aggregates by name (JM-10)."""

    producer: ClassVar[str] = PRODUCER

    def __post_init__(self) -> None:
        pool = SlotPool(self.job_id, self.config.pool)
        self.scheduler = Scheduler(
            self.job_id, pool, self.config.slot_request_timeout_ms,
            self.config.failover_strategy, self.config.restart_strategy,
            deployment_timeout_ms=self.config.deployment_timeout_ms,
            max_pending_deployments=self.config.max_pending_deployments, limits=self.config.limits,
        )  # fmt: skip

    @property
    @query
    def pool(self) -> SlotPool:
        return self.scheduler.pool

    # -- queries -------------------------------------------------------------------------

    @property
    @query
    def job(self) -> JobSubmitted | None:
        return self.scheduler.job

    @property
    @query
    def status(self) -> JobStatus:
        return self.scheduler.status

    @property
    def graph(self) -> ExecutionGraph | None:
        """The live graph, for the control plane only: read models ask `archived_graph()`."""
        return self.scheduler.graph

    @query
    def archived_graph(self) -> ArchivedExecutionGraph | None:
        """The job's ExecutionGraph frozen as it is now; None before one is built."""
        return self.graph.archive() if self.graph else None

    @property
    @query
    def registry(self) -> KvStateLocationRegistry | None:
        return self.scheduler.registry

    @property
    @query
    def failure_cause(self) -> str | None:
        return self.scheduler.failure_cause

    @property
    @query
    def restarts(self) -> int:
        return self.scheduler.restarts

    @property
    @query
    def full_restarts(self) -> int:
        return self.scheduler.full_restarts

    @query
    def status_since(self, status: JobStatus) -> int | None:
        """Event time the job last entered `status`; None if it never did."""
        return self.scheduler.status_timestamps.get(status.value)

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "status": self.status.value,
            "job_master_id": self.job_master_id,
            "failure_cause": self.failure_cause,
            "restart_at": self.scheduler.restart_at,
            "restarts": self.restarts,
            "global_aggregates": dict(self.global_aggregates),
            "execution_graph": self.graph.to_dict() if self.graph else None,
            "kv_state_locations": self.registry.to_dict() if self.registry else {},
            "slot_pool": self.pool.to_dict(),
        }

    def kv_state_location(self, registration_name: str, key: object) -> KvStateRegistration | None:
        """Queryable state: which KvState instance (id, server) answers for `key`."""
        return self.registry.lookup(registration_name, key) if self.registry else None

    def next_timer(self) -> int | None:
        """The earliest event time at which a TimerFired changes anything (None: never): the
        pool's, or the scheduler's (a deployment's deadline, a restart)."""
        times = (self.pool.next_timer(), self.scheduler.next_timer())
        return min((t for t in times if t is not None), default=None)

    def _reject(self, out: Decisions, reason: str) -> None:
        out.reject(OwnerKind.JOB, self.job_id, reason)

    def _stale(self, job_master_id: str | None, out: Decisions) -> bool:
        """Fencing: an input addressed to another JobMasterId is refused."""
        if job_master_id is None or job_master_id == self.job_master_id:
            return False
        self._reject(out, f"JobMasterId {job_master_id} is not the leader's")
        return True

    # -- submission and leadership -------------------------------------------------------

    @handles(JobSubmitted)
    def on_submitted(self, event: JobSubmitted, out: Decisions) -> None:
        if self.job is not None:
            self._reject(out, f"job {self.job_id} was already submitted")
            return
        refusal = principal_refusal(event.principal)
        if refusal is not None:
            self._reject(out, f"invalid JobSubmitted: {refusal}")
            return
        self.pool.principal = event.principal
        try:
            self.scheduler.create_execution_graph(event, out)
        except InvalidJobGraph as exc:
            self._reject(out, f"invalid JobGraph: {exc}")
            return
        if self.job_master_id is not None:
            self.scheduler.start_scheduling(self.job_master_id, out)

    @handles(JobMasterLeadershipGranted)
    def on_leadership_granted(self, event: JobMasterLeadershipGranted, out: Decisions) -> None:
        """JM-9: the same id again is a no-op; a new id suspends the old execution and starts
        again from a fresh ExecutionGraph; an id that led the job before is an old grant
        re-sent, refused (Flink's fencing tokens are never reused either)."""
        if event.job_master_id == self.job_master_id:
            return
        if event.job_master_id in self.former_leaders:
            self._reject(
                out,
                f"JobMasterId {event.job_master_id} led job {self.job_id} before: a leadership "
                "is never granted twice (an old grant, re-sent)",
            )
            return
        if self.job_master_id is not None:
            self.scheduler.suspend(f"leadership passed to {event.job_master_id}", out)
            self._retire_leader()
        self.job_master_id = event.job_master_id
        self.pool.start(event.job_master_id, out)
        if self.job is not None:
            self.scheduler.start_scheduling(event.job_master_id, out)

    @handles(JobMasterLeadershipRevoked)
    def on_leadership_revoked(self, event: JobMasterLeadershipRevoked, out: Decisions) -> None:
        """The pool fences the revocation against its own leader too (none once it closed)."""
        if event.job_master_id != self.job_master_id:
            self._reject(out, f"JobMasterId {event.job_master_id} is not the leader's")
            return
        self.scheduler.suspend("leadership revoked", out)
        self.pool.handle(event, out)
        self._retire_leader()
        self.job_master_id = None

    def _retire_leader(self) -> None:
        """The leader's JobMasterId joins the former ones (the oldest beyond the limit goes)."""
        if self.job_master_id is not None:
            self.former_leaders.append(self.job_master_id)
            del self.former_leaders[:-FORMER_LEADERS_LIMIT]

    # -- the job: delegated to the scheduler ---------------------------------------------

    @handles(TaskExecutionStateChanged)
    def on_task_state(self, event: TaskExecutionStateChanged, out: Decisions) -> None:
        if not self._stale(event.job_master_id, out):
            self.scheduler.update_task_execution_state(event, out)

    @handles(TaskSubmissionRejected)
    def on_submission_rejected(self, event: TaskSubmissionRejected, out: Decisions) -> None:
        cause = f"task submission rejected: {event.reason}"
        self.scheduler.handle_task_deployment_failure(event.execution_attempt_id, cause, out)

    @handles(JobCancellationRequested)
    def on_cancellation(self, event: JobCancellationRequested, out: Decisions) -> None:
        self.scheduler.cancel(out)

    @handles(RescaleRequested)
    def on_rescale(self, event: RescaleRequested, out: Decisions) -> None:
        self.scheduler.rescale(event.new_parallelism, event.vertex_id, out)

    @handles(GlobalAggregateUpdateRequested)
    def on_global_aggregate_update(
        self, event: GlobalAggregateUpdateRequested, out: Decisions
    ) -> None:
        """updateGlobalAggregate (JM-10): the value folds into the named aggregate, created on
        its first value, and the new value is the answer."""
        if self.job_master_id is None:
            self._reject(out, f"job {self.job_id} has no JobMaster leader")
            return
        if self._stale(event.job_master_id, out):
            return
        if event.aggregate_function not in AGGREGATE_FUNCTIONS:
            known = ", ".join(sorted(AGGREGATE_FUNCTIONS))
            self._reject(out, f"unknown aggregate function {event.aggregate_function!r} ({known})")
            return
        value = self.global_aggregates.get(event.aggregate_name, 0) + event.value
        self.global_aggregates[event.aggregate_name] = value
        out.emit(
            GlobalAggregateUpdated, job_id=self.job_id, aggregate_name=event.aggregate_name,
            value=value,
        )  # fmt: skip

    @handles(TimerFired)
    def on_timer(self, event: TimerFired, out: Decisions) -> None:
        self.pool.handle(event, out)
        self.scheduler.time_out_deployments(out)
        self.scheduler.restart_if_due(out)

    # -- slots: delegated to the SlotPool (it fences what carries a JobMasterId) ---------

    @handles(AllocationFailed)
    def on_allocation_failed(self, event: AllocationFailed, out: Decisions) -> None:
        """failSlot: the pool fails the allocation (JM-4); a TaskManager that no longer holds
        any slot of the pool is then disconnected (releaseEmptyTaskManager), unless it still
        holds result partitions of the job (JM-5)."""
        held = self.pool.holds(event.allocation_id) if self.pool.started else None
        self.pool.handle(event, out)
        if held is None or self.pool.holds(event.allocation_id) is not None:
            return
        resource_id = held.resource_id
        if (
            resource_id not in self.pool.registered_task_managers
            or self.pool.slots_of(resource_id)
            or self.scheduler.is_tracking_partitions_for(resource_id)
        ):
            return
        cause = f"No more slots registered at JobMaster {resource_id}."
        self.pool.release_task_manager(resource_id, cause, out)
        out.emit(
            JobManagerDisconnected, job_id=self.job_id, job_master_id=self.job_master_id,
            resource_id=resource_id, cause=cause,
        )  # fmt: skip

    @handles(ResourceManagerConnected)
    @handles(ResourceManagerDisconnected)
    @handles(SlotOffered)
    @handles(JobMasterRegistrationRequested)
    @handles(TaskManagerDisconnected)
    @handles(NewAllocatedSlotRequested)
    @handles(AvailableSlotAllocationRequested)
    @handles(SlotRequestReleased)
    @handles(BatchSlotRequestTimeoutCheckDisabled)
    @handles(JobMasterStopped)
    @handles(SlotRequestRefused)
    def on_slot_event(self, event: Event, out: Decisions) -> None:
        self.pool.handle(event, out)

    # -- queryable state -----------------------------------------------------------------

    @handles(KvStateRegistered)
    def on_kv_state_registered(self, event: KvStateRegistered, out: Decisions) -> None:
        key_groups = self._kv_key_groups(event, out)
        if key_groups is None:
            return
        refusal = self.registry.notify_registered(
            event.job_vertex_id,
            key_groups,
            event.registration_name,
            KvStateRegistration(event.kv_state_id, event.server_host, event.server_port),
        )
        if refusal is None:
            return
        self._kv_reject(event, refusal.reason, out)
        if refusal.fail_vertex:
            self.scheduler.fail_job_vertex(event.job_vertex_id, refusal.reason, out)

    @handles(KvStateUnregistered)
    def on_kv_state_unregistered(self, event: KvStateUnregistered, out: Decisions) -> None:
        key_groups = self._kv_key_groups(event, out)
        if key_groups is None:
            return
        refusal = self.registry.notify_unregistered(
            event.job_vertex_id, key_groups, event.registration_name
        )
        if refusal is not None:
            self._kv_reject(event, refusal.reason, out)

    def _kv_key_groups(
        self, event: KvStateRegistered | KvStateUnregistered, out: Decisions
    ) -> KeyGroupRange | None:
        """The event's key group range, once the job, the leader and the range are valid."""
        if self._kv_refused(event, out):
            return None
        try:
            return KeyGroupRange.from_record(event.key_group_range)
        except ValueError as exc:
            self._kv_reject(event, str(exc), out)
            return None

    def _kv_refused(self, event: KvStateRegistered | KvStateUnregistered, out: Decisions) -> bool:
        if self.registry is None:
            self._kv_reject(event, f"Job {self.job_id} not found", out)
            return True
        if event.job_master_id not in (None, self.job_master_id):
            self._kv_reject(event, f"JobMasterId {event.job_master_id} is not the leader's", out)
            return True
        return False

    def _kv_reject(
        self, event: KvStateRegistered | KvStateUnregistered, reason: str, out: Decisions
    ) -> None:
        out.emit(
            KvStateRegistrationRejected, job_id=self.job_id, job_vertex_id=event.job_vertex_id,
            registration_name=event.registration_name, reason=reason,
        )  # fmt: skip

    # -- the query surface (queries.py) ---------------------------------------------------

    @query
    def info(self) -> JobMasterInfo:
        """The job's leader, status, restarts and failures as the JobMaster holds them."""
        scheduler = self.scheduler
        return JobMasterInfo(
            self.job_id, self.status, self.job_master_id, self.restarts, self.failure_cause,
            scheduler.restart_at, len(scheduler.backoff.failures) if scheduler.backoff else 0,
            len(self.graph.flat) if self.graph else 0,
        )  # fmt: skip

    @query
    def pending_restarts(self) -> list[PendingRestartInfo]:
        """The failovers waiting to restart their subtasks, oldest first."""
        return [
            PendingRestartInfo(r.at, tuple((v, i, n) for (v, i), n in sorted(r.versions.items())))
            for r in self.scheduler.pending_restarts
        ]

    @query
    def restart_strategy_of(self, job: JobSubmitted) -> RestartStrategy:
        """The restart strategy `job` runs under: its own, else the cluster's (RS-10)."""
        return self.scheduler.restart_strategy_of(job)
