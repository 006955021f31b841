"""A dead worker never hangs a job: a TaskExecutor whose runner is silent for
`heartbeat.timeout` is lost, a runner that comes back is a new instance, and either way
every task on the old instance fails and the restart strategy runs it elsewhere; a job
cancelled meanwhile ends CANCELED. The whole cluster of reducers, in one process, with the
runner's beats and reports delivered by hand in the bad orders."""

from __future__ import annotations

from jobledger.schemas.cluster import (
    TaskManagerConnectionClosed,
    TaskManagerDisconnected,
    TaskManagerHeartbeat,
    TaskManagerLost,
    TaskManagerRegistered,
)
from jobledger.schemas.jobs import JobCancellationRequested
from jobledger.schemas.rejections import EventRejected
from jobledger.schemas.tasks import TaskDeploymentRequested
from jobledger.schemas.timers import TimerFired
from jobledger.schemas.types import ExecutionState, OwnerKind

from ..support.events import assert_derived, expect, profile, rejection
from ..support.jobs import JOB, JobCluster, fixed_delay, vertex

TIMEOUT_MS = 50_000
"""Flink's `heartbeat.timeout`, the ResourceManager's default here too."""

RM_ID = "resourcemanager"


def running_on_one_of_two() -> tuple[JobCluster, TaskDeploymentRequested, str]:
    """Two TaskExecutors of one slot each; a one-task job RUNNING on one of them. Returns the
    cluster, the deployment and the other TaskExecutor."""
    cluster = JobCluster(task_executors=2, slots=1)
    cluster.submit([vertex("v", 1)], restart=fixed_delay(2, 0))
    (deployment,) = cluster.deployments()
    for state in (ExecutionState.INITIALIZING, ExecutionState.RUNNING):
        cluster.report(deployment.execution_attempt_id, state)
    other = next(f"tm-{i}" for i in range(2) if f"tm-{i}" != deployment.resource_id)
    return cluster, deployment, other


def beat(cluster: JobCluster, resource_id: str, at: int, instance: str | None = None) -> list:
    return cluster.run([
        cluster.clock(TaskManagerHeartbeat, at=at, resource_id=resource_id, instance_id=instance)
    ])  # fmt: skip


def rm_timer(cluster: JobCluster, at: int) -> list:
    return cluster.run([
        cluster.clock(TimerFired, at=at, scope=OwnerKind.RESOURCE_MANAGER, owner_id=RM_ID)
    ])  # fmt: skip


def derived_from(log: list, cause) -> list:
    return [e for e in log if e.cause_event_id == cause.event_id]


def registration_time(cluster: JobCluster, resource_id: str) -> int:
    return cluster.driver.resource_manager.task_executors[resource_id].last_heartbeat


def test_a_silent_task_executor_is_lost_after_the_timeout_and_its_task_runs_elsewhere():
    cluster, deployment, other = running_on_one_of_two()
    dead = deployment.resource_id
    silent_since = registration_time(cluster, dead)
    beat(cluster, other, at=silent_since + TIMEOUT_MS - 1)

    assert rm_timer(cluster, at=silent_since + TIMEOUT_MS)[1:] == []  # not past it yet
    log = rm_timer(cluster, at=silent_since + TIMEOUT_MS + 1)

    cause = f"The heartbeat of TaskManager with id {dead} timed out."
    assert_derived(derived_from(log, log[0]), [
        expect(TaskManagerLost, resource_id=dead, cause=cause),
        expect(TaskManagerDisconnected, job_id=JOB, resource_id=dead, cause=cause),
        expect(TaskManagerConnectionClosed, resource_id=dead, resource_manager_id=RM_ID,
               cause=cause),
    ], cause=log[0], producer="resourcemanager")  # fmt: skip
    failed = cluster.jm.graph.vertices["v"].subtasks[0].prior[0]
    assert (failed.attempt_id, failed.state) == (deployment.execution_attempt_id,
                                                 ExecutionState.FAILED)  # fmt: skip
    assert cluster.jm.scheduler.failure_cause == f"{deployment.execution_attempt_id}: {cause}"
    assert cluster.statuses()[-2:] == ["RESTARTING", "RUNNING"]  # a restart delay of 0
    again = cluster.deployments()[-1]
    assert (again.attempt_number, again.resource_id) == (1, other)
    cluster.play()
    assert cluster.statuses()[-1] == "FINISHED"


def test_a_job_cancelled_while_its_task_sits_on_a_silent_task_executor_ends_canceled():
    """Cancel always ends: the task is CANCELING until its TaskExecutor is lost, and then
    CANCELED, so the job is too, and the slot goes back."""
    cluster, deployment, _ = running_on_one_of_two()
    silent_since = registration_time(cluster, deployment.resource_id)
    cluster.run([cluster.clock(JobCancellationRequested, job_id=JOB)])
    current = cluster.jm.graph.vertices["v"].subtasks[0].current
    assert (current.state, cluster.statuses()[-1]) == (ExecutionState.CANCELING, "CANCELLING")

    rm_timer(cluster, at=silent_since + TIMEOUT_MS + 1)

    assert current.state is ExecutionState.CANCELED
    assert cluster.statuses()[-1] == "CANCELED"
    assert cluster.driver.resource_manager.free_slots() == 1  # the live one's, free again


def test_a_restarted_runner_is_a_new_instance_whose_predecessor_s_tasks_fail_at_once():
    """The runner came back within the timeout (`kill -9`, restarted with the same id): its
    registration as a new instance loses the old one first, the task there fails without
    waiting for any timeout, and what the old instance reports late changes nothing."""
    cluster, deployment, _ = running_on_one_of_two()
    rid = deployment.resource_id
    log = cluster.run([cluster.clock(
        TaskManagerRegistered, resource_id=rid, address=f"{rid}:1", number_of_slots=1,
        resource_profile=profile(1.0, 1024), instance_id="i2",
    )])  # fmt: skip

    cause = (f"TaskExecutor {rid} re-connected to the ResourceManager as instance i2, "
             "replacing instance None.")  # fmt: skip
    assert [type(e).__name__ for e in derived_from(log, log[0])] == [
        "TaskManagerLost", "TaskManagerDisconnected", "TaskManagerConnectionClosed",
        "TaskManagerRegistrationAccepted",
    ]  # fmt: skip
    assert cluster.jm.scheduler.failure_cause == f"{deployment.execution_attempt_id}: {cause}"
    assert cluster.driver.task_executors[rid].instance_id == "i2"
    assert cluster.driver.task_executors[rid].table.slots == {}

    assert cluster.statuses()[-2:] == ["RESTARTING", "RUNNING"]
    late = cluster.report(deployment.execution_attempt_id, ExecutionState.FINISHED)
    assert [type(e) for e in late] == [EventRejected]

    cluster.play()
    assert cluster.statuses()[-1] == "FINISHED"
    assert cluster.deployments()[-1].attempt_number == 1


def test_a_paused_runner_that_wakes_after_the_timeout_is_closed_and_registers_anew():
    """SIGSTOP past the timeout: the TaskExecutor is lost and its task re-run elsewhere; its
    first beat on waking closes its connection (it is not registered any more), so it
    registers again as a new instance, and its late report of the old attempt is refused."""
    cluster, deployment, other = running_on_one_of_two()
    rid = deployment.resource_id
    silent_since = registration_time(cluster, rid)
    beat(cluster, other, at=silent_since + TIMEOUT_MS)
    rm_timer(cluster, at=silent_since + TIMEOUT_MS + 1)
    assert cluster.deployments()[-1].resource_id == other

    woke = beat(cluster, rid, at=silent_since + TIMEOUT_MS + 10)
    reason = f"TaskExecutor {rid} is not registered"
    assert_derived(derived_from(woke, woke[0]), [
        rejection(woke[0], OwnerKind.RESOURCE_MANAGER, RM_ID, reason),
        expect(TaskManagerConnectionClosed, resource_id=rid, resource_manager_id=RM_ID,
               cause=reason),
    ], cause=woke[0], producer="resourcemanager")  # fmt: skip
    late = cluster.report(deployment.execution_attempt_id, ExecutionState.FINISHED)
    assert [type(e) for e in late] == [EventRejected]

    cluster.play()
    assert cluster.statuses()[-1] == "FINISHED"
    assert all(d.resource_id == other for d in cluster.deployments()[1:])
