"""A deployment has a deadline (issue 42, item 6): an attempt that does not report
INITIALIZING within `task.deployment.timeout` of its deployment fails, as Flink's
Execution.deploy fails an attempt whose `submitTask` RPC timed out, and the restart places it
on another TaskExecutor: the job takes no more slots of the one that never ran it."""

from __future__ import annotations

from jobledger.schemas.cluster import JobMasterHeartbeat, TaskManagerRegistered
from jobledger.schemas.jobs import JobStatusChanged
from jobledger.schemas.slots import SlotFreeRequested, SlotRequested
from jobledger.schemas.tasks import TaskCancellationRequested, TaskDeploymentRequested
from jobledger.schemas.timers import CLOCK, TimerFired
from jobledger.schemas.types import AllocatedSlotInfo, ExecutionState, JobStatus, OwnerKind
from jobledger.services.control.job_master import JobMasterConfig
from jobledger.services.control.slot_placement import FreeSlotIndex, SlotPlacement

from .events import UNKNOWN, assert_derived, derived_from, expect, profile
from .jobs import JM, JOB, JobCluster, fixed_delay, vertex

TIMEOUT_MS = 10_000
CAUSE = (
    "TimeoutException: task deployment to hole not acknowledged within 10000 ms "
    "(the task never reported INITIALIZING)"
)


def cluster() -> JobCluster:
    """`hole` (64 slots, registered first) is where the ResourceManager puts the first slot
    under either placement; `good` has 4."""
    c = JobCluster(task_executors=0, config=JobMasterConfig(deployment_timeout_ms=TIMEOUT_MS))
    c.run([
        c.clock(TaskManagerRegistered, resource_id=rid, address=f"{rid}:1", number_of_slots=n,
                resource_profile=profile(1.0, 1024))
        for rid, n in (("hole", 64), ("good", 4))
    ])  # fmt: skip
    return c


def tick(c: JobCluster, at: int) -> TimerFired:
    return c.clock(TimerFired, at=at, scope=OwnerKind.JOB, owner_id=JOB).model_copy(
        update={"producer": CLOCK}
    )


def test_an_attempt_not_initializing_in_time_fails_and_runs_elsewhere():
    c = cluster()
    c.submit([vertex("only", 1)], restart=fixed_delay(attempts=3, delay_ms=0))
    (first,) = c.deployments()
    assert first.resource_id == "hole"
    deployed_at = next(e.event_time for e in c.log if isinstance(e, TaskDeploymentRequested))

    before = tick(c, deployed_at + TIMEOUT_MS - 1)
    assert [type(e) for e in derived_from(c.run([before]), before, "jobmaster")] == [
        JobMasterHeartbeat
    ], "nothing but the pool's heartbeat before the deadline"

    due = tick(c, deployed_at + TIMEOUT_MS)
    log = c.run([due])
    _, second = c.deployments()
    assert (second.resource_id, second.attempt_number) == ("good", 1)
    cause = f"{first.execution_attempt_id}: {CAUSE}"
    assert_derived(derived_from(log, due, "jobmaster"), [
        expect(JobMasterHeartbeat, producer="slotpool", job_id=JOB, job_master_id=JM,
               resource_id="hole", allocated_slots=[AllocatedSlotInfo(
                   slot_index=first.slot_index, allocation_id=first.allocation_id)]),
        expect(TaskCancellationRequested, job_id=JOB, resource_id="hole",
               execution_attempt_id=first.execution_attempt_id),
        expect(SlotFreeRequested, producer="slotpool", job_id=JOB, resource_id="hole",
               allocation_id=first.allocation_id, cause="TaskManager hole is blocked"),
        expect(JobStatusChanged, job_id=JOB, from_status=JobStatus.RUNNING,
               to_status=JobStatus.RESTARTING, cause=cause),
        expect(JobStatusChanged, job_id=JOB, from_status=JobStatus.RESTARTING,
               to_status=JobStatus.RUNNING, cause=None),
        expect(SlotRequested, producer="slotpool", job_id=JOB, job_master_id=JM,
               slot_request_id=second.execution_attempt_id, allocation_id=second.allocation_id,
               resource_profile=UNKNOWN, timeout_ms=300_000, blocked_resource_ids=["hole"]),
    ])  # fmt: skip
    assert c.jm.failure_cause == cause
    c.play()
    assert c.statuses() == ["CREATED", "RUNNING", "RESTARTING", "RUNNING", "FINISHED"]


def test_a_report_in_time_keeps_the_attempt_and_its_deadline_goes():
    c = cluster()
    c.submit([vertex("only", 1)])
    (first,) = c.deployments()
    c.report(first.execution_attempt_id, ExecutionState.INITIALIZING)
    assert c.jm.scheduler.deployment_deadlines == {}
    c.run([tick(c, c.clock.now + 10 * TIMEOUT_MS)])
    assert c.jm.graph.execution_vertices()[0].current.state is ExecutionState.INITIALIZING
    assert c.statuses() == ["CREATED", "RUNNING"]


def test_without_restarts_the_job_fails_with_the_timeout_and_frees_the_slot():
    c = cluster()
    c.submit([vertex("only", 1)])
    c.run([tick(c, c.clock.now + TIMEOUT_MS)])
    assert c.statuses() == ["CREATED", "RUNNING", "FAILING", "FAILED"]
    assert c.jm.failure_cause.endswith(CAUSE)
    assert c.driver.resource_manager.free_slots() == 68


def test_placement_passes_over_blocked_task_executors_and_finds_none_if_all_are():
    class TE:
        def __init__(self, rid: str, registration: int, free: int, slots: int) -> None:
            self.resource_id, self.registration, self.free = rid, registration, free
            self.resource_profile, self.slots = profile(1.0, 1024), slots

        def utilization(self) -> float:
            return 1 - self.free / self.slots

    executors = {"a": TE("a", 1, 64, 64), "b": TE("b", 2, 1, 4), "c": TE("c", 3, 2, 4)}
    index = FreeSlotIndex(SlotPlacement.SPREAD)
    for te in executors.values():
        index.changed(te)
    assert index.pick(UNKNOWN, executors).resource_id == "a"
    assert index.pick(UNKNOWN, executors, ["a"]).resource_id == "c"
    assert index.pick(UNKNOWN, executors, ["a", "c"]).resource_id == "b"
    assert index.pick(UNKNOWN, executors, ["a", "b", "c"]) is None
    assert index.pick(UNKNOWN, executors).resource_id == "a", "a blocked pick changed the heaps"
