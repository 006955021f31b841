"""Scheduler: one job's ExecutionGraph, status, scheduling, deployment, failover, restarts and
rescale (Flink's DefaultScheduler behind SchedulerNG, seed 001), beside the JobMaster that
leads the job and routes its inputs here.

Invariants:
- the job's status only moves along JobStatus's legal transitions and never leaves a
  terminal one within one incarnation;
- each execution vertex has one current attempt, in one ExecutionState, moved only by
  Execution's legal moves;
- every slot the job's executions hold came from the SlotPool; slots go back when an attempt
  ends and are all released when the job ends (the pool closes).

It asks the SlotPool for slots through the pool's methods and hears what became of each
request as the pool's SlotRequestListener. A task failure restarts what the failover
strategy says (failover_strategy.py: the failed task's pipelined region by default, or every
vertex); the restart strategy (the job's own, else the cluster's, RS-10) decides whether and
after which delay, measured on TimerFired events. Every vertex to be cancelled is first marked
modified (its version bumped), so a slot arriving for it meanwhile deploys nothing (ES-3).
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Iterator
from dataclasses import dataclass, field

from jobledger.schemas.jobs import JobStatusChanged, JobSubmitted
from jobledger.schemas.slots import SlotRequestFailed, SlotRequestFulfilled, SlotRequestTimedOut
from jobledger.schemas.tasks import (
    ResultPartitionsReleased,
    TaskCancellationRequested,
    TaskDeploymentRequested,
    TaskExecutionStateChanged,
)
from jobledger.schemas.types import (
    ExecutionState,
    JobStatus,
    OwnerKind,
    RestartStrategy,
    RestartStrategyKind,
)

from . import execution_state as es
from .decisions import Decisions
from .event_time import later
from .execution_failure_handler import ExecutionFailureHandler, FailureHandlingResult
from .execution_graph import (
    Execution,
    ExecutionGraph,
    ExecutionVertex,
    InvalidJobGraph,
    JobLimits,
)
from .failover_strategy import PRODUCING, FailoverStrategyName
from .job_status import TERMINAL, transition_refusal
from .kv_state_location_registry import KvStateLocationRegistry
from .reducer import derived
from .restart_strategy import RestartBackoff
from .scheduling_strategy import SchedulingStrategy, scheduling_strategy_for
from .slot_pool import SlotPool

SLOT_TIMEOUT_CAUSE = "Could not allocate the required slot within slot request timeout."

DEFAULT_DEPLOYMENT_TIMEOUT_MS = 120_000
"""`task.deployment.timeout` unless configured (docs/operations/faults.md: how it was measured)."""

DEFAULT_MAX_PENDING_DEPLOYMENTS = 100
"""`jobledger.scheduler.max-pending-deployments` unless configured: at P=2,000 a small job
beside a giant's deployments was 0.1-0.3 s over its quiet time with 100 (up to 1.4 s with
250, 8.5 s with no bound), and the giant no slower than with larger windows
(docs/operations/giant-jobs.md). A log written with another window replays with it."""

DEPLOYMENT_QUEUE_ALLOWANCE_MS = 5
"""How much later the deployment deadline of an attempt starts for each of the job's
deployments still unacknowledged when it is decided. Flink's `submitTask` RPC timeout counts
from when each RPC is sent, and a JobMaster deploying 20,000 tasks sends them one after
another (17 s for 10,000 x 10,000 in Flink 1.14, ~1 ms each), so the last one's timeout
starts ~17 s after the first's. Here every deployment of one input is decided at one event
time and served in log order by the TaskExecutors' partitions and their runners (~1 ms each
through the services at best, a few under load): counted from the decision alone, the 2 min
deadline fired on a healthy P=10,000 job under load. 5 ms each beyond the first
`DEPLOYMENTS_SERVED_AT_ONCE` gives the 20,000th 95 s more."""

DEPLOYMENTS_SERVED_AT_ONCE = 1_000
"""Unacknowledged deployments that add nothing to the next one's deadline: a thousand are
served within seconds, well inside any deadline (and a job of a laptop's size keeps the
deadline Flink's option says, to the millisecond)."""

NO_RESTART = RestartStrategy(kind=RestartStrategyKind.NONE)


@dataclass
class PendingRestart:
    """One failover waiting to restart its vertices: at `at`, once they are all terminal, the
    vertices whose version is still the one recorded here are reset and scheduled again
    (Flink's restartTasksWithDelay with its ExecutionVertexVersions)."""

    at: int
    versions: dict[tuple[str, int], int]


def _due_at(restart: PendingRestart) -> int:
    return restart.at


@dataclass
class Scheduler:
    """One per JobMaster, for the job it was given; each incarnation (a fresh ExecutionGraph)
    starts it over, as Flink's JobMaster starts a new scheduler."""

    job_id: str
    pool: SlotPool
    slot_request_timeout_ms: int
    failover_strategy: str = FailoverStrategyName.REGION.value
    """`jobmanager.execution.failover-strategy`: region (Flink's default) or full."""
    cluster_restart_strategy: RestartStrategy = NO_RESTART
    """The cluster's `restart-strategy`, for jobs that configure none (RS-10)."""
    deployment_timeout_ms: int = DEFAULT_DEPLOYMENT_TIMEOUT_MS
    """`task.deployment.timeout`: how long a deployed attempt may take to report INITIALIZING
    (Flink bounds `submitTask` by its RPC timeout)."""
    max_pending_deployments: int = DEFAULT_MAX_PENDING_DEPLOYMENTS
    """`jobledger.scheduler.max-pending-deployments` (0: no bound): deployments beyond this
    many not yet reported wait in `deployments_waiting` and go as the earlier ones report.
    An EAGER job's last slot derived all its deployments at once, and the TaskExecutor
    partitions (and the job's, with the tasks' reports) then served thousands of its records
    ahead of any other job's: a small job submitted then took 10 s at P=2,000 instead of 0.3."""
    job: JobSubmitted | None = None
    job_master_id: str | None = None
    """The leader the deployments name (set when scheduling starts)."""
    status: JobStatus = JobStatus.INITIALIZING
    graph: ExecutionGraph | None = None
    registry: KvStateLocationRegistry | None = None
    """The KvState locations of the graph's vertices (Flink keeps it by the ExecutionGraph)."""
    backoff: RestartBackoff | None = None
    pending_restarts: list[PendingRestart] = field(default_factory=list)
    """In the order they fall due (then of their failures): a check for due restarts reads
    only those due, where a check per failure that read them all was N^2 for a TimerFired
    failing N subtasks one region each. Which are due, not their order, decides a restart:
    every vertex's new attempt id derives from its key alone."""
    failure_cause: str | None = None
    parallelism: dict[str, int] = field(default_factory=dict)
    """Parallelism overrides of rescales, kept for every later incarnation."""
    rescaled: ExecutionGraph | None = None
    restarts: int = 0
    full_restarts: int = 0
    """Restarts that restarted every subtask (Flink's `fullRestarts`)."""
    status_timestamps: dict[str, int] = field(default_factory=dict)
    """When the job last entered each status: the event time of the input that moved it
    (Flink's ExecutionGraph stateTimestamps), what `uptime` and `downtime` count from."""
    deployment_deadlines: dict[str, int] = field(default_factory=dict)
    """Event time by which each deployed attempt must have reported INITIALIZING, by
    ExecutionAttemptID; an attempt's entry goes once it reports, or at the next timer once it
    is no longer a DEPLOYING current attempt."""
    deployments_waiting: list[str] = field(default_factory=list)
    """Attempts with their slot, ready to deploy, held back by `max_pending_deployments`, in
    the order they were ready (a deployment of one since failed over or cancelled is skipped
    when its turn comes)."""
    limits: JobLimits = field(default_factory=JobLimits)
    """What one JobGraph may cost; a rescale beyond them is refused too."""
    partition_hosts: list[str] = field(default_factory=list)
    """The TaskExecutors an attempt producing a result was deployed to, in any incarnation
    (Flink's JobMasterPartitionTracker, by TaskExecutor): the job's result partitions live
    there until the job ends for good. One entry per TaskExecutor."""
    tracked_hosts: set[str] = derived()
    """`partition_hosts` as a set: asked on every deployment, the list was a scan of up to
    every TaskExecutor each time (P^2 for a job of P subtasks spread over P/4 of them)."""

    def __post_init__(self) -> None:
        self.pool.listener = self
        self.pending_restarts.sort(key=_due_at)  # a snapshot written before they were kept so
        self.tracked_hosts = set(self.partition_hosts)

    def _reject(self, out: Decisions, reason: str) -> None:
        out.reject(OwnerKind.JOB, self.job_id, reason)

    # -- incarnations --------------------------------------------------------------------

    def create_execution_graph(self, job: JobSubmitted, out: Decisions) -> None:
        """A fresh incarnation of `job`: its ExecutionGraph in CREATED, restarts counted from
        nothing. InvalidJobGraph (nothing changed) if the JobGraph cannot be expanded."""
        graph = self._build_graph(job, out, self.parallelism)
        self.job = job
        self._install(graph)
        self.rescaled = None
        self.backoff = RestartBackoff(self.restart_strategy_of(job))
        self.restarts = 0
        self.full_restarts = 0
        self.pending_restarts = []
        self.deployment_deadlines = {}
        self.deployments_waiting = []
        self.failure_cause = None
        self.status = JobStatus.INITIALIZING
        self._set_status(JobStatus.CREATED, None, out)

    def restart_strategy_of(self, job: JobSubmitted) -> RestartStrategy:
        """RestartBackoffTimeStrategyFactoryLoader: the job's own strategy beats the cluster's;
        a job that configures none (CLUSTER_DEFAULT) gets the cluster's (RS-10)."""
        if job.restart_strategy.kind is RestartStrategyKind.CLUSTER_DEFAULT:
            return self.cluster_restart_strategy
        return job.restart_strategy

    @property
    def restart_at(self) -> int | None:
        """When the earliest waiting restart is due (None: none waits)."""
        return min((r.at for r in self.pending_restarts), default=None)

    def _build_graph(
        self, job: JobSubmitted, out: Decisions, parallelism: dict[str, int]
    ) -> ExecutionGraph:
        return ExecutionGraph.build(
            job, lambda v, i, n: out.derive(f"attempt/{v}/{i}/{n}"), parallelism, self.limits
        )

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
        self.status_timestamps[target.value] = out.cause.event_time

    def start_scheduling(self, job_master_id: str, out: Decisions) -> None:
        """startScheduling for the leader `job_master_id`: RUNNING, then slots for what the
        schedule mode starts with. A job that ran before starts from a fresh incarnation
        (Flink's JobMaster.resetAndStartScheduler)."""
        self.job_master_id = job_master_id
        if self.status is not JobStatus.CREATED:
            self.create_execution_graph(self.job, out)
        self._set_status(JobStatus.RUNNING, None, out)
        self._schedule_all(self.scheduling_strategy.start_scheduling(self.graph), out)

    def suspend(self, cause: str, out: Decisions) -> None:
        """Leadership lost: SUSPENDED, unless the job already ended."""
        if self.graph is not None and self.status not in TERMINAL:
            self._set_status(JobStatus.SUSPENDED, cause, out)
        self.deployment_deadlines = {}
        self.deployments_waiting = []

    # -- scheduling and deployment -------------------------------------------------------

    @property
    def scheduling_strategy(self) -> SchedulingStrategy:
        """The job's ScheduleMode as its strategy (scheduling_strategy.py)."""
        return scheduling_strategy_for(self.job.schedule_mode)

    def _schedule_all(self, vertices: Iterator[ExecutionVertex], out: Decisions) -> None:
        """Schedule each vertex the strategy names, in turn: it looks at the next one only
        after this one was scheduled."""
        for ev in vertices:
            self._schedule(ev, out)

    def _schedule(self, ev: ExecutionVertex, out: Decisions) -> None:
        """CREATED -> SCHEDULED; take an available slot of the pool, else request a new one,
        under the attempt's id."""
        execution = ev.current
        execution.state = ExecutionState.SCHEDULED
        execution.slot_request_id = execution.attempt_id
        execution.required_version = ev.version
        profile = self.graph.vertices[ev.job_vertex_id].vertex.resource_profile
        available = self.pool.available_slot_for(profile)
        if available is not None:
            self.pool.allocate_available_slot(execution.attempt_id, available, out)
        elif self.scheduling_strategy.batch_slot_requests:
            self.pool.request_new_allocated_batch_slot(execution.attempt_id, profile, out)
        else:
            self.pool.request_new_allocated_slot(
                execution.attempt_id, profile, self.slot_request_timeout_ms, out
            )

    def _deploy(self, ev: ExecutionVertex, out: Decisions) -> None:
        execution = ev.current
        if execution.state is not ExecutionState.SCHEDULED or not execution.has_slot:
            return
        if ev.modified:
            return
        job_vertex = self.graph.vertices[ev.job_vertex_id]
        outputs = self.graph.output_partitions(ev)
        if outputs and execution.resource_id not in self.tracked_hosts:
            self.partition_hosts.append(execution.resource_id)
            self.tracked_hosts.add(execution.resource_id)
        limit = self.max_pending_deployments
        if limit and len(self.deployment_deadlines) >= limit:
            self.deployments_waiting.append(execution.attempt_id)
            return
        execution.state = ExecutionState.DEPLOYING
        ahead = len(self.deployment_deadlines) - DEPLOYMENTS_SERVED_AT_ONCE
        queued = max(0, ahead) * DEPLOYMENT_QUEUE_ALLOWANCE_MS
        deadline = later(out.cause.event_time, self.deployment_timeout_ms + queued)
        self.deployment_deadlines[execution.attempt_id] = deadline
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
            outputs=outputs,
        )

    def is_tracking_partitions_for(self, resource_id: str) -> bool:
        """JobMasterPartitionTracker.isTrackingPartitionsFor: a current attempt on the
        TaskExecutor produces a result (its vertex has consumers) and was deployed without
        failing or being cancelled since, so its partitions still live there."""
        if self.graph is None or self.status in TERMINAL:
            return False
        return any(
            ev.current.resource_id == resource_id
            and ev.current.state in PRODUCING
            and self.graph.output_partitions(ev)
            for ev in self.graph.execution_vertices()
        )

    # -- what became of the slot requests (the SlotPool's SlotRequestListener) -----------

    def on_slot_request_fulfilled(self, fulfilled: SlotRequestFulfilled, out: Decisions) -> None:
        """A slot for one of our attempts: deploy (LAZY), or deploy all once every scheduled
        one has one (EAGER: the bulk scheduled together, the whole job or a restarted region).
        A slot for an outdated attempt, or for one whose vertex was modified since it was
        scheduled (being cancelled or failed over), goes back (RS-8, ES-3); requests that
        are not ours (made directly of the pool) are left to whoever made them."""
        if self.graph is None or fulfilled.slot_request_id not in self.graph.attempts:
            return
        ev = self.graph.find(fulfilled.slot_request_id)
        if ev is None or ev.current.state is not ExecutionState.SCHEDULED or ev.modified:
            self._release_slot(fulfilled.slot_request_id, out)
            return
        execution = ev.current
        execution.allocation_id = fulfilled.allocation_id
        execution.resource_id = fulfilled.resource_id
        execution.slot_index = fulfilled.slot_index
        for ready in self.scheduling_strategy.on_slot_fulfilled(self.graph, ev):
            self._deploy(ready, out)

    def on_slot_request_failed(self, failed: SlotRequestFailed, out: Decisions) -> None:
        self._slot_lost(failed.slot_request_id, failed.cause, out)

    def on_slot_request_timed_out(self, timed_out: SlotRequestTimedOut, out: Decisions) -> None:
        cause = f"NoResourceAvailableException: {SLOT_TIMEOUT_CAUSE}"
        self._slot_lost(timed_out.slot_request_id, cause, out)

    def _slot_lost(self, slot_request_id: str, cause: str, out: Decisions) -> None:
        ev = self.graph.find(slot_request_id) if self.graph else None
        if ev is None:
            return
        ev.current.slot_request_id = None
        ev.current.allocation_id = None
        self._fail_execution(ev, cause, out, suppress_restarts=False)

    def _release_slot(self, slot_request_id: str, out: Decisions) -> None:
        if self.pool.started:
            self.pool.release_slot(slot_request_id, out)

    # -- task states ---------------------------------------------------------------------

    def _deploy_waiting(self, out: Decisions) -> None:
        """Deploy the attempts held back, in order, as far as the window has room."""
        limit = self.max_pending_deployments
        while self.deployments_waiting and len(self.deployment_deadlines) < limit:
            room = limit - len(self.deployment_deadlines)
            turn = self.deployments_waiting[:room]
            del self.deployments_waiting[:room]
            for attempt_id in turn:
                ev = self.graph.find(attempt_id) if self.graph else None
                if ev is not None:
                    self._deploy(ev, out)

    def update_task_execution_state(self, event: TaskExecutionStateChanged, out: Decisions) -> None:
        """updateTaskExecutionState: a task's report moves its attempt (the leader's, already
        fenced by the JobMaster), and lets a deployment held back go."""
        self._update_task_execution_state(event, out)
        self._deploy_waiting(out)

    def _update_task_execution_state(
        self, event: TaskExecutionStateChanged, out: Decisions
    ) -> None:
        ev = self._current(event.execution_attempt_id, out)
        if ev is None:
            return
        self.deployment_deadlines.pop(event.execution_attempt_id, None)
        if event.execution_state is ExecutionState.FAILED:
            self._fail_execution(ev, event.error or "task failed", out, suppress_restarts=False)
            return
        outcome = es.on_reported(ev.current.state, event.execution_state)
        if outcome.refused:
            self._reject(out, outcome.refused)
        if outcome.global_failure:
            self.handle_global_failure(ev, outcome.global_failure, out)
            return
        self._move(ev, outcome, out)

    def handle_task_deployment_failure(self, attempt_id: str, cause: str, out: Decisions) -> None:
        """The TaskExecutor refused the deployment: the attempt fails."""
        ev = self._current(attempt_id, out)
        if ev is not None:
            self._fail_execution(ev, cause, out, suppress_restarts=False)

    def time_out_deployments(self, out: Decisions) -> None:
        """Execution.deploy's timeout: a DEPLOYING attempt whose deadline passed is cancelled
        at its TaskExecutor and fails, so the restart strategy runs it again. The job takes
        no slot of that TaskExecutor from then on (the pool frees the attempt's slot and
        asks the ResourceManager for others elsewhere, `SlotPool.block_task_manager`): one
        that accepts work and never runs it would otherwise get every retry, its free slots
        being the ones the pool holds or the least used ones. Entries of attempts no longer
        deploying go."""
        now = out.cause.event_time
        for attempt_id, deadline in list(self.deployment_deadlines.items()):
            ev = self.graph.find(attempt_id) if self.graph else None
            if ev is None or ev.current.state is not ExecutionState.DEPLOYING:
                del self.deployment_deadlines[attempt_id]
            elif deadline <= now:
                del self.deployment_deadlines[attempt_id]
                self._time_out_deployment(ev, out)
        self._deploy_waiting(out)

    def _time_out_deployment(self, ev: ExecutionVertex, out: Decisions) -> None:
        execution = ev.current
        cause = (
            f"TimeoutException: task deployment to {execution.resource_id} not acknowledged "
            f"within {self.deployment_timeout_ms} ms (the task never reported INITIALIZING)"
        )
        self._cancel_task(ev, out)
        self.pool.block_task_manager(execution.resource_id, cause, out)
        self._fail_execution(ev, cause, out, suppress_restarts=False)

    def _current(self, attempt_id: str, out: Decisions) -> ExecutionVertex | None:
        """The vertex whose current attempt is `attempt_id`; refused (ES-8) if none is."""
        ev = self.graph.find(attempt_id) if self.graph else None
        if ev is None:
            self._reject(out, f"no current execution attempt {attempt_id}")
        return ev

    def _move(self, ev: ExecutionVertex, outcome: es.Outcome, out: Decisions) -> None:
        """Apply an attempt's move and everything that follows from it."""
        execution = ev.current
        before = execution.state
        execution.state = outcome.state
        if outcome.cancel_task:
            self._cancel_task(ev, out)
        if execution.state is before:
            return
        if execution.state is ExecutionState.FAILED:
            self._on_failure(ev, "task failed", out, suppress_restarts=False)
            return
        if execution.state in es.TERMINAL:
            self._release_execution_slot(execution, out)
        if self.status in (JobStatus.RUNNING, JobStatus.RESTARTING):
            strategy = self.scheduling_strategy
            self._schedule_all(strategy.on_execution_state_change(self.graph, ev, before), out)
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
        if request is not None and (execution.has_slot or self.pool.pending(request)):
            self._release_slot(request, out)

    # -- failures and restarts -----------------------------------------------------------

    def fail_job_vertex(self, job_vertex_id: str, cause: str, out: Decisions) -> None:
        """Every subtask of the vertex fails, and the job with it, without restarts (KV-3)."""
        for ev in self.graph.vertices[job_vertex_id].subtasks:
            self._fail_execution(ev, cause, out, suppress_restarts=True)

    def handle_global_failure(self, ev: ExecutionVertex, cause: str, out: Decisions) -> None:
        """handleGlobalFailure, as `ev`'s report revealed it: every vertex restarts, whatever
        the failover strategy (RS-5); `ev` itself is cancelled with the others."""
        self._on_failure(ev, cause, out, suppress_restarts=False, global_failure=True)

    def _fail_execution(
        self, ev: ExecutionVertex, cause: str, out: Decisions, suppress_restarts: bool
    ) -> None:
        outcome = es.fail(ev.current.state)
        if outcome.state is ev.current.state:
            return
        ev.current.state = outcome.state
        if outcome.state is ExecutionState.FAILED:
            self._on_failure(ev, cause, out, suppress_restarts)
        else:
            self._release_execution_slot(ev.current, out)
            self._check_job_done(out)

    def _on_failure(
        self, ev: ExecutionVertex, cause: str, out: Decisions, suppress_restarts: bool,
        global_failure: bool = False,
    ) -> None:  # fmt: skip
        """handleTaskFailure / handleGlobalFailure: the ExecutionFailureHandler decides what
        the failure of `ev` calls for (RS-2..RS-5, RS-9), then it is applied. A job no
        longer running or restarting only gives the failed attempt's slot back."""
        if self.status not in (JobStatus.RUNNING, JobStatus.RESTARTING):
            if ev.current.state is ExecutionState.FAILED:
                self._release_execution_slot(ev.current, out)
            self._check_job_done(out)
            return
        handler = ExecutionFailureHandler(self.graph, self.failover_strategy, self.backoff)
        now = out.cause.event_time
        if global_failure:
            result = handler.get_global_failure_handling_result(ev, cause, now)
        else:
            result = handler.get_failure_handling_result(ev, cause, now, suppress_restarts)
        self._handle_failure_result(ev, result, out)

    def _handle_failure_result(
        self, ev: ExecutionVertex, result: FailureHandlingResult, out: Decisions
    ) -> None:
        """Apply `result` to the failure of `ev`: count it; restart its vertices after the
        delay, or fail the job once every task is cancelled. The failed attempt's slot goes
        back only once the vertices to cancel are marked modified (ES-3)."""
        failed = ev.current if ev.current.state is ExecutionState.FAILED else None
        now = out.cause.event_time
        if result.counted:
            self.backoff.notify_failure(now)
        self.failure_cause = result.cause
        if result.can_restart:
            to_restart = [self.graph.vertices[vid].subtasks[i]
                          for vid, i in result.vertices_to_restart]  # fmt: skip
            self._record_modifications(to_restart)
            if failed is not None:
                self._release_execution_slot(failed, out)
            insort(self.pending_restarts, PendingRestart(
                later(now, result.restart_delay_ms),
                {(v.job_vertex_id, v.subtask_index): v.version for v in to_restart},
            ), key=_due_at)  # fmt: skip
            self.restarts += 1  # when decided, as Flink's ExecutionFailureHandler counts them
            if len(to_restart) == len(self.graph.execution_vertices()):
                self.full_restarts += 1
            self._set_status(JobStatus.RESTARTING, self.failure_cause, out)
            self._cancel(to_restart, out)
        else:
            self._record_modifications(self.graph.execution_vertices())
            if failed is not None:
                self._release_execution_slot(failed, out)
            self._set_status(JobStatus.FAILING, self.failure_cause, out)
            self.pending_restarts = []
            self._cancel(self.graph.execution_vertices(), out)
        self._check_job_done(out)

    def _record_modifications(self, vertices: list[ExecutionVertex]) -> None:
        """ExecutionVertexVersioner.recordVertexModifications: done before the vertices are
        cancelled, so no slot arriving meanwhile deploys any of them (ES-3)."""
        for ev in vertices:
            ev.version += 1

    def _cancel(self, vertices: list[ExecutionVertex], out: Decisions) -> None:
        for ev in vertices:
            outcome = es.cancel(ev.current.state)
            if outcome.state is not ev.current.state or outcome.cancel_task:
                ev.current.state = outcome.state
                if outcome.cancel_task:
                    self._cancel_task(ev, out)
                if outcome.state in es.TERMINAL:
                    self._release_execution_slot(ev.current, out)

    def _all_terminal(self, vertices: list[ExecutionVertex] | None = None) -> bool:
        vertices = self.graph.execution_vertices() if vertices is None else vertices
        return all(ev.current.state in es.TERMINAL for ev in vertices)

    def _check_job_done(self, out: Decisions) -> None:
        """Move the job on once its executions allow: FINISHED, CANCELED, FAILED, or restart."""
        if self.graph is None:
            return
        # asked after every task state a job sees: each check walks the executions only where
        # its answer can move the job, a RUNNING one from the last (the last deployed finish
        # last: an unfinished one is met first, not after all the finished ones)
        if self.status is JobStatus.RUNNING:
            vertices = reversed(self.graph.execution_vertices())
            if all(ev.current.state is ExecutionState.FINISHED for ev in vertices):
                self._end(JobStatus.FINISHED, None, out)
        elif self.status is JobStatus.RESTARTING:
            self.restart_if_due(out)
        elif self.status is JobStatus.CANCELLING and self._all_terminal():
            self._end(JobStatus.CANCELED, None, out)
        elif self.status is JobStatus.FAILING and self._all_terminal():
            self._end(JobStatus.FAILED, self.failure_cause, out)

    def _end(self, status: JobStatus, cause: str | None, out: Decisions) -> None:
        """A globally terminal status; every slot goes back (the pool closes), and every
        result partition is released."""
        self._set_status(status, cause, out)
        self.deployment_deadlines = {}
        self.deployments_waiting = []
        self.pool.close(f"job {status.value}", out)
        self._release_partitions(status, out)

    def _release_partitions(self, status: JobStatus, out: Decisions) -> None:
        """No attempt of a job that ended for good reads its results again: each TaskExecutor
        a producing attempt was deployed to releases them (Flink's JobMaster releases every
        partition it tracks when the job terminates)."""
        for resource_id in self.partition_hosts:
            out.emit(
                ResultPartitionsReleased, job_id=self.job_id, resource_id=resource_id,
                job_status=status,
            )  # fmt: skip
        self.partition_hosts = []
        self.tracked_hosts = set()

    def _vertices(self, restart: PendingRestart) -> list[ExecutionVertex]:
        """The restart's vertices in topological order, looked up by their keys: found by a
        pass over every vertex, a TimerFired failing N subtasks of a vertex one region
        each (N pending restarts, each asked on every failure) cost N^3."""
        rank = {vid: n for n, vid in enumerate(self.graph.vertices)}
        keys = sorted(restart.versions, key=lambda k: (rank[k[0]], k[1]))
        return [self.graph.vertices[vid].subtasks[i] for vid, i in keys]

    def _due(self, restart: PendingRestart, now: int) -> bool:
        """Its delay passed and its vertices were all cancelled (a rescale: every vertex);
        the time is asked first, the cheaper question that most waiting restarts fail."""
        if restart.at > now:
            return False
        return self._all_terminal(None if self.rescaled is not None else self._vertices(restart))

    def restart_if_due(self, out: Decisions) -> None:
        """Run every waiting restart that is due: a rescale installs the new graph; a failover
        resets its vertices not modified since (restartTasks) and schedules them again. The
        job is RUNNING again once no restart waits (RS-9)."""
        if self.status is not JobStatus.RESTARTING:
            return
        now = out.cause.event_time
        due = []
        for restart in self.pending_restarts:  # by due time: the first not yet due ends it
            if restart.at > now:
                break
            if self._due(restart, now):
                due.append(restart)
        if not due:
            return
        if self.rescaled is not None:
            self._install(self.rescaled)
            self.rescaled = None
            self.pending_restarts = []
        else:
            for restart in due:
                self.pending_restarts.remove(restart)
                for ev in self._vertices(restart):
                    if ev.version == restart.versions[ev.job_vertex_id, ev.subtask_index]:
                        self.graph.reset(ev, lambda v, i, n: out.derive(f"attempt/{v}/{i}/{n}"))
        if not self.pending_restarts:
            self._set_status(JobStatus.RUNNING, None, out)
        self._schedule_all(self.scheduling_strategy.restart_tasks(self.graph), out)

    def next_timer(self) -> int | None:
        """The earliest deployment deadline, or waiting restart whose vertices all ended
        (until then the end of the last one restarts them); None when none waits."""
        deadline = min(self.deployment_deadlines.values(), default=None)
        if self.status is not JobStatus.RESTARTING:
            return deadline
        ready = [r.at for r in self.pending_restarts if self._due(r, r.at)]
        return min((t for t in (*ready, deadline) if t is not None), default=None)

    # -- cancel and rescale --------------------------------------------------------------

    def cancel(self, out: Decisions) -> None:
        if self.graph is None or self.status in TERMINAL or self.status is JobStatus.CANCELLING:
            self._reject(out, f"job {self.job_id} cannot be cancelled in {self.status.value}")
            return
        self.pending_restarts = []
        self._set_status(JobStatus.CANCELLING, "cancelled by request", out)
        self._record_modifications(self.graph.execution_vertices())
        self._cancel(self.graph.execution_vertices(), out)
        self._check_job_done(out)

    def rescale(self, new_parallelism: int, vertex_id: str | None, out: Decisions) -> None:
        """A new ExecutionGraph at the new parallelism (of one vertex, or all), then a restart
        into it."""
        if self.graph is None or self.status is not JobStatus.RUNNING:
            self._reject(out, f"job {self.job_id} cannot be rescaled in {self.status.value}")
            return
        if new_parallelism <= 0:
            self._reject(out, f"parallelism must be > 0, not {new_parallelism}")
            return
        targets = [vertex_id] if vertex_id else list(self.graph.vertices)
        parallelism = dict(self.parallelism)
        parallelism.update({vid: new_parallelism for vid in targets})
        try:
            graph = self._build_graph(self.job, out, parallelism)
        except (InvalidJobGraph, KeyError) as exc:
            self._reject(out, f"cannot rescale: {exc}")
            return
        self.parallelism = parallelism
        self.rescaled = graph
        self._record_modifications(self.graph.execution_vertices())
        self.pending_restarts = [PendingRestart(out.cause.event_time, {})]
        self._set_status(JobStatus.RESTARTING, f"rescaling to {new_parallelism}", out)
        self._cancel(self.graph.execution_vertices(), out)
        self._check_job_done(out)
