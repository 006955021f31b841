"""A deployment has a deadline: an attempt that does not report
INITIALIZING within `task.deployment.timeout` of its deployment fails, as Flink's
Execution.deploy fails an attempt whose `submitTask` RPC timed out, and the restart places it
on another TaskExecutor: the job takes no more slots of the one that never ran it."""

from __future__ import annotations

import time
import uuid

import pytest

from jobledger.schemas import Event, EventSerde
from jobledger.schemas.cluster import (
    JobMasterHeartbeat,
    TaskManagerHeartbeat,
    TaskManagerRegistered,
)
from jobledger.schemas.jobs import JobStatusChanged, JobSubmitted
from jobledger.schemas.slots import SlotFreeRequested, SlotRequested
from jobledger.schemas.tasks import (
    TaskCancellationRequested,
    TaskDeploymentRequested,
    TaskExecutionStateChanged,
    TaskFinalStateReported,
    TaskSubmissionAccepted,
)
from jobledger.schemas.timers import CLOCK, TimerFired
from jobledger.schemas.types import ExecutionState, JobStatus, OwnerKind
from jobledger.services.client import dispatcher
from jobledger.services.control.job_master import JobMasterConfig
from jobledger.services.control.job_status import GLOBALLY_TERMINAL
from jobledger.services.control.slot_placement import FreeSlotIndex, SlotPlacement
from jobledger.services.kafka import transactional_producer

from ..support.events import UNKNOWN, assert_derived, derived_from, expect, profile
from ..support.jobs import JM, JOB, JobCluster, fixed_delay, vertex
from ..support.runtime_harness import append, read, service_process, wait_until_owning

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

    due = tick(c, deployed_at + TIMEOUT_MS)  # 1 ms after the heartbeat: none is due
    log = c.run([due])
    _, second = c.deployments()
    assert (second.resource_id, second.attempt_number) == ("good", 1)
    cause = f"{first.execution_attempt_id}: {CAUSE}"
    assert_derived(derived_from(log, due, "jobmaster"), [
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


def test_the_deadline_of_deployments_beyond_the_first_thousand_starts_later_in_turn():
    """Decided together, 1,100 deployments are served one after another: those with at most
    1,000 ahead keep Flink's deadline, each later one starts 5 ms after the one before it
    (the P=10,000 job's last deployments failed a healthy job under load, their deadline
    counted from the decision alone). Only a job without a deployment window, or with one
    beyond 1,000, has that many unacknowledged."""
    config = JobMasterConfig(deployment_timeout_ms=TIMEOUT_MS, max_pending_deployments=0)
    c = JobCluster(task_executors=275, config=config)
    c.submit([vertex("wide", 1_100)])
    deployments = c.deployments()
    assert len(deployments) == 1_100
    deployed_at = deployments[0].event_time
    c.answer([c.state_report(d.execution_attempt_id, ExecutionState.INITIALIZING)
              for d in deployments[:1_001]])  # fmt: skip
    before = tick(c, deployed_at + TIMEOUT_MS + 4)
    assert [type(e) for e in derived_from(c.run([before]), before, "jobmaster")] == [
        JobMasterHeartbeat
    ] * 275, "the 1,002nd deployment's deadline is 5 ms after the 1,001st's"
    due = tick(c, deployed_at + TIMEOUT_MS + 5)
    cancelled = [e.execution_attempt_id for e in c.run([due])
                 if isinstance(e, TaskCancellationRequested)]  # fmt: skip
    assert cancelled[0] == deployments[1_001].execution_attempt_id


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


# -- through the real services on the real broker -------------------------------------------


@pytest.mark.broker
def test_over_the_broker_a_black_hole_task_executor_does_not_hold_the_job(cluster, tmp_path):
    """`jobledger services run` on Apache Kafka, and two TaskExecutors that are only a plain
    producer: `hole-0` (64 slots, where the first slot goes) registers, beats and never runs
    what it accepts; `good-0` runs what it is given. The job finishes on `good-0` once its
    deployment to `hole-0` timed out."""
    services = service_process(
        cluster, str(tmp_path), "--timer-interval-ms", "200", "-D", "task.deployment.timeout=3 s"
    )
    try:
        wait_until_owning(services)
        client = transactional_producer(cluster.bootstrap, f"deadline-{uuid.uuid4().hex}")
        serde = EventSerde()
        now = int(time.time() * 1000)
        append(cluster, [
            TaskManagerRegistered(event_id=uuid.uuid4().hex, event_time=now, producer="test",
                                  resource_id=rid, address=f"{rid}:1", number_of_slots=n,
                                  resource_profile=profile(1.0, 1024), instance_id=f"{rid}-i")
            for rid, n in (("hole-0", 64), ("good-0", 4))
        ])  # fmt: skip
        job_id = f"deadline-{uuid.uuid4().hex[:8]}"
        dispatcher.submit(client, cluster.prefix, JobSubmitted(
            event_id=uuid.uuid4().hex, event_time=now, producer="test", job_id=job_id,
            job_name="deadline", vertices=[vertex("only", 1)],
            restart_strategy=fixed_delay(attempts=2, delay_ms=0),
        ), serde)  # fmt: skip
        end = play_task_executors(cluster, job_id, runs={"good-0"}, limit_s=60)
    finally:
        services.terminate()
        services.wait(30)
    log = [r.event for r in read(cluster)]
    deployed = [(e.resource_id, e.attempt_number) for e in log
                if isinstance(e, TaskDeploymentRequested) and e.job_id == job_id]  # fmt: skip
    assert deployed == [("hole-0", 0), ("good-0", 1)], deployed
    restarting = [e.cause for e in log if isinstance(e, JobStatusChanged)
                  and e.job_id == job_id and e.to_status is JobStatus.RESTARTING]  # fmt: skip
    assert len(restarting) == 1 and restarting[0].endswith(
        "TimeoutException: task deployment to hole-0 not acknowledged within 3000 ms "
        "(the task never reported INITIALIZING)"
    ), restarting
    assert end is JobStatus.FINISHED


def play_task_executors(cluster, job_id: str, runs: set[str], limit_s: float) -> JobStatus | None:
    """Beat for both TaskExecutors and, for those in `runs`, run every accepted task to
    FINISHED as a runner would report it; until the job ends (its status) or `limit_s`."""
    answered: set[str] = set()
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        log = [r.event for r in read(cluster)]
        ends = [e.to_status for e in log if isinstance(e, JobStatusChanged)
                and e.job_id == job_id and e.to_status in GLOBALLY_TERMINAL]  # fmt: skip
        if ends:
            return ends[0]
        now = int(time.time() * 1000)
        out: list[Event] = [
            TaskManagerHeartbeat(event_id=uuid.uuid4().hex, event_time=now, producer="test",
                                 resource_id=rid, instance_id=f"{rid}-i")
            for rid in ("hole-0", "good-0")
        ]  # fmt: skip
        deployments = {e.execution_attempt_id: e for e in log
                       if isinstance(e, TaskDeploymentRequested)}  # fmt: skip
        for accepted in log:
            if not isinstance(accepted, TaskSubmissionAccepted) or accepted.resource_id not in runs:
                continue
            if accepted.execution_attempt_id in answered:
                continue
            answered.add(accepted.execution_attempt_id)
            d = deployments[accepted.execution_attempt_id]
            out += [
                TaskExecutionStateChanged(
                    event_id=uuid.uuid4().hex, event_time=now, producer="test", job_id=d.job_id,
                    job_master_id=d.job_master_id, execution_attempt_id=d.execution_attempt_id,
                    execution_state=state, resource_id=d.resource_id,
                )
                for state in (ExecutionState.INITIALIZING, ExecutionState.RUNNING,
                              ExecutionState.FINISHED)
            ] + [TaskFinalStateReported(
                event_id=uuid.uuid4().hex, event_time=now, producer="test", job_id=d.job_id,
                resource_id=d.resource_id, execution_attempt_id=d.execution_attempt_id,
                execution_state=ExecutionState.FINISHED,
            )]  # fmt: skip
        append(cluster, out)
        time.sleep(0.5)
    return None
