"""A freed slot handed from request to request, however many wait, without recursion.

Cancelling a job whose slot requests are still pending frees each slot it holds; the pool gives
it to the next pending request, whose vertex is being cancelled, so the scheduler gives it back
at once, and on to the next. That hand-over used to be one nested call per request: a job of
parallelism 250 on one 4-slot TaskExecutor, cancelled, raised RecursionError and crash-looped
its partition. The pool now tells the scheduler of each completion from one loop, so the depth
of a hand-over no longer grows with the requests it passes through."""

from __future__ import annotations

from jobledger.schemas.jobs import JobCancellationRequested, JobStatusChanged
from jobledger.schemas.slots import (
    SlotFreeRequested,
    SlotRequestCancelled,
    SlotRequestFulfilled,
)
from jobledger.schemas.tasks import TaskDeploymentRequested
from jobledger.schemas.types import ExecutionState, JobStatus, ScheduleMode
from jobledger.services.control.execution_graph import MAX_SUBTASKS_PER_JOB, JobLimits
from jobledger.services.control.job_master import JobMasterConfig
from jobledger.services.control.slot_pool import SlotPoolConfig

from ..support.events import assert_derived, decision_id, derived_from, expect, types
from ..support.jobs import FULL, JOB, JobCluster, fixed_delay, vertex


def _cluster(vertices: int, parallelism: int, slots: int) -> JobCluster:
    """An EAGER job on one TaskExecutor of `slots` slots: the first `slots` subtasks hold one
    each (waiting for the others, as EAGER deploys all at once), every other one's request
    waits at the ResourceManager."""
    # a job of 100,000 subtasks, cancelled while its requests wait: above the default
    # admission limit (`jobledger.job.max-subtasks`), within the bound every graph keeps; every
    # request is sent to the ResourceManager at once (no window:
    # `jobledger.slot-pool.max-pending-requests` 0), so that the cancel withdraws them all
    config = JobMasterConfig(limits=JobLimits(max_subtasks=MAX_SUBTASKS_PER_JOB),
                             pool=SlotPoolConfig(max_pending_requests=0))  # fmt: skip
    cluster = JobCluster(task_executors=1, slots=slots, config=config)
    cluster.submit([vertex(f"v{i}", parallelism) for i in range(vertices)])
    return cluster


def _handed_over(request: str, rm_allocation: str, allocation: str, **ids: str) -> list:
    """The freed slot given to a waiting request, and that request withdrawn at the RM (with
    `ids` naming their event ids where they are not derived at the positions compared)."""
    return [
        expect(SlotRequestFulfilled, producer="slotpool", job_id=JOB, slot_request_id=request,
               allocation_id=allocation, resource_id="tm-0", slot_index=0,
               **({"event_id": ids["fulfilled"]} if ids else {})),
        expect(SlotRequestCancelled, producer="slotpool", job_id=JOB, slot_request_id=request,
               allocation_id=rm_allocation,
               cause=f"slot request {request} fulfilled by allocation {allocation}",
               **({"event_id": ids["cancelled"]} if ids else {})),
    ]  # fmt: skip


def test_a_cancelled_job_hands_its_slot_through_its_pending_requests_then_frees_it():
    cluster = _cluster(vertices=1, parallelism=4, slots=2)
    pool = cluster.jm.pool
    held = [slot.allocation_id for slot in pool.allocated_slots.values()]
    pending = [(r.slot_request_id, r.allocation_id) for r in pool.pending_requests.values()]
    assert len(held) == 2 and len(pending) == 2
    cancel = cluster.clock(JobCancellationRequested, job_id=JOB)
    cluster.run([cancel])
    assert_derived(
        derived_from(cluster.log, cancel, "jobmaster"),
        [
            expect(JobStatusChanged, job_id=JOB, from_status=JobStatus.RUNNING,
                   to_status=JobStatus.CANCELLING, cause="cancelled by request"),
            *_handed_over(*pending[0], held[0]),
            *_handed_over(*pending[1], held[0]),
            expect(JobStatusChanged, job_id=JOB, from_status=JobStatus.CANCELLING,
                   to_status=JobStatus.CANCELED),
            *[expect(SlotFreeRequested, producer="slotpool", job_id=JOB, resource_id="tm-0",
                     allocation_id=a, cause="SlotPool stopped: job CANCELED") for a in held],
        ],
    )  # fmt: skip


def test_a_job_cancelled_with_100_000_pending_requests_hands_its_slot_through_all():
    """4 vertices of 25,000 (a vertex has at most 32,768 subtasks), 4 slots: 99,996 requests
    wait. Building the job takes about as long as the cancel (each request is two decisions
    through the pool and the ResourceManager; tests/control/test_big_jobs.py bounds that cost)."""
    cluster = _cluster(vertices=4, parallelism=25_000, slots=4)
    pool = cluster.jm.pool
    held = [slot.allocation_id for slot in pool.allocated_slots.values()]
    pending = [(r.slot_request_id, r.allocation_id) for r in pool.pending_requests.values()]
    assert len(pending) == 99_996
    cancel = cluster.clock(JobCancellationRequested, job_id=JOB)
    decided = cluster.run([cancel])[1:]
    assert types(decided) == [
        "JobStatusChanged",
        *["SlotRequestFulfilled", "SlotRequestCancelled"] * 99_996,
        "JobStatusChanged",
        *["SlotFreeRequested"] * 4,
        *["SlotFreed"] * 4,
    ]
    fulfilled = [(e.slot_request_id, e.allocation_id) for e in decided[1:-9:2]]
    assert fulfilled == [(request, held[0]) for request, _ in pending], "in request order"
    first, last = decided[:3], decided[-11:-9]
    assert_derived(first, [
        expect(JobStatusChanged, job_id=JOB, from_status=JobStatus.RUNNING,
               to_status=JobStatus.CANCELLING, cause="cancelled by request"),
        *_handed_over(*pending[0], held[0]),
    ], cause=cancel, producer="jobmaster")  # fmt: skip
    at = len(decided) - 11
    ids = {"fulfilled": decision_id(cancel, at), "cancelled": decision_id(cancel, at + 1)}
    assert_derived(last, _handed_over(*pending[-1], held[0], **ids), cause=cancel)
    assert cluster.jm.status is JobStatus.CANCELED and not pool.started


def test_a_failover_of_many_vertices_waiting_for_slots_restarts_them_all():
    """Every vertex restarts (full failover) while 1,996 wait for a slot: each of the 4 freed
    slots passes through the waiting requests as they are cancelled (recursion before)."""
    cluster = JobCluster(task_executors=1, slots=4, config=FULL)
    cluster.submit([vertex("v", 2_000)], mode=ScheduleMode.LAZY_FROM_SOURCES,
                   restart=fixed_delay(1, 0))  # fmt: skip
    cluster.play(lambda _: [ExecutionState.INITIALIZING, ExecutionState.RUNNING])
    running = [d.execution_attempt_id for d in cluster.deployments()]
    assert len(running) == 4
    cluster.report(running[0], ExecutionState.FAILED, "boom")
    for attempt in running[1:]:
        cluster.report(attempt, ExecutionState.CANCELED)
    assert cluster.statuses()[-2:] == ["RESTARTING", "RUNNING"]
    redeployed = [d for d in cluster.deployments() if d.attempt_number == 1]
    assert [d.subtask_index for d in redeployed] == [0, 1, 2, 3]
    assert all(isinstance(d, TaskDeploymentRequested) for d in redeployed)
