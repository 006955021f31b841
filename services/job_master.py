"""JobMaster: one job's ExecutionGraph, scheduling, failover, fencing and queryable-state
registry, with the job's SlotPool inside it (Flink's JobMaster + DefaultScheduler, seed 001).

Invariants:
- the job's status only moves along JobStatus's legal transitions and never leaves a
  terminal one within one leadership;
- each execution vertex has one current attempt, in one ExecutionState, moved only by
  Execution's legal moves;
- inputs carrying a JobMasterId other than the leader's are refused (fencing);
- every slot the job's executions hold came from its SlotPool; slots go back when an attempt
  ends and are all released when the job ends.

Failover restarts the whole job (Flink's RestartAll strategy, RS-5); the restart strategy
decides whether and after which delay, measured on TimerFired events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from jobledger.schemas import Event
from jobledger.schemas.cluster import (
    JobMasterRegistrationRequested,
    ResourceManagerConnected,
    ResourceManagerDisconnected,
    TaskManagerDisconnected,
)
from jobledger.schemas.jobs import (
    JobCancellationRequested,
    JobMasterLeadershipGranted,
    JobMasterLeadershipRevoked,
    JobMasterStopped,
    JobStatusChanged,
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
    SlotRequestFailed,
    SlotRequestFulfilled,
    SlotRequestReleased,
    SlotRequestTimedOut,
)
from jobledger.schemas.tasks import (
    TaskCancellationRequested,
    TaskDeploymentRequested,
    TaskExecutionStateChanged,
    TaskSubmissionRejected,
)
from jobledger.schemas.timers import TimerFired
from jobledger.schemas.types import ExecutionState, JobStatus, OwnerKind, ResultPartitionType
from jobledger.schemas.types import ScheduleMode as Mode

from . import execution_state as es
from .decisions import Decisions
from .execution_graph import Execution, ExecutionGraph, ExecutionVertex, InvalidJobGraph
from .job_status import TERMINAL, transition_refusal
from .key_groups import KeyGroupRange
from .kv_state_location_registry import KvStateLocationRegistry, KvStateRegistration
from .reducer import Reducer, handles
from .resource_profile import is_matching
from .restart_strategy import RestartBackoff
from .slot_pool import SlotPool, SlotPoolConfig

PRODUCER = "jobmaster"

E = TypeVar("E", bound=Event)

SLOT_TIMEOUT_CAUSE = "Could not allocate the required slot within slot request timeout."


@dataclass(frozen=True)
class JobMasterConfig:
    slot_request_timeout_ms: int = 300_000
    pool: SlotPoolConfig = field(default_factory=SlotPoolConfig)


@dataclass
class JobMaster(Reducer):
    job_id: str
    config: JobMasterConfig = field(default_factory=JobMasterConfig)
    pool: SlotPool = field(init=False)
    job: JobSubmitted | None = None
    job_master_id: str | None = None
    status: JobStatus = JobStatus.INITIALIZING
    graph: ExecutionGraph | None = None
    registry: KvStateLocationRegistry | None = None
    backoff: RestartBackoff | None = None
    restart_at: int | None = None
    failure_cause: str | None = None
    parallelism: dict[str, int] = field(default_factory=dict)
    rescaled: ExecutionGraph | None = None
    restarts: int = 0

    producer: ClassVar[str] = PRODUCER

    def __post_init__(self) -> None:
        self.pool = SlotPool(self.job_id, self.config.pool)

    # -- queries -------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "status": self.status.value,
            "job_master_id": self.job_master_id,
            "failure_cause": self.failure_cause,
            "restart_at": self.restart_at,
            "restarts": self.restarts,
            "execution_graph": self.graph.to_dict() if self.graph else None,
            "kv_state_locations": self.registry.to_dict() if self.registry else {},
            "slot_pool": self.pool.to_dict(),
        }

    def kv_state_location(self, registration_name: str, key: object) -> KvStateRegistration | None:
        """Queryable state: which KvState instance (id, server) answers for `key`."""
        return self.registry.lookup(registration_name, key) if self.registry else None

    def _reject(self, out: Decisions, reason: str) -> None:
        out.reject(OwnerKind.JOB, self.job_id, reason)

    def _stale(self, job_master_id: str | None, out: Decisions) -> bool:
        """Fencing: an input addressed to another JobMasterId is refused."""
        if job_master_id is None or job_master_id == self.job_master_id:
            return False
        self._reject(out, f"JobMasterId {job_master_id} is not the leader's")
        return True

    # -- the SlotPool inside -------------------------------------------------------------

    @handles(ResourceManagerConnected)
    @handles(ResourceManagerDisconnected)
    @handles(SlotOffered)
    @handles(AllocationFailed)
    @handles(JobMasterRegistrationRequested)
    @handles(TaskManagerDisconnected)
    @handles(NewAllocatedSlotRequested)
    @handles(AvailableSlotAllocationRequested)
    @handles(SlotRequestReleased)
    @handles(BatchSlotRequestTimeoutCheckDisabled)
    @handles(JobMasterStopped)
    def on_slot_event(self, event: Event, out: Decisions) -> None:
        self._with_pool(out, lambda: self.pool.handle(event, out))

    def _with_pool(self, out: Decisions, call) -> None:
        """Run a SlotPool call, then react to what the pool decided about our requests."""
        mark = len(out.events)
        call()
        while mark < len(out.events):
            decision = out.events[mark]
            mark += 1
            if isinstance(decision, SlotRequestFulfilled):
                self._on_slot(decision, out)
            elif isinstance(decision, SlotRequestFailed | SlotRequestTimedOut):
                self._on_slot_lost(decision, out)

    def _on_slot(self, fulfilled: SlotRequestFulfilled, out: Decisions) -> None:
        """A slot for one of our attempts: deploy (LAZY) or deploy all once all have one
        (EAGER). A slot for an outdated attempt goes back (RS-8); requests that are not ours
        (made directly of the pool) are left to whoever made them."""
        if self.graph is None or fulfilled.slot_request_id not in self.graph.attempts:
            return
        ev = self.graph.find(fulfilled.slot_request_id)
        if ev is None or ev.current.state is not ExecutionState.SCHEDULED:
            self._release_slot(fulfilled.slot_request_id, "outdated attempt (RS-8)", out)
            return
        execution = ev.current
        execution.allocation_id = fulfilled.allocation_id
        execution.resource_id = fulfilled.resource_id
        execution.slot_index = fulfilled.slot_index
        if self._lazy():
            self._deploy(ev, out)
        elif all(e.has_slot for e in self.graph.executions()):
            for waiting in self.graph.execution_vertices():
                self._deploy(waiting, out)

    def _on_slot_lost(self, lost: SlotRequestFailed | SlotRequestTimedOut, out: Decisions) -> None:
        ev = self.graph.find(lost.slot_request_id) if self.graph else None
        if ev is None:
            return
        ev.current.slot_request_id = None
        ev.current.allocation_id = None
        if isinstance(lost, SlotRequestTimedOut):
            cause = f"NoResourceAvailableException: {SLOT_TIMEOUT_CAUSE}"
        else:
            cause = lost.cause
        self._fail_execution(ev, cause, out, suppress_restarts=False)

    def _command(self, cls: type[E], out: Decisions, **fields: Any) -> E:
        """An instruction to the SlotPool inside: shaped like its input event, stamped with
        the cause being reduced, never written to the log."""
        return cls(
            event_id=out.cause.event_id, event_time=out.cause.event_time, producer=PRODUCER,
            job_id=self.job_id, **fields,
        )  # fmt: skip

    def _release_slot(self, slot_request_id: str, cause: str, out: Decisions) -> None:
        if self.pool.started:
            release = self._command(
                SlotRequestReleased, out, slot_request_id=slot_request_id, cause=cause
            )
            self._with_pool(out, lambda: self.pool.on_request_released(release, out))

    # -- job lifecycle -------------------------------------------------------------------

    @handles(JobSubmitted)
    def on_submitted(self, event: JobSubmitted, out: Decisions) -> None:
        if self.job is not None:
            self._reject(out, f"job {self.job_id} was already submitted")
            return
        try:
            graph = self._build_graph(event, out, {})
        except InvalidJobGraph as exc:
            self._reject(out, f"invalid JobGraph: {exc}")
            return
        self.job = event
        self._start_incarnation(graph, out)
        if self.job_master_id is not None:
            self._start_scheduling(out)

    def _build_graph(
        self, job: JobSubmitted, out: Decisions, parallelism: dict[str, int]
    ) -> ExecutionGraph:
        return ExecutionGraph.build(
            job, lambda v, i, n: out.derive(f"attempt/{v}/{i}/{n}"), parallelism
        )

    def _start_incarnation(self, graph: ExecutionGraph, out: Decisions) -> None:
        """A fresh ExecutionGraph in CREATED (a new JobMaster incarnation)."""
        self._install(graph)
        self.rescaled = None
        self.backoff = RestartBackoff(self.job.restart_strategy)
        self.restarts = 0
        self.restart_at = None
        self.failure_cause = None
        self.status = JobStatus.INITIALIZING
        self._set_status(JobStatus.CREATED, None, out)

    def _install(self, graph: ExecutionGraph) -> None:
        self.graph = graph
        self.registry = KvStateLocationRegistry(
            self.job_id, {vid: jv.max_parallelism for vid, jv in graph.vertices.items()}
        )

    def _set_status(self, target: JobStatus, cause: str | None, out: Decisions) -> None:
        if transition_refusal(self.status, target) is not None:
            return
        out.emit(
            JobStatusChanged, job_id=self.job_id, from_status=self.status, to_status=target,
            cause=cause,
        )  # fmt: skip
        self.status = target

    @handles(JobMasterLeadershipGranted)
    def on_leadership_granted(self, event: JobMasterLeadershipGranted, out: Decisions) -> None:
        """JM-9: the same id again is a no-op; a new id suspends the old execution and starts
        again from a fresh ExecutionGraph."""
        if event.job_master_id == self.job_master_id:
            return
        if self.job_master_id is not None:
            self._suspend(f"leadership passed to {event.job_master_id}", out)
        self.job_master_id = event.job_master_id
        self._with_pool(out, lambda: self.pool.handle(event, out))
        if self.job is not None:
            if self.status is not JobStatus.CREATED:
                self._start_incarnation(self._build_graph(self.job, out, self.parallelism), out)
            self._start_scheduling(out)

    @handles(JobMasterLeadershipRevoked)
    def on_leadership_revoked(self, event: JobMasterLeadershipRevoked, out: Decisions) -> None:
        if event.job_master_id != self.job_master_id:
            self._reject(out, f"JobMasterId {event.job_master_id} is not the leader's")
            return
        self._suspend("leadership revoked", out)
        self._with_pool(out, lambda: self.pool.handle(event, out))
        self.job_master_id = None

    def _suspend(self, cause: str, out: Decisions) -> None:
        if self.graph is not None and self.status not in TERMINAL:
            self._set_status(JobStatus.SUSPENDED, cause, out)

    def _start_scheduling(self, out: Decisions) -> None:
        """Only from CREATED: RUNNING, then slots for what the schedule mode starts with."""
        if self.status is not JobStatus.CREATED:
            return
        self._set_status(JobStatus.RUNNING, None, out)
        self._schedule_ready(out)

    def _lazy(self) -> bool:
        return self.job.schedule_mode in (
            Mode.LAZY_FROM_SOURCES,
            Mode.LAZY_FROM_SOURCES_WITH_BATCH_SLOT_REQUEST,
        )

    def _schedule_ready(self, out: Decisions) -> None:
        """Ask slots for every CREATED vertex whose inputs allow it (EAGER: all of them)."""
        for job_vertex in self.graph.vertices.values():
            if self._lazy() and not self._inputs_ready(job_vertex.vertex):
                continue
            for ev in job_vertex.subtasks:
                if ev.current.state is ExecutionState.CREATED:
                    self._schedule(ev, out)

    def _inputs_ready(self, vertex) -> bool:
        """LAZY_FROM_SOURCES: a BLOCKING input needs every producer FINISHED, a PIPELINED one
        every producer at least RUNNING."""
        for edge in vertex.inputs:
            producers = [
                ev.current.state for ev in self.graph.vertices[edge.source_vertex_id].subtasks
            ]
            if edge.result_partition_type is ResultPartitionType.BLOCKING:
                if any(s is not ExecutionState.FINISHED for s in producers):
                    return False
            elif any(s not in (ExecutionState.RUNNING, ExecutionState.FINISHED) for s in producers):
                return False
        return True

    def _schedule(self, ev: ExecutionVertex, out: Decisions) -> None:
        """CREATED -> SCHEDULED; take an available slot of the pool, else request a new one."""
        execution = ev.current
        execution.state = ExecutionState.SCHEDULED
        execution.slot_request_id = execution.attempt_id
        profile = self.graph.vertices[ev.job_vertex_id].vertex.resource_profile
        request_id = execution.attempt_id
        available = next(
            (a for a, (slot, _) in self.pool.available_slots.items()
             if is_matching(slot.resource_profile, profile)),
            None,
        )  # fmt: skip
        if available is not None:
            take = self._command(
                AvailableSlotAllocationRequested,
                out,
                slot_request_id=request_id,
                allocation_id=available,
            )
            self._with_pool(out, lambda: self.pool.on_allocate_available(take, out))
            return
        request = self._command(
            NewAllocatedSlotRequested,
            out,
            slot_request_id=request_id, resource_profile=profile,
            batch_request=self.job.schedule_mode is Mode.LAZY_FROM_SOURCES_WITH_BATCH_SLOT_REQUEST,
            timeout_ms=self.config.slot_request_timeout_ms,
        )  # fmt: skip
        self._with_pool(out, lambda: self.pool.on_new_slot_requested(request, out))

    def _deploy(self, ev: ExecutionVertex, out: Decisions) -> None:
        execution = ev.current
        if execution.state is not ExecutionState.SCHEDULED or not execution.has_slot:
            return
        job_vertex = self.graph.vertices[ev.job_vertex_id]
        execution.state = ExecutionState.DEPLOYING
        out.emit(
            TaskDeploymentRequested,
            job_id=self.job_id,
            job_master_id=self.job_master_id,
            execution_attempt_id=execution.attempt_id,
            vertex_id=ev.job_vertex_id,
            subtask_index=ev.subtask_index,
            attempt_number=execution.attempt_number,
            number_of_subtasks=job_vertex.parallelism,
            max_parallelism=job_vertex.max_parallelism,
            allocation_id=execution.allocation_id,
            resource_id=execution.resource_id,
            slot_index=execution.slot_index,
            invokable_class_name=job_vertex.vertex.invokable_class_name,
            operators=job_vertex.vertex.operators,
            inputs=self.graph.input_gates(ev),
            outputs=self.graph.output_partitions(ev),
        )

    # -- task states ---------------------------------------------------------------------

    @handles(TaskExecutionStateChanged)
    def on_task_state(self, event: TaskExecutionStateChanged, out: Decisions) -> None:
        if self._stale(event.job_master_id, out):
            return
        ev = self.graph.find(event.execution_attempt_id) if self.graph else None
        if ev is None:
            self._reject(out, f"no current execution attempt {event.execution_attempt_id}")
            return
        if event.execution_state is ExecutionState.FAILED:
            self._fail_execution(ev, event.error or "task failed", out, suppress_restarts=False)
            return
        outcome = es.on_reported(ev.current.state, event.execution_state)
        if outcome.refused:
            self._reject(out, outcome.refused)
        if outcome.global_failure:
            self._fail_execution(ev, outcome.global_failure, out, suppress_restarts=False)
            return
        self._move(ev, outcome, out)

    @handles(TaskSubmissionRejected)
    def on_submission_rejected(self, event: TaskSubmissionRejected, out: Decisions) -> None:
        ev = self.graph.find(event.execution_attempt_id) if self.graph else None
        if ev is None:
            self._reject(out, f"no current execution attempt {event.execution_attempt_id}")
            return
        self._fail_execution(ev, f"task submission rejected: {event.reason}", out, False)

    def _move(self, ev: ExecutionVertex, outcome: es.Outcome, out: Decisions) -> None:
        """Apply an attempt's move and everything that follows from it."""
        execution = ev.current
        before = execution.state
        execution.state = outcome.state
        if outcome.cancel_task:
            self._cancel_task(ev, out)
        if execution.state is before:
            return
        if execution.state in es.TERMINAL:
            self._release_execution_slot(execution, out)
        if execution.state is ExecutionState.FAILED:
            self._on_failure(ev.current.attempt_id, "task failed", out, suppress_restarts=False)
            return
        progressed = execution.state in (ExecutionState.RUNNING, ExecutionState.FINISHED)
        if progressed and self._lazy() and self.status is JobStatus.RUNNING:
            self._schedule_ready(out)
        self._check_job_done(out)

    def _cancel_task(self, ev: ExecutionVertex, out: Decisions) -> None:
        execution = ev.current
        if execution.resource_id is not None:
            out.emit(
                TaskCancellationRequested, job_id=self.job_id, resource_id=execution.resource_id,
                execution_attempt_id=execution.attempt_id,
            )  # fmt: skip

    def _release_execution_slot(self, execution: Execution, out: Decisions) -> None:
        request = execution.slot_request_id
        execution.slot_request_id = None
        if request is not None and (
            execution.has_slot
            or request in self.pool.pending_requests
            or request in self.pool.waiting_for_resource_manager
        ):
            self._release_slot(request, f"attempt {execution.state.value}", out)

    # -- failures and restarts -----------------------------------------------------------

    def _fail_execution(
        self, ev: ExecutionVertex, cause: str, out: Decisions, suppress_restarts: bool
    ) -> None:
        outcome = es.fail(ev.current.state)
        if outcome.state is ev.current.state:
            return
        ev.current.state = outcome.state
        self._release_execution_slot(ev.current, out)
        if outcome.state is ExecutionState.FAILED:
            self._on_failure(ev.current.attempt_id, cause, out, suppress_restarts)
        else:
            self._check_job_done(out)

    def _on_failure(
        self, attempt_id: str, cause: str, out: Decisions, suppress_restarts: bool
    ) -> None:
        """RS-2..RS-5, RS-9: count the failure; restart everything after the backoff, or fail
        the job once its remaining tasks are cancelled."""
        if self.status not in (JobStatus.RUNNING, JobStatus.RESTARTING):
            self._check_job_done(out)
            return
        now = out.cause.event_time
        restartable = not suppress_restarts
        if restartable:
            self.backoff.notify_failure(now)
            restartable = self.backoff.can_restart(now)
        self.failure_cause = f"{attempt_id}: {cause}"
        if restartable and self.status is JobStatus.RUNNING:
            self._set_status(JobStatus.RESTARTING, self.failure_cause, out)
            self.restart_at = now + self.backoff.backoff_ms
        elif not restartable:
            self._set_status(JobStatus.FAILING, self.failure_cause, out)
            self.restart_at = None
        self._cancel_all(out)
        self._check_job_done(out)

    def _cancel_all(self, out: Decisions) -> None:
        for ev in self.graph.execution_vertices():
            outcome = es.cancel(ev.current.state)
            if outcome.state is not ev.current.state or outcome.cancel_task:
                ev.current.state = outcome.state
                if outcome.cancel_task:
                    self._cancel_task(ev, out)
                if outcome.state in es.TERMINAL:
                    self._release_execution_slot(ev.current, out)

    def _all_terminal(self) -> bool:
        return all(e.state in es.TERMINAL for e in self.graph.executions())

    def _check_job_done(self, out: Decisions) -> None:
        """Move the job on once its executions allow: FINISHED, CANCELED, FAILED, or restart."""
        if self.graph is None:
            return
        executions = list(self.graph.executions())
        if self.status is JobStatus.RUNNING and all(
            e.state is ExecutionState.FINISHED for e in executions
        ):
            self._end(JobStatus.FINISHED, None, out)
        elif self._all_terminal():
            if self.status is JobStatus.CANCELLING:
                self._end(JobStatus.CANCELED, None, out)
            elif self.status is JobStatus.FAILING:
                self._end(JobStatus.FAILED, self.failure_cause, out)
            elif self.status is JobStatus.RESTARTING:
                self._maybe_restart(out)

    def _end(self, status: JobStatus, cause: str | None, out: Decisions) -> None:
        """A globally terminal status; every slot goes back (the pool closes)."""
        self._set_status(status, cause, out)
        stop = self._command(JobMasterStopped, out, cause=f"job {status.value}")
        self.pool.on_stopped(stop, out)

    def _maybe_restart(self, out: Decisions) -> None:
        if self.restart_at is None or out.cause.event_time < self.restart_at:
            return
        if not self._all_terminal():
            return
        self.restart_at = None
        if self.rescaled is not None:
            self._install(self.rescaled)
            self.rescaled = None
        else:
            self.restarts += 1
            for ev in self.graph.execution_vertices():
                self.graph.reset(ev, lambda v, i, n: out.derive(f"attempt/{v}/{i}/{n}"))
        self._set_status(JobStatus.RUNNING, None, out)
        self._schedule_ready(out)

    @handles(TimerFired)
    def on_timer(self, event: TimerFired, out: Decisions) -> None:
        self._with_pool(out, lambda: self.pool.handle(event, out))
        if self.status is JobStatus.RESTARTING:
            self._maybe_restart(out)

    def next_timer(self) -> int | None:
        """The earliest event time at which a TimerFired changes anything (None: never): the
        pool's, or the restart delay's end once every execution has ended (until then the
        end of the last one restarts the job)."""
        times = [self.pool.next_timer()]
        if self.status is JobStatus.RESTARTING and self._all_terminal():
            times.append(self.restart_at)
        return min((t for t in times if t is not None), default=None)

    # -- cancel and rescale --------------------------------------------------------------

    @handles(JobCancellationRequested)
    def on_cancellation(self, event: JobCancellationRequested, out: Decisions) -> None:
        if self.graph is None or self.status in TERMINAL or self.status is JobStatus.CANCELLING:
            self._reject(out, f"job {self.job_id} cannot be cancelled in {self.status.value}")
            return
        self.restart_at = None
        self._set_status(JobStatus.CANCELLING, "cancelled by request", out)
        self._cancel_all(out)
        self._check_job_done(out)

    @handles(RescaleRequested)
    def on_rescale(self, event: RescaleRequested, out: Decisions) -> None:
        """A new ExecutionGraph at the new parallelism, then a restart into it."""
        if self.graph is None or self.status is not JobStatus.RUNNING:
            self._reject(out, f"job {self.job_id} cannot be rescaled in {self.status.value}")
            return
        if event.new_parallelism <= 0:
            self._reject(out, f"parallelism must be > 0, not {event.new_parallelism}")
            return
        targets = [event.vertex_id] if event.vertex_id else list(self.graph.vertices)
        parallelism = dict(self.parallelism)
        parallelism.update({vid: event.new_parallelism for vid in targets})
        try:
            graph = self._build_graph(self.job, out, parallelism)
        except (InvalidJobGraph, KeyError) as exc:
            self._reject(out, f"cannot rescale: {exc}")
            return
        self.parallelism = parallelism
        self.rescaled = graph
        self.restart_at = event.event_time
        self._set_status(JobStatus.RESTARTING, f"rescaling to {event.new_parallelism}", out)
        self._cancel_all(out)
        self._check_job_done(out)

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
            for ev in self.graph.vertices[event.job_vertex_id].subtasks:
                self._fail_execution(ev, refusal.reason, out, suppress_restarts=True)

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
        start = event.key_group_range.start_key_group
        end = event.key_group_range.end_key_group
        try:
            return KeyGroupRange(start, end)
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
