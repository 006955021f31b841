"""Whole-job test harness: a cluster of reducers, JobGraphs, and a stand-in task runner that
answers deployments with the task states a real runner would report."""

from __future__ import annotations

from collections.abc import Callable

from jobledger.schemas import Event
from jobledger.schemas.cluster import ResourceManagerConnected, TaskManagerRegistered
from jobledger.schemas.jobs import JobMasterLeadershipGranted, JobSubmitted
from jobledger.schemas.tasks import TaskDeploymentRequested, TaskExecutionStateChanged
from jobledger.schemas.timers import CLOCK, TimerFired
from jobledger.schemas.types import (
    DistributionPattern,
    ExecutionState,
    JobEdge,
    JobVertex,
    OwnerKind,
    RestartStrategy,
    RestartStrategyKind,
    ResultPartitionType,
    ScheduleMode,
)
from jobledger.services.control.driver import ReducerDriver
from jobledger.services.control.job_master import JobMaster, JobMasterConfig
from jobledger.services.control.resource_manager import ResourceManager

from .events import Clock, profile

JOB = "job-1"
JM = "jm-1"


def vertex(vid: str, p: int, *inputs: tuple[str, str, str], max_p: int = -1) -> JobVertex:
    """A vertex; each input is (source, ALL_TO_ALL|POINTWISE, PIPELINED|BLOCKING)."""
    return JobVertex(
        vertex_id=vid, name=vid, invokable_class_name=f"noop:{vid}", parallelism=p,
        max_parallelism=max_p,
        inputs=[JobEdge(source_vertex_id=s, distribution_pattern=DistributionPattern(d),
                        result_partition_type=ResultPartitionType(r)) for s, d, r in inputs],
    )  # fmt: skip


def fixed_delay(attempts: int, delay_ms: int) -> RestartStrategy:
    return RestartStrategy(
        kind=RestartStrategyKind.FIXED_DELAY, restart_attempts=attempts, delay_ms=delay_ms
    )


Runner = Callable[[TaskDeploymentRequested], list[ExecutionState]]


def finishes(_: TaskDeploymentRequested) -> list[ExecutionState]:
    return [ExecutionState.INITIALIZING, ExecutionState.RUNNING, ExecutionState.FINISHED]


def fails_first_attempt_of(vertex_id: str) -> Runner:
    def run(deployment: TaskDeploymentRequested) -> list[ExecutionState]:
        if deployment.vertex_id == vertex_id and deployment.attempt_number == 0:
            return [ExecutionState.INITIALIZING, ExecutionState.FAILED]
        return finishes(deployment)

    return run


class JobCluster:
    """TaskExecutors registered, a job submitted and led; `step` runs inputs to quiescence
    and answers every deployment the way `runner` says."""

    def __init__(
        self, task_executors: int = 2, slots: int = 4, config: JobMasterConfig | None = None,
        resource_manager: ResourceManager | None = None,
    ) -> None:  # fmt: skip
        self.clock = Clock()
        self.driver = ReducerDriver(
            job_master_config=config or JobMasterConfig(),
            resource_manager=resource_manager or ResourceManager(),
        )
        self.log: list[Event] = []
        self.answered: set[str] = set()
        self.run([
            self.clock(TaskManagerRegistered, resource_id=f"tm-{i}", address=f"tm-{i}:1",
                       number_of_slots=slots, resource_profile=profile(1.0, 1024))
            for i in range(task_executors)
        ])  # fmt: skip

    @property
    def jm(self) -> JobMaster:
        return self.driver.job_masters[JOB]

    def run(self, events: list[Event]) -> list[Event]:
        new = self.driver.run(events)
        self.log.extend(new)
        return new

    def submit(self, vertices: list[JobVertex], mode=ScheduleMode.EAGER, restart=None,
               lead: bool = True, job: str = JOB, principal: str | None = None,
               ) -> list[Event]:  # fmt: skip
        events: list[Event] = [self.clock(
            JobSubmitted, job_id=job, job_name="test job", vertices=vertices,
            schedule_mode=mode, restart_strategy=restart or RestartStrategy(),
            principal=principal,
        )]  # fmt: skip
        if lead:
            events += [
                self.clock(JobMasterLeadershipGranted, job_id=job, job_master_id=JM),
                self.clock(ResourceManagerConnected, job_id=job,
                           resource_manager_id="resourcemanager"),
            ]  # fmt: skip
        return self.run(events)

    def state_report(self, attempt: str, state: ExecutionState, error: str | None = None,
                     job_master_id: str | None = JM) -> TaskExecutionStateChanged:  # fmt: skip
        """A task state report, not yet run."""
        return self.clock(
            TaskExecutionStateChanged, job_id=JOB, job_master_id=job_master_id,
            execution_attempt_id=attempt, execution_state=state, error=error,
        )  # fmt: skip

    def report(self, attempt: str, state: ExecutionState, error: str | None = None,
               job_master_id: str | None = JM) -> list[Event]:  # fmt: skip
        """A task state report; returns the decisions it led to."""
        return self.run([self.state_report(attempt, state, error, job_master_id)])[1:]

    def play(self, runner: Runner = finishes, rounds: int = 10) -> None:
        """Answer every unanswered deployment, round after round, until none is left."""
        for _ in range(rounds):
            pending = [e for e in self.log if isinstance(e, TaskDeploymentRequested)
                       and e.execution_attempt_id not in self.answered]  # fmt: skip
            if not pending:
                return
            for deployment in pending:
                self.answered.add(deployment.execution_attempt_id)
            self.answer([report for d in pending for report in self.reports(d, runner)])

    def reports(self, deployment: TaskDeploymentRequested, runner: Runner) -> list[Event]:
        """The state reports the runner makes for one deployment."""
        return [
            self.clock(
                TaskExecutionStateChanged, job_id=JOB, job_master_id=JM,
                execution_attempt_id=deployment.execution_attempt_id, execution_state=state,
                error="java.lang.RuntimeException: boom" if state.value == "FAILED" else None,
            )
            for state in runner(deployment)
        ]  # fmt: skip

    def answer(self, reports: list[Event]) -> None:
        """Deliver reports one at a time, each with everything it leads to."""
        for report in reports:
            self.run([report])

    def tick(self, at: int) -> list[Event]:
        """The services' clock firing the job's timers at `at` (in its name: the services
        refuse a TimerFired anyone else writes)."""
        tick = self.clock(TimerFired, at=at, scope=OwnerKind.JOB, owner_id=JOB)
        return self.run([tick.model_copy(update={"producer": CLOCK})])

    def statuses(self) -> list[str]:
        return [e.to_status.value for e in self.log if e.type_name() == "JobStatusChanged"]

    def deployments(self) -> list[TaskDeploymentRequested]:
        return [e for e in self.log if isinstance(e, TaskDeploymentRequested)]


FULL = JobMasterConfig(failover_strategy="full")
"""`jobmanager.execution.failover-strategy: full`: every failure restarts every vertex."""
