"""SlotPool: one test per rule SP-* of docs/reference/flink-rules.md (seed 002 wins where they
differ), each giving a state and one event and asserting the exact derived events, in order."""

from __future__ import annotations

import pytest

from jobledger.schemas.cluster import (
    JobManagerDisconnected,
    JobMasterHeartbeat,
    JobMasterRegistrationAccepted,
    JobMasterRegistrationDeclined,
    JobMasterRegistrationRequested,
    ResourceManagerConnected,
    ResourceManagerDisconnected,
    TaskManagerDisconnected,
)
from jobledger.schemas.jobs import (
    JobMasterLeadershipGranted,
    JobMasterLeadershipRevoked,
    JobMasterStopped,
)
from jobledger.schemas.slots import (
    AllocationFailed,
    AvailableSlotAllocationRequested,
    BatchSlotRequestTimeoutCheckDisabled,
    IdleSlotTimedOut,
    LastSlotOfTaskManagerFreed,
    NewAllocatedSlotRequested,
    SlotFreeRequested,
    SlotOfferAccepted,
    SlotOffered,
    SlotOfferRejected,
    SlotRequestCancelled,
    SlotRequested,
    SlotRequestFailed,
    SlotRequestFulfilled,
    SlotRequestReleased,
    SlotRequestTimedOut,
)
from jobledger.schemas.timers import TimerFired
from jobledger.schemas.types import AllocatedSlotInfo, OwnerKind
from jobledger.services.control.slot_pool import SlotPool, SlotPoolConfig

from ..support.events import (
    ANY,
    UNKNOWN,
    Capture,
    Clock,
    Derived,
    assert_derived,
    expect,
    profile,
    rejection,
)

JOB = "job-1"
JM = "jm-1"
TM = "tm-1"
PRODUCER = "slotpool"


class Pool:
    """A SlotPool under test with terse inputs; every method returns the derived events."""

    def __init__(self, **config: int) -> None:
        self.clock = Clock()
        self.pool = SlotPool(JOB, SlotPoolConfig(**config))

    def apply(self, cls, at=None, **fields) -> Derived:
        event = self.clock(cls, at=at, job_id=JOB, **fields)
        return Derived(self.pool.apply(event), event, PRODUCER)

    def start(self, rm: bool = True, tms: tuple[str, ...] = (TM,)) -> None:
        self.apply(JobMasterLeadershipGranted, job_master_id=JM)
        if rm:
            self.apply(ResourceManagerConnected, resource_manager_id="rm")
        for tm in tms:
            self.register(tm)

    def register(self, tm: str, jm: str | None = JM):
        return self.apply(JobMasterRegistrationRequested, job_master_id=jm, resource_id=tm)

    def request(self, req: str, prof=UNKNOWN, batch=False, timeout=10_000, at=None):
        return self.apply(
            NewAllocatedSlotRequested, at=at, slot_request_id=req, resource_profile=prof,
            batch_request=batch, timeout_ms=timeout,
        )  # fmt: skip

    def alloc(self, req: str) -> str:
        return self.pool.pending_requests[req].allocation_id

    def offer(self, alloc, tm=TM, index=0, prof=ANY, jm: str | None = JM, at=None):
        return self.apply(
            SlotOffered, at=at, job_master_id=jm, resource_id=tm, slot_index=index,
            allocation_id=alloc, resource_profile=prof,
        )  # fmt: skip

    def release(self, req: str, cause: str = "done"):
        return self.apply(SlotRequestReleased, slot_request_id=req, cause=cause)

    def fail(self, alloc: str, cause: str = "boom", unfulfillable: bool = False):
        return self.apply(
            AllocationFailed, allocation_id=alloc, cause=cause, unfulfillable=unfulfillable
        )

    def tick(self, at: int, heartbeats: bool = False) -> Derived:
        """The decisions of a timer tick; the heartbeats to TaskManagers (the last decisions
        of a tick) only if asked."""
        timer = self.clock(TimerFired, at=at, scope=OwnerKind.JOB, owner_id=JOB)
        events = self.pool.apply(timer)
        kept = [e for e in events if heartbeats or e.type_name() != "JobMasterHeartbeat"]
        return Derived(kept, timer, PRODUCER)


# the events the pool derives, whole: every field named, defaults for this job and leader


def requested(req, alloc, prof=UNKNOWN, timeout=10_000, batch=False):
    return expect(
        SlotRequested, job_id=JOB, job_master_id=JM, slot_request_id=req, allocation_id=alloc,
        resource_profile=prof, batch_request=batch, timeout_ms=timeout,
    )  # fmt: skip


def accepted(alloc, tm=TM, index=0):
    return expect(
        SlotOfferAccepted, job_id=JOB, job_master_id=JM, resource_id=tm, slot_index=index,
        allocation_id=alloc,
    )  # fmt: skip


def offer_rejected(alloc, reason, tm=TM, index=0, jm=JM):
    """A refusal answers in the name of the JobMaster the offer was addressed to."""
    return expect(
        SlotOfferRejected, job_id=JOB, job_master_id=jm, resource_id=tm, slot_index=index,
        allocation_id=alloc, reason=reason,
    )  # fmt: skip


def fulfilled(req, alloc, tm=TM, index=0):
    return expect(
        SlotRequestFulfilled, job_id=JOB, slot_request_id=req, allocation_id=alloc,
        resource_id=tm, slot_index=index,
    )  # fmt: skip


def failed(req, alloc, cause):
    return expect(
        SlotRequestFailed, job_id=JOB, slot_request_id=req, allocation_id=alloc, cause=cause
    )


def cancelled(req, alloc, cause):
    return expect(
        SlotRequestCancelled, job_id=JOB, slot_request_id=req, allocation_id=alloc, cause=cause
    )


def served(req, alloc, by):
    """The request's own allocation cancelled at the RM once another allocation served it."""
    return cancelled(req, alloc, f"slot request {req} fulfilled by allocation {by}")


def timed_out(req, alloc):
    return expect(SlotRequestTimedOut, job_id=JOB, slot_request_id=req, allocation_id=alloc)


def free(alloc, cause, tm=TM):
    return expect(SlotFreeRequested, job_id=JOB, resource_id=tm, allocation_id=alloc, cause=cause)


def rejected(events: Derived, reason: str):
    return rejection(events.cause, OwnerKind.JOB, JOB, reason)


def released(req: str) -> str:
    """The cause a released pending request fails (and is cancelled) with."""
    return f"Pending slot request with SlotRequestId {req} has been released."


@pytest.fixture
def p() -> Pool:
    pool = Pool()
    pool.start()
    return pool


def test_sp_1_request_with_rm_connected_asks_the_rm_under_a_fresh_allocation(p):
    alloc = Capture("alloc")
    assert_derived(
        p.request("r1", prof=profile(1.0, 100), timeout=5_000),
        [requested("r1", alloc, prof=profile(1.0, 100), timeout=5_000)],
    )
    assert p.pool.pending_requests["r1"].allocation_id == alloc.value


def test_sp_2_offer_fills_the_request(p):
    p.request("r1")
    a = p.alloc("r1")
    assert_derived(p.offer(a, index=3), [accepted(a, index=3), fulfilled("r1", a, index=3)])


def test_sp_3_offer_from_unregistered_tm_is_rejected_and_changes_nothing(p):
    p.request("r1")
    a = p.alloc("r1")
    before = p.pool.to_dict()
    assert_derived(
        p.offer(a, tm="stranger"),
        [offer_rejected(a, "TaskManager stranger is not registered at the job", tm="stranger")],
    )
    assert p.pool.to_dict() == before


def test_sp_4_unrequested_allocation_fills_the_first_matching_request(p):
    p.request("r1")
    a = p.alloc("r1")
    assert_derived(p.offer("x"), [accepted("x"), fulfilled("r1", "x"), served("r1", a, "x")])
    assert p.pool.allocated_slots["r1"].allocation_id == "x"
    assert_derived(p.offer(a, index=1), [accepted(a, index=1)])
    assert list(p.pool.available_slots) == [a]


def test_sp_5_no_matching_request_makes_the_slot_available_stamped_with_time(p):
    assert_derived(p.offer("x"), [accepted("x")])
    assert p.pool.available_slots["x"][1] == p.clock.now


@pytest.mark.parametrize("used", [True, False], ids=["allocated", "available"])
def test_sp_6_repeated_offer_of_the_same_slot_is_accepted_and_ignored(p, used):
    if used:
        p.request("r1")
    a = p.alloc("r1") if used else "x"
    p.offer(a)
    before = p.pool.to_dict()
    assert_derived(p.offer(a), [accepted(a)])
    assert p.pool.to_dict() == before


@pytest.mark.parametrize("used", [True, False], ids=["allocated", "available"])
def test_sp_7_same_allocation_from_another_slot_index_is_rejected(p, used):
    if used:
        p.request("r1")
    a = p.alloc("r1") if used else "x"
    p.offer(a, index=0)
    assert_derived(
        p.offer(a, index=1),
        [offer_rejected(a, f"allocation {a} is already held by slot 0 of tm-1", index=1)],
    )


def test_sp_8_same_allocation_from_another_registered_tm_is_rejected(p):
    p.register("tm-2")
    p.offer("x")
    assert_derived(
        p.offer("x", tm="tm-2"),
        [offer_rejected("x", "allocation x is already held by slot 0 of tm-1", tm="tm-2")],
    )


def test_sp_9_offers_are_answered_one_by_one_in_order(p):
    assert_derived(p.offer("a", index=0), [accepted("a", index=0)])
    assert_derived(p.offer("b", index=1), [accepted("b", index=1)])
    assert_derived(
        p.offer("a", index=2),
        [offer_rejected("a", "allocation a is already held by slot 0 of tm-1", index=2)],
    )


def test_sp_10_returning_a_slot_fills_the_next_waiting_request(p):
    p.request("r1")
    p.request("r2")
    a1, a2 = p.alloc("r1"), p.alloc("r2")
    p.offer(a1)
    assert_derived(p.release("r1"), [fulfilled("r2", a1), served("r2", a2, a1)])
    assert "r1" not in p.pool.allocated_slots


def test_a_job_of_a_named_tenant_gives_a_released_slot_back_for_the_rm_to_share(p):
    """Not SP-10: the slot goes back to the ResourceManager, which gives it to the neediest
    tenant waiting (tenants.md); r2 stays pending there."""
    p.pool.principal = "bob"
    p.request("r1")
    p.request("r2")
    a1 = p.alloc("r1")
    p.offer(a1)
    shared = "released by a job of a named tenant: the ResourceManager shares it (tenants)"
    assert_derived(p.release("r1"), [free(a1, shared)])
    assert list(p.pool.pending_requests) == ["r2"] and not p.pool.available_slots


def test_sp_11_releasing_a_pending_request_fails_it_and_cancels_it_at_the_rm(p):
    p.request("r1")
    a = p.alloc("r1")
    assert_derived(
        p.release("r1", cause="not needed"),
        [failed("r1", a, released("r1")), cancelled("r1", a, released("r1"))],
    )
    assert not p.pool.pending_requests


def test_sp_12_releasing_an_unknown_request_is_rejected_with_a_reason(p):
    events = p.release("nope")
    assert_derived(events, [rejected(events, "slot request nope is unknown to the pool")])


def test_sp_13_seed_a_released_requests_allocation_fills_the_next_request(p):
    """Seed 002 (<= 1.10) semantics: a1 fills r2, whose own allocation a2 is then cancelled at
    the RM, so the cancellations are exactly [a1, a2] (`testFulfillingSlotRequestsWith
    UnusedOfferedSlots`); a2 offered later is kept as available."""
    p.request("r1")
    p.request("r2")
    a1, a2 = p.alloc("r1"), p.alloc("r2")
    assert_derived(
        p.release("r1"), [failed("r1", a1, released("r1")), cancelled("r1", a1, released("r1"))]
    )
    assert_derived(p.offer(a1), [accepted(a1), fulfilled("r2", a1), served("r2", a2, a1)])
    assert_derived(p.offer(a2, index=1), [accepted(a2, index=1)])
    assert a2 in p.pool.available_slots


def test_sp_14_seed_an_offer_fills_the_request_waiting_on_its_allocation(p):
    p.request("r1")
    p.request("r2")
    a1, a2 = p.alloc("r1"), p.alloc("r2")
    assert_derived(p.offer(a2), [accepted(a2), fulfilled("r2", a2)])
    assert list(p.pool.pending_requests) == ["r1"] and p.alloc("r1") == a1


def test_sp_15_seed_an_unknown_allocation_fills_the_oldest_request_and_cancels_its_own(p):
    """r1 is served by x, so its own allocation a1 is cancelled at the RM; r2 stays pending."""
    p.request("r1")
    p.request("r2")
    a1 = p.alloc("r1")
    assert_derived(p.offer("x"), [accepted("x"), fulfilled("r1", "x"), served("r1", a1, "x")])
    assert list(p.pool.pending_requests) == ["r2"]


def test_sp_16_seed_a_failure_of_a_pending_allocation_fails_its_request(p):
    p.request("r1")
    p.request("r2")
    a1, a2 = p.alloc("r1"), p.alloc("r2")
    p.offer(a2)
    assert_derived(
        p.fail(a1, cause="lost"), [failed("r1", a1, "lost"), cancelled("r1", a1, "lost")]
    )


def test_sp_17_failing_a_pending_streaming_request_fails_it_with_the_cause(p):
    p.request("r1")
    a = p.alloc("r1")
    assert_derived(
        p.fail(a, cause="exactly this"),
        [failed("r1", a, "exactly this"), cancelled("r1", a, "exactly this")],
    )
    assert not p.pool.pending_requests


def test_sp_18_failing_held_slots_frees_them_and_reports_the_emptied_tm(p):
    for i in range(5):
        p.request(f"r{i}")
        p.offer(p.alloc(f"r{i}"), index=i)
    allocations = [p.pool.allocated_slots[f"r{i}"].allocation_id for i in range(5)]
    for i, a in enumerate(allocations[:4]):
        assert_derived(p.fail(a), [failed(f"r{i}", a, "boom"), free(a, "boom")])
    last = allocations[4]
    assert_derived(p.fail(last), [
        failed("r4", last, "boom"), free(last, "boom"),
        expect(LastSlotOfTaskManagerFreed, job_id=JOB, resource_id=TM),
    ])  # fmt: skip
    assert TM in p.pool.registered_task_managers


def test_sp_19_failing_an_unknown_allocation_is_rejected_and_changes_nothing(p):
    before = p.pool.to_dict()
    events = p.fail("unknown")
    assert_derived(events, [rejected(events, "allocation unknown is unknown to the pool")])
    assert p.pool.to_dict() == before


def test_sp_20_the_rm_failing_a_request_fails_it_and_cancels_the_same_allocation(p):
    p.request("r1")
    a = p.alloc("r1")
    cause = "No pooled slot available"
    assert_derived(p.fail(a, cause=cause), [failed("r1", a, cause), cancelled("r1", a, cause)])


def test_sp_21_a_request_times_out_on_the_timer_after_its_timeout(p):
    p.request("r1", timeout=1_000, at=10_000)
    a = p.alloc("r1")
    assert p.tick(10_999) == []
    assert_derived(
        p.tick(11_000), [timed_out("r1", a), cancelled("r1", a, "slot request timed out")]
    )
    assert not p.pool.pending_requests


def test_sp_22_without_rm_a_request_is_stashed_and_times_out_there():
    p = Pool()
    p.start(rm=False)
    assert p.request("r1", timeout=100, at=5_000) == []
    assert list(p.pool.waiting_for_resource_manager) == ["r1"]
    assert_derived(p.tick(5_100), [timed_out("r1", None)])
    assert not p.pool.waiting_for_resource_manager


def test_sp_23_an_offer_fulfils_a_stashed_request():
    p = Pool()
    p.start(rm=False)
    p.request("r1")
    assert_derived(p.offer("x"), [accepted("x"), fulfilled("r1", "x")])
    assert not p.pool.waiting_for_resource_manager


def test_sp_24_connecting_the_rm_sends_the_stash_in_order_with_fresh_allocations():
    p = Pool()
    p.start(rm=False)
    asked_at = [p.request(f"r{i}").cause.event_time for i in range(3)]
    events = p.apply(ResourceManagerConnected, resource_manager_id="rm")
    allocs = [Capture(f"alloc-{i}") for i in range(3)]
    assert_derived(events, [
        # the rest of each request's timeout, counted from when it was asked
        requested(f"r{i}", allocs[i], timeout=asked_at[i] + 10_000 - events.cause.event_time)
        for i in range(3)
    ])  # fmt: skip
    assert len({a.value for a in allocs}) == 3


def test_sp_25_seed_requests_complete_in_request_order_after_the_first(p):
    """Seed: the slot first serves the request waiting on its AllocationID (the last one);
    each release then hands it to the oldest waiting request."""
    for i in range(10):
        p.request(f"r{i}")
    a9 = p.alloc("r9")
    assert_derived(p.offer(a9), [accepted(a9), fulfilled("r9", a9)])
    current = "r9"
    for i in range(9):
        own = p.alloc(f"r{i}")
        assert_derived(p.release(current), [fulfilled(f"r{i}", a9), served(f"r{i}", own, a9)])
        current = f"r{i}"


def test_sp_26_rm_disconnect_keeps_sent_requests_and_stashes_new_ones(p):
    p.request("r1")
    assert p.apply(ResourceManagerDisconnected, resource_manager_id="rm", cause="gone") == []
    assert list(p.pool.pending_requests) == ["r1"]
    assert p.request("r2") == []
    assert list(p.pool.waiting_for_resource_manager) == ["r2"]


def test_sp_27_a_slot_arriving_after_its_request_timed_out_is_kept(p):
    p.request("r1", timeout=10, at=100)
    a = p.alloc("r1")
    p.tick(200)
    assert_derived(p.offer(a), [accepted(a)])
    assert a in p.pool.available_slots


def test_sp_28_allocate_available_slot_moves_it_or_is_rejected(p):
    p.offer("x")
    assert_derived(
        p.apply(AvailableSlotAllocationRequested, slot_request_id="r", allocation_id="x"),
        [fulfilled("r", "x")],
    )
    assert not p.pool.available_slots and p.pool.allocated_slots["r"].allocation_id == "x"
    events = p.apply(AvailableSlotAllocationRequested, slot_request_id="r2", allocation_id="x")
    assert_derived(events, [rejected(events, "allocation x is not an available slot")])


def test_sp_29_tm_registration_has_set_semantics(p):
    registered = expect(JobMasterRegistrationAccepted, job_id=JOB, job_master_id=JM,
                        resource_id="tm-2")  # fmt: skip
    assert_derived(p.register("tm-2"), [registered])
    assert_derived(p.register("tm-2"), [registered])
    assert list(p.pool.registered_task_managers) == [TM, "tm-2"]
    events = p.apply(TaskManagerDisconnected, resource_id="tm-9", cause="x")
    assert_derived(events, [rejected(events, "TaskManager tm-9 is not registered")])


def test_sp_30_releasing_a_tm_frees_its_slots_fails_their_requests_and_keeps_pending(p):
    p.request("r1")
    p.request("r2", prof=profile(8.0))
    a1 = p.alloc("r1")
    p.offer(a1)
    p.offer("spare", index=1, prof=profile(1.0))
    cause = "heartbeat timeout"
    assert_derived(
        p.apply(TaskManagerDisconnected, resource_id=TM, cause=cause),
        [free("spare", cause), failed("r1", a1, cause), free(a1, cause)],
    )
    assert list(p.pool.pending_requests) == ["r2"]
    assert_derived(
        p.offer("late"), [offer_rejected("late", "TaskManager tm-1 is not registered at the job")]
    )


def test_sp_31_idle_timeout_is_strictly_greater():
    p = Pool(idle_slot_timeout_ms=1_000)
    p.start()
    p.offer("s1", at=10_000)
    p.offer("s2", index=1, at=11_000)
    assert_derived(p.tick(11_001), [
        expect(IdleSlotTimedOut, job_id=JOB, resource_id=TM, allocation_id="s1"),
        free("s1", "slot idle for too long"),
    ])  # fmt: skip
    assert list(p.pool.available_slots) == ["s2"]


def test_sp_32_an_idle_slot_is_gone_from_the_pool_once_released():
    p = Pool(idle_slot_timeout_ms=10)
    p.start()
    p.offer("s1", at=100)
    p.tick(200)
    p.request("r1")
    assert "r1" in p.pool.pending_requests and not p.pool.available_slots


def test_sp_33_stopping_cancels_pending_and_frees_every_slot(p):
    p.request("r1", prof=profile(8.0))
    p.request("r2", prof=profile(8.0))
    a1, a2 = p.alloc("r1"), p.alloc("r2")
    p.offer("x", prof=profile(1.0))
    p.offer("y", index=1, prof=profile(1.0))
    assert_derived(p.apply(JobMasterStopped, cause="job finished"), [
        cancelled("r1", a1, "job finished"), cancelled("r2", a2, "job finished"),
        free("x", "SlotPool stopped: job finished"), free("y", "SlotPool stopped: job finished"),
    ])  # fmt: skip
    assert p.pool.to_dict()["registered_task_managers"] == [] and not p.pool.started


def test_sp_34_suspend_cancels_pending_and_forgets_slots_without_freeing(p):
    p.request("r1")
    p.request("r2")
    p.offer("x")
    a2 = p.alloc("r2")
    assert_derived(p.apply(JobMasterLeadershipRevoked, job_master_id=JM), [
        cancelled("r2", a2, "leadership revoked"),
        expect(JobManagerDisconnected, job_id=JOB, job_master_id=JM, resource_id=TM,
               cause="leadership revoked"),
    ])  # fmt: skip
    assert not p.pool.started and not p.pool.registered_task_managers
    assert not p.pool.available_slots and not p.pool.allocated_slots


def test_sp_35_allocated_slot_report_covers_available_and_allocated(p):
    p.request("r1")
    p.offer(p.alloc("r1"), index=0)
    p.offer("free", index=2)
    assert sorted(p.pool.create_allocated_slot_report(TM)) == sorted(
        [(0, p.pool.allocated_slots["r1"].allocation_id), (2, "free")]
    )


def test_sp_36_available_slots_carry_their_tm_utilization(p):
    p.register("tm-2")
    for i in range(2):
        p.request(f"a{i}")
        p.offer(p.alloc(f"a{i}"), index=i)
    p.offer("free-1a", index=2)
    p.offer("free-1b", index=3)
    p.request("b0")
    p.offer(p.alloc("b0"), tm="tm-2", index=0)
    for i in range(1, 4):
        p.offer(f"free-2{i}", tm="tm-2", index=i)
    utilization = {
        i["allocation_id"]: i["task_executor_utilization"]
        for i in p.pool.available_slots_information()
    }
    assert utilization["free-1a"] == utilization["free-1b"] == 0.5
    assert {utilization[f"free-2{i}"] for i in range(1, 4)} == {0.25}


def test_sp_37_a_slot_too_small_for_the_request_does_not_fill_it(p):
    p.request("big", prof=profile(4.0, 1024))
    assert_derived(p.offer("small", prof=profile(1.0, 256)), [accepted("small")])
    assert "small" in p.pool.available_slots and "big" in p.pool.pending_requests


def test_sp_38_a_batch_request_without_rm_times_out_after_the_batch_timeout():
    p = Pool(batch_slot_timeout_ms=2)
    p.start(rm=False)
    p.request("b", batch=True)
    assert p.tick(10) == []
    assert_derived(p.tick(12), [timed_out("b", None)])


@pytest.mark.parametrize("held_as", ["available", "allocated"])
def test_sp_39_batch_requests_wait_while_a_matching_slot_is_held(held_as):
    p = Pool(batch_slot_timeout_ms=100)
    p.start()
    if held_as == "allocated":
        p.request("streaming")
        p.offer(p.alloc("streaming"), prof=profile(1.0, 1024))
    else:
        p.offer("slot", prof=profile(1.0, 1024))
    for name, prof in [("b1", profile(1.0, 1024)), ("b2", UNKNOWN), ("b3", profile(0.5, 512))]:
        p.request(name, prof=prof, batch=True)
    assert p.tick(10_000) == [] and p.tick(20_000) == []
    assert {"b1", "b2", "b3"} <= set(p.pool.pending_requests)


def test_sp_40_batch_requests_ignore_ordinary_allocation_failures(p):
    p.request("b", batch=True)
    assert p.fail(p.alloc("b"), cause="ordinary") == []
    assert "b" in p.pool.pending_requests


def test_sp_41_unfulfillable_failures_fail_batch_requests(p):
    p.request("b", batch=True)
    a = p.alloc("b")
    assert_derived(
        p.fail(a, cause="never", unfulfillable=True),
        [failed("b", a, "never"), cancelled("b", a, "never")],
    )


def test_sp_42_batch_requests_time_out_once_the_matching_slot_is_gone():
    p = Pool(batch_slot_timeout_ms=1_000)
    p.start()
    p.offer("only", prof=profile(1.0, 1024))
    for name in ("b1", "b2", "b3"):
        p.request(name, prof=UNKNOWN, batch=True)
    allocs = {name: p.alloc(name) for name in ("b1", "b2", "b3")}
    p.apply(TaskManagerDisconnected, resource_id=TM, cause="released")
    assert p.tick(50_000) == []
    assert_derived(p.tick(51_001), [
        event
        for name, a in allocs.items()
        for event in (timed_out(name, a), cancelled(name, a, "slot request timed out"))
    ])  # fmt: skip


def test_sp_43_a_disabled_batch_check_never_times_out():
    p = Pool(batch_slot_timeout_ms=1)
    p.start(rm=False)
    p.apply(BatchSlotRequestTimeoutCheckDisabled)
    p.request("b", batch=True)
    assert p.tick(10) == [] and p.tick(10_000) == []


def test_sp_44_available_slots_hold_an_allocation_once_and_go_with_their_tm(p):
    p.offer("x")
    p.offer("x")
    assert list(p.pool.available_slots) == ["x"]
    p.apply(TaskManagerDisconnected, resource_id=TM, cause="gone")
    assert p.pool.slots_of(TM) == []


def test_sp_45_allocated_bookkeeping_forgets_a_tm_with_its_last_slot(p):
    p.request("r1")
    a = p.alloc("r1")
    p.offer(a)
    p.fail(a)
    assert p.pool.slots_of(TM) == [] and p.pool.holds(a) is None


def test_sp_46_releasing_a_timed_out_scheduler_request_leaves_nothing_pending(p):
    p.request("r1")
    p.release("r1")
    assert not p.pool.pending_requests and not p.pool.waiting_for_resource_manager


def test_jm_9_leadership_with_the_same_id_again_is_a_no_op(p):
    before = p.pool.to_dict()
    assert p.apply(JobMasterLeadershipGranted, job_master_id=JM) == []
    assert p.pool.to_dict() == before


def test_new_leadership_suspends_the_old_one_first(p):
    p.request("r1")
    a = p.alloc("r1")
    cause = "leadership passed to jm-2"
    assert_derived(p.apply(JobMasterLeadershipGranted, job_master_id="jm-2"), [
        cancelled("r1", a, cause),
        expect(JobManagerDisconnected, job_id=JOB, job_master_id=JM, resource_id=TM, cause=cause),
    ])  # fmt: skip
    assert p.pool.job_master_id == "jm-2" and not p.pool.pending_requests


def test_offers_and_registrations_with_a_stale_job_master_id_are_refused(p):
    stale = "JobMasterId jm-old is not the leader's"
    # in the name of the JobMaster offered to, so its TaskExecutor frees the slot (TE-7)
    assert_derived(p.offer("x", jm="jm-old"), [offer_rejected("x", stale, jm="jm-old")])
    assert_derived(p.register("tm-2", jm="jm-old"), [
        expect(JobMasterRegistrationDeclined, job_id=JOB, resource_id="tm-2", reason=stale),
    ])  # fmt: skip


def test_events_for_a_job_without_a_leader_are_rejected_with_a_reason():
    pool = SlotPool("ghost-job")
    clock = Clock()
    for event in [
        clock(NewAllocatedSlotRequested, job_id="ghost-job", slot_request_id="r"),
        clock(AllocationFailed, job_id="ghost-job", allocation_id="a", cause="x"),
        clock(SlotRequestReleased, job_id="ghost-job", slot_request_id="r"),
        clock(TaskManagerDisconnected, job_id="ghost-job", resource_id=TM, cause="x"),
    ]:
        reason = "job ghost-job has no started SlotPool (no JobMaster leader)"
        assert_derived(
            pool.apply(event), [rejection(event, OwnerKind.JOB, "ghost-job", reason)],
            cause=event, producer=PRODUCER,
        )  # fmt: skip
    offer = clock(
        SlotOffered, job_id="ghost-job", resource_id=TM, slot_index=0, allocation_id="a",
        resource_profile=ANY,
    )  # fmt: skip
    assert_derived(pool.apply(offer), [expect(
        SlotOfferRejected, job_id="ghost-job", job_master_id=None, resource_id=TM, slot_index=0,
        allocation_id="a", reason="job ghost-job has no JobMaster leader",
    )], cause=offer, producer=PRODUCER)  # fmt: skip


def test_a_duplicate_request_id_is_rejected(p):
    p.request("r1")
    events = p.request("r1")
    assert_derived(events, [rejected(events, "slot request r1 already exists")])


def test_a_slot_the_task_executor_re_allocated_supersedes_the_old_allocation(p):
    p.request("r1")
    a1 = p.alloc("r1")
    p.offer(a1, index=0)
    assert_derived(p.offer("newer", index=0), [
        accepted("newer"), failed("r1", a1, "slot 0 of tm-1 now holds allocation newer"),
    ])  # fmt: skip
    assert p.pool.holds(a1) is None and "newer" in p.pool.available_slots


def test_te_15_a_heartbeat_tells_each_tm_the_slots_the_pool_holds_there(p):
    p.register("tm-2")
    p.request("r1")
    a1 = p.alloc("r1")
    p.offer(a1, index=1)
    p.offer("spare", index=3)

    def beat(tm, *slots):
        return expect(JobMasterHeartbeat, job_id=JOB, job_master_id=JM, resource_id=tm,
                      allocated_slots=[AllocatedSlotInfo(slot_index=i, allocation_id=a)
                                       for i, a in slots])  # fmt: skip

    # available slots first, then allocated ones (the pool's slots_of order)
    assert_derived(p.tick(50_000, heartbeats=True), [beat(TM, (3, "spare"), (1, a1)), beat("tm-2")])


def beats(tms: list[str]) -> list:
    return [expect(JobMasterHeartbeat, job_id=JOB, job_master_id=JM, resource_id=tm,
                   allocated_slots=[]) for tm in tms]  # fmt: skip


def test_the_pool_heartbeats_its_tms_once_per_heartbeat_interval_not_every_tick():
    """Flink's `heartbeat.interval` (10 s): a tick of the services' clock (1 s) heartbeat every
    registered TaskManager, which at P=10,000 was 5,000 records a second. The first tick
    heartbeats, the next ones within the interval do not (and ask for no tick before it
    ends), the one at its end does; a TaskManager registered between waits for it."""
    p = Pool(heartbeat_interval_ms=10_000)
    p.start()
    assert_derived(p.tick(1_000, heartbeats=True), beats([TM]))
    assert p.pool.next_timer() == 11_000
    p.register("tm-2")
    assert_derived(p.tick(2_000, heartbeats=True), [])
    assert_derived(p.tick(10_999, heartbeats=True), [])
    assert_derived(p.tick(11_000, heartbeats=True), beats([TM, "tm-2"]))
    assert p.pool.next_timer() == 21_000


def test_a_heartbeat_interval_of_0_heartbeats_on_every_tick_as_logs_before_it_were_written():
    p = Pool(heartbeat_interval_ms=0)
    p.start()
    for at in (1_000, 1_001, 2_000):
        assert_derived(p.tick(at, heartbeats=True), beats([TM]))
        assert p.pool.next_timer() == 0
