"""The seams of the scheduler split: the SlotPool tells its SlotRequestListener what became of
each request (fulfilled, failed, timed out) once the operation that completed it is done; the
JobMaster fences an input and hands it to its Scheduler or SlotPool; a snapshot keeps the
pool wired to its scheduler."""

from __future__ import annotations

import pytest

from jobledger.schemas.cluster import JobMasterRegistrationRequested, ResourceManagerConnected
from jobledger.schemas.jobs import JobMasterLeadershipGranted, RescaleRequested
from jobledger.schemas.slots import (
    NewAllocatedSlotRequested,
    SlotOffered,
    SlotRequestFailed,
    SlotRequestFulfilled,
    SlotRequestTimedOut,
)
from jobledger.schemas.tasks import TaskExecutionStateChanged
from jobledger.schemas.timers import TimerFired
from jobledger.schemas.types import ExecutionState, OwnerKind, ScheduleMode
from jobledger.services.control.decisions import Decisions
from jobledger.services.control.slot_pool import SlotPool
from jobledger.services.host.snapshot import Snapshot, decode, encode

from ..support.events import ANY, UNKNOWN, Clock, types
from ..support.jobs import JM, JOB, JobCluster, vertex
from ..support.scheduler_golden import REDELIVERED, JobScript


class Recorder:
    """A SlotRequestListener that notes each call and how far the decisions were by then."""

    def __init__(self, pool: SlotPool, react=None) -> None:
        self.calls: list[tuple[str, str, int]] = []
        self.react = react
        pool.listener = self

    def _note(self, name: str, completion, out: Decisions) -> None:
        self.calls.append((name, completion.slot_request_id, len(out.events)))
        if self.react is not None:
            self.react(completion, out)

    def on_slot_request_fulfilled(self, fulfilled: SlotRequestFulfilled, out: Decisions) -> None:
        self._note("fulfilled", fulfilled, out)

    def on_slot_request_failed(self, failed: SlotRequestFailed, out: Decisions) -> None:
        self._note("failed", failed, out)

    def on_slot_request_timed_out(self, timed_out: SlotRequestTimedOut, out: Decisions) -> None:
        self._note("timed out", timed_out, out)


class Pool:
    """A started SlotPool with an RM and TaskManager tm-1; inputs or method calls by name."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.pool = SlotPool(JOB)
        self.apply(JobMasterLeadershipGranted, job_master_id=JM)
        self.apply(ResourceManagerConnected, resource_manager_id="rm")
        self.apply(JobMasterRegistrationRequested, job_master_id=JM, resource_id="tm-1")

    def apply(self, cls, at=None, **fields):
        return self.pool.apply(self.clock(cls, at=at, job_id=JOB, **fields))

    def call(self, method: str, *args) -> list:
        """A method of the pool, with the decisions of a timer input as the `out`."""
        out = Decisions(self.clock(TimerFired, scope=OwnerKind.JOB, owner_id=JOB), "scheduler")
        getattr(self.pool, method)(*args, out)
        return out.events

    def offer(self, allocation_id: str, index: int = 0):
        return self.apply(SlotOffered, job_master_id=JM, resource_id="tm-1", slot_index=index,
                          allocation_id=allocation_id, resource_profile=ANY)  # fmt: skip


def test_the_listener_hears_a_request_fulfilled_by_an_offer():
    p = Pool()
    heard = Recorder(p.pool)
    p.call("request_new_allocated_slot", "r1", UNKNOWN, 10_000)
    decisions = p.offer(p.pool.pending_requests["r1"].allocation_id)
    assert types(decisions) == ["SlotOfferAccepted", "SlotRequestFulfilled"]
    assert heard.calls == [("fulfilled", "r1", 2)]


def test_the_listener_hears_a_released_request_failed_after_its_cancellation_at_the_rm():
    p = Pool()
    heard = Recorder(p.pool)
    p.call("request_new_allocated_slot", "r1", UNKNOWN, 10_000)
    decisions = p.call("release_slot", "r1")
    assert types(decisions) == ["SlotRequestFailed", "SlotRequestCancelled"]
    assert heard.calls == [("failed", "r1", 2)], "told once the pool's decisions are all there"


def test_the_listener_hears_a_request_timed_out():
    p = Pool()
    heard = Recorder(p.pool)
    p.call("request_new_allocated_slot", "r1", UNKNOWN, 100)
    tick = p.clock(TimerFired, at=p.clock.now + 100, scope=OwnerKind.JOB, owner_id=JOB)
    decisions = p.pool.apply(tick)
    assert types(decisions) == ["SlotRequestTimedOut", "SlotRequestCancelled", "JobMasterHeartbeat"]
    assert heard.calls == [("timed out", "r1", 3)]


def test_an_available_slot_allocated_is_heard_at_once_and_nothing_stays_kept():
    p = Pool()
    heard = Recorder(p.pool)
    p.offer("a1")
    assert list(p.pool.available_slots) == ["a1"] and heard.calls == []
    assert types(p.call("allocate_available_slot", "r1", "a1")) == ["SlotRequestFulfilled"]
    assert heard.calls == [("fulfilled", "r1", 1)]
    assert p.pool.completed == [], "completions live within one input"


def test_a_batch_request_is_asked_of_the_rm_as_one():
    p = Pool()
    [sent] = p.call("request_new_allocated_batch_slot", "r1", UNKNOWN)
    assert sent.batch_request and sent.timeout_ms == 0


def test_what_a_nested_call_completed_is_heard_once_after_the_reaction_that_made_it():
    """The listener releasing r1's slot hands it to r2 within that nested call; it hears of r2
    once its reaction to r1 is done, from the outer call, and once. (Told from within the
    nested call, each hand-over was one call deeper: a cancel with a few hundred requests
    waiting raised RecursionError, tests/control/test_slot_hand_over.py.)"""
    p = Pool()
    for request in ("r1", "r2"):
        p.apply(NewAllocatedSlotRequested, slot_request_id=request, timeout_ms=10_000)

    def release_r1(completion, out):
        if completion.slot_request_id == "r1":
            p.pool.release_slot("r1", out)
            heard.calls.append(("reaction done", "r1", len(out.events)))

    heard = Recorder(p.pool, release_r1)
    p.offer(p.pool.pending_requests["r1"].allocation_id)
    assert [(name, request) for name, request, _ in heard.calls] == [
        ("fulfilled", "r1"), ("reaction done", "r1"), ("fulfilled", "r2"),
    ]  # fmt: skip
    assert p.pool.completed == []


def test_the_job_master_fences_a_task_report_before_the_scheduler_sees_it():
    c = JobCluster()
    c.submit([vertex("only", 1)])
    seen = []
    c.jm.scheduler.update_task_execution_state = lambda event, out: seen.append(event)
    attempt = c.deployments()[0].execution_attempt_id
    [rejected] = c.report(attempt, ExecutionState.RUNNING, job_master_id="jm-old")
    assert rejected.reason == "JobMasterId jm-old is not the leader's" and seen == []
    c.report(attempt, ExecutionState.RUNNING)
    assert [type(e) for e in seen] == [TaskExecutionStateChanged]


def test_the_job_master_hands_rescale_to_the_scheduler_and_reads_the_job_from_it():
    c = JobCluster()
    c.submit([vertex("only", 1)])
    asked = []
    c.jm.scheduler.rescale = lambda *args: asked.append(args[:2])
    c.run([c.clock(RescaleRequested, job_id=JOB, new_parallelism=3, vertex_id="only")])
    assert asked == [(3, "only")]
    assert c.jm.graph is c.jm.scheduler.graph and c.jm.status is c.jm.scheduler.status


def test_a_snapshot_keeps_the_pool_telling_the_scheduler_and_goes_on_alike():
    c = JobCluster(task_executors=1, slots=1)
    c.submit([vertex("only", 2)], mode=ScheduleMode.LAZY_FROM_SOURCES)
    restored = decode(encode(Snapshot(c.driver, 0))).driver
    jm = restored.job_masters[JOB]
    assert jm.pool.listener is jm.scheduler and jm.scheduler.pool is jm.pool
    attempt = c.deployments()[0].execution_attempt_id
    finished = c.clock(
        TaskExecutionStateChanged, job_id=JOB, job_master_id=JM, execution_attempt_id=attempt,
        execution_state=ExecutionState.FINISHED,
    )  # fmt: skip
    decided = restored.run([finished])
    assert decided == c.driver.run([finished])
    assert "TaskDeploymentRequested" in types(decided), "the freed slot went to the next attempt"
    assert restored.to_dict() == c.driver.to_dict()


def _slot_holders(cluster: JobCluster) -> dict[str, list[str]]:
    """Allocation -> the live attempts (deployed or on their way, not yet ended) holding it."""
    holders: dict[str, list[str]] = {}
    graph = cluster.jm.graph if JOB in cluster.driver.job_masters else None
    for execution in graph.executions() if graph else []:
        if execution.allocation_id and execution.state in LIVE:
            holders.setdefault(execution.allocation_id, []).append(execution.attempt_id)
    return holders


LIVE = {ExecutionState.DEPLOYING, ExecutionState.INITIALIZING, ExecutionState.RUNNING}


@pytest.mark.parametrize("seed", [*REDELIVERED, *range(40)])
def test_no_two_live_attempts_ever_hold_one_slot(seed):
    """Job seed 350 (a TaskExecutor lost while the job restarts) deployed two attempts into
    allocation 651e...: a completion a nested pool call had told was told again by the outer
    call, the scheduler took it for an outdated attempt and gave its slot away."""
    script = JobScript(seed)
    original = script.cluster.run

    def run_and_check(events):
        result = original(events)
        shared = {a: ids for a, ids in _slot_holders(script.cluster).items() if len(ids) > 1}
        assert shared == {}, f"attempts sharing a slot after {[e.type_name() for e in events]}"
        return result

    script.cluster.run = run_and_check
    script.play(30)
