"""SlotPool: one test per rule SP-* of flink-behavior.md (seed 002 wins where they differ),
each giving a state and one event and asserting the exact derived events, in order."""

from __future__ import annotations

import pytest

from jobledger.schemas.cluster import (
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
    NewAllocatedSlotRequested,
    SlotOffered,
    SlotRequestReleased,
)
from jobledger.schemas.timers import TimerFired
from jobledger.schemas.types import OwnerKind
from jobledger.services.slot_pool import SlotPool, SlotPoolConfig

from .events import ANY, UNKNOWN, Clock, profile, types

JOB = "job-1"
JM = "jm-1"
TM = "tm-1"


class Pool:
    """A SlotPool under test with terse inputs; every method returns the derived events."""

    def __init__(self, **config: int) -> None:
        self.clock = Clock()
        self.pool = SlotPool(JOB, SlotPoolConfig(**config))

    def apply(self, cls, at=None, **fields):
        return self.pool.apply(self.clock(cls, at=at, job_id=JOB, **fields))

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

    def tick(self, at: int, heartbeats: bool = False):
        """The decisions of a timer tick; the heartbeats to TaskManagers only if asked."""
        events = self.pool.apply(self.clock(TimerFired, at=at, scope=OwnerKind.JOB, owner_id=JOB))
        return [e for e in events if heartbeats or e.type_name() != "JobMasterHeartbeat"]


@pytest.fixture
def p() -> Pool:
    pool = Pool()
    pool.start()
    return pool


def test_sp_1_request_with_rm_connected_asks_the_rm_under_a_fresh_allocation(p):
    [sent] = p.request("r1", prof=profile(1.0, 100), timeout=5_000)
    assert sent.type_name() == "SlotRequested"
    assert (sent.slot_request_id, sent.job_master_id, sent.timeout_ms) == ("r1", JM, 5_000)
    assert sent.resource_profile == profile(1.0, 100)
    assert p.pool.pending_requests["r1"].allocation_id == sent.allocation_id


def test_sp_2_offer_fills_the_request(p):
    p.request("r1")
    a = p.alloc("r1")
    accepted, fulfilled = p.offer(a, index=3)
    assert accepted.type_name() == "SlotOfferAccepted" and accepted.allocation_id == a
    assert fulfilled.type_name() == "SlotRequestFulfilled"
    assert (fulfilled.slot_request_id, fulfilled.resource_id, fulfilled.slot_index) == ("r1", TM, 3)


def test_sp_3_offer_from_unregistered_tm_is_rejected_and_changes_nothing(p):
    p.request("r1")
    before = p.pool.to_dict()
    [rejected] = p.offer(p.alloc("r1"), tm="stranger")
    assert rejected.type_name() == "SlotOfferRejected"
    assert "stranger is not registered" in rejected.reason
    assert p.pool.to_dict() == before


def test_sp_4_unrequested_allocation_fills_the_first_matching_request(p):
    p.request("r1")
    a = p.alloc("r1")
    assert types(p.offer("x")) == ["SlotOfferAccepted", "SlotRequestFulfilled"]
    assert p.pool.allocated_slots["r1"].allocation_id == "x"
    assert types(p.offer(a, index=1)) == ["SlotOfferAccepted"]
    assert list(p.pool.available_slots) == [a]


def test_sp_5_no_matching_request_makes_the_slot_available_stamped_with_time(p):
    events = p.offer("x")
    assert types(events) == ["SlotOfferAccepted"]
    assert p.pool.available_slots["x"][1] == p.clock.now


@pytest.mark.parametrize("used", [True, False], ids=["allocated", "available"])
def test_sp_6_repeated_offer_of_the_same_slot_is_accepted_and_ignored(p, used):
    if used:
        p.request("r1")
    a = p.alloc("r1") if used else "x"
    p.offer(a)
    before = p.pool.to_dict()
    assert types(p.offer(a)) == ["SlotOfferAccepted"]
    assert p.pool.to_dict() == before


@pytest.mark.parametrize("used", [True, False], ids=["allocated", "available"])
def test_sp_7_same_allocation_from_another_slot_index_is_rejected(p, used):
    if used:
        p.request("r1")
    a = p.alloc("r1") if used else "x"
    p.offer(a, index=0)
    [rejected] = p.offer(a, index=1)
    assert rejected.type_name() == "SlotOfferRejected"
    assert "already held by slot 0 of tm-1" in rejected.reason


def test_sp_8_same_allocation_from_another_registered_tm_is_rejected(p):
    p.register("tm-2")
    p.offer("x")
    [rejected] = p.offer("x", tm="tm-2")
    assert rejected.type_name() == "SlotOfferRejected"


def test_sp_9_offers_are_answered_one_by_one_in_order(p):
    answers = [p.offer(a, index=i)[0] for i, a in enumerate(["a", "b", "a"])]
    assert [e.type_name() for e in answers] == [
        "SlotOfferAccepted", "SlotOfferAccepted", "SlotOfferRejected",
    ]  # fmt: skip


def test_sp_10_returning_a_slot_fills_the_next_waiting_request(p):
    p.request("r1")
    p.request("r2")
    a1 = p.alloc("r1")
    p.offer(a1)
    [fulfilled] = p.release("r1")
    assert fulfilled.type_name() == "SlotRequestFulfilled"
    assert (fulfilled.slot_request_id, fulfilled.allocation_id) == ("r2", a1)
    assert "r1" not in p.pool.allocated_slots


def test_sp_11_releasing_a_pending_request_fails_it_and_cancels_it_at_the_rm(p):
    p.request("r1")
    a = p.alloc("r1")
    failed, cancelled = p.release("r1", cause="not needed")
    assert failed.type_name() == "SlotRequestFailed" and failed.slot_request_id == "r1"
    assert "has been released" in failed.cause
    assert cancelled.type_name() == "SlotRequestCancelled" and cancelled.allocation_id == a
    assert not p.pool.pending_requests


def test_sp_12_releasing_an_unknown_request_is_rejected_with_a_reason(p):
    [rejected] = p.release("nope")
    assert rejected.type_name() == "EventRejected"
    assert rejected.reason == "slot request nope is unknown to the pool"


def test_sp_13_seed_a_released_requests_allocation_fills_the_next_request(p):
    """Seed 002 (<= 1.10) semantics: no orphan remapping, so only a1 is cancelled."""
    p.request("r1")
    p.request("r2")
    a1, a2 = p.alloc("r1"), p.alloc("r2")
    cancelled = [e for e in p.release("r1") if e.type_name() == "SlotRequestCancelled"]
    events = p.offer(a1)
    assert types(events) == ["SlotOfferAccepted", "SlotRequestFulfilled"]
    assert events[1].slot_request_id == "r2"
    assert [e.allocation_id for e in cancelled] == [a1]
    assert types(p.offer(a2, index=1)) == ["SlotOfferAccepted"]
    assert a2 in p.pool.available_slots


def test_sp_14_seed_an_offer_fills_the_request_waiting_on_its_allocation(p):
    p.request("r1")
    p.request("r2")
    a1, a2 = p.alloc("r1"), p.alloc("r2")
    events = p.offer(a2)
    assert events[1].slot_request_id == "r2"
    assert list(p.pool.pending_requests) == ["r1"] and p.alloc("r1") == a1


def test_sp_15_seed_an_unknown_allocation_fills_the_oldest_request_without_cancelling(p):
    p.request("r1")
    p.request("r2")
    events = p.offer("x")
    assert types(events) == ["SlotOfferAccepted", "SlotRequestFulfilled"]
    assert events[1].slot_request_id == "r1"
    assert list(p.pool.pending_requests) == ["r2"]


def test_sp_16_seed_a_failure_of_a_pending_allocation_fails_its_request(p):
    p.request("r1")
    p.request("r2")
    a1, a2 = p.alloc("r1"), p.alloc("r2")
    p.offer(a2)
    failed, cancelled = p.fail(a1, cause="lost")
    assert (failed.type_name(), failed.slot_request_id, failed.cause) == (
        "SlotRequestFailed", "r1", "lost",
    )  # fmt: skip
    assert cancelled.type_name() == "SlotRequestCancelled"


def test_sp_17_failing_a_pending_streaming_request_fails_it_with_the_cause(p):
    p.request("r1")
    events = p.fail(p.alloc("r1"), cause="exactly this")
    assert types(events) == ["SlotRequestFailed", "SlotRequestCancelled"]
    assert events[0].cause == "exactly this" and not p.pool.pending_requests


def test_sp_18_failing_held_slots_frees_them_and_reports_the_emptied_tm(p):
    for i in range(5):
        p.request(f"r{i}")
        p.offer(p.alloc(f"r{i}"), index=i)
    allocations = [p.pool.allocated_slots[f"r{i}"].allocation_id for i in range(5)]
    for a in allocations[:4]:
        assert types(p.fail(a)) == ["SlotRequestFailed", "SlotFreeRequested"]
    last = p.fail(allocations[4])
    assert types(last) == ["SlotRequestFailed", "SlotFreeRequested", "LastSlotOfTaskManagerFreed"]
    assert last[2].resource_id == TM and TM in p.pool.registered_task_managers


def test_sp_19_failing_an_unknown_allocation_is_rejected_and_changes_nothing(p):
    before = p.pool.to_dict()
    [rejected] = p.fail("unknown")
    assert rejected.reason == "allocation unknown is unknown to the pool"
    assert p.pool.to_dict() == before


def test_sp_20_the_rm_failing_a_request_fails_it_and_cancels_the_same_allocation(p):
    p.request("r1")
    a = p.alloc("r1")
    failed, cancelled = p.fail(a, cause="No pooled slot available")
    assert failed.allocation_id == cancelled.allocation_id == a


def test_sp_21_a_request_times_out_on_the_timer_after_its_timeout(p):
    p.request("r1", timeout=1_000, at=10_000)
    assert p.tick(10_999) == []
    events = p.tick(11_000)
    assert types(events) == ["SlotRequestTimedOut", "SlotRequestCancelled"]
    assert not p.pool.pending_requests


def test_sp_22_without_rm_a_request_is_stashed_and_times_out_there():
    p = Pool()
    p.start(rm=False)
    assert p.request("r1", timeout=100, at=5_000) == []
    assert list(p.pool.waiting_for_resource_manager) == ["r1"]
    [timed_out] = p.tick(5_100)
    assert timed_out.type_name() == "SlotRequestTimedOut" and timed_out.allocation_id is None
    assert not p.pool.waiting_for_resource_manager


def test_sp_23_an_offer_fulfils_a_stashed_request():
    p = Pool()
    p.start(rm=False)
    p.request("r1")
    events = p.offer("x")
    assert types(events) == ["SlotOfferAccepted", "SlotRequestFulfilled"]
    assert not p.pool.waiting_for_resource_manager


def test_sp_24_connecting_the_rm_sends_the_stash_in_order_with_fresh_allocations():
    p = Pool()
    p.start(rm=False)
    for i in range(3):
        p.request(f"r{i}")
    events = p.apply(ResourceManagerConnected, resource_manager_id="rm")
    assert types(events) == ["SlotRequested"] * 3
    assert [e.slot_request_id for e in events] == ["r0", "r1", "r2"]
    assert len({e.allocation_id for e in events}) == 3


def test_sp_25_seed_requests_complete_in_request_order_after_the_first(p):
    """Seed: the slot first serves the request waiting on its AllocationID (the last one);
    each release then hands it to the oldest waiting request."""
    for i in range(10):
        p.request(f"r{i}")
    first = p.offer(p.alloc("r9"))[1]
    order = [first.slot_request_id]
    current = first.slot_request_id
    for _ in range(9):
        [fulfilled] = p.release(current)
        order.append(fulfilled.slot_request_id)
        current = fulfilled.slot_request_id
    assert order == ["r9"] + [f"r{i}" for i in range(9)]


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
    assert types(p.offer(a)) == ["SlotOfferAccepted"]
    assert a in p.pool.available_slots


def test_sp_28_allocate_available_slot_moves_it_or_is_rejected(p):
    p.offer("x")
    [fulfilled] = p.apply(AvailableSlotAllocationRequested, slot_request_id="r", allocation_id="x")
    assert fulfilled.type_name() == "SlotRequestFulfilled"
    assert not p.pool.available_slots and p.pool.allocated_slots["r"].allocation_id == "x"
    [rejected] = p.apply(AvailableSlotAllocationRequested, slot_request_id="r2", allocation_id="x")
    assert rejected.reason == "allocation x is not an available slot"


def test_sp_29_tm_registration_has_set_semantics(p):
    assert types(p.register("tm-2")) == ["JobMasterRegistrationAccepted"]
    assert types(p.register("tm-2")) == ["JobMasterRegistrationAccepted"]
    assert list(p.pool.registered_task_managers) == [TM, "tm-2"]
    [rejected] = p.apply(TaskManagerDisconnected, resource_id="tm-9", cause="x")
    assert rejected.reason == "TaskManager tm-9 is not registered"


def test_sp_30_releasing_a_tm_frees_its_slots_fails_their_requests_and_keeps_pending(p):
    p.request("r1")
    p.request("r2", prof=profile(8.0))
    a1 = p.alloc("r1")
    p.offer(a1)
    p.offer("spare", index=1, prof=profile(1.0))
    events = p.apply(TaskManagerDisconnected, resource_id=TM, cause="heartbeat timeout")
    assert types(events) == ["SlotFreeRequested", "SlotRequestFailed", "SlotFreeRequested"]
    assert [e.allocation_id for e in events] == ["spare", a1, a1]
    assert list(p.pool.pending_requests) == ["r2"]
    assert types(p.offer("late")) == ["SlotOfferRejected"]


def test_sp_31_idle_timeout_is_strictly_greater():
    p = Pool(idle_slot_timeout_ms=1_000)
    p.start()
    p.offer("s1", at=10_000)
    p.offer("s2", index=1, at=11_000)
    events = p.tick(11_001)
    assert types(events) == ["IdleSlotTimedOut", "SlotFreeRequested"]
    assert events[0].allocation_id == "s1" and list(p.pool.available_slots) == ["s2"]


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
    p.offer("x", prof=profile(1.0))
    p.offer("y", index=1, prof=profile(1.0))
    events = p.apply(JobMasterStopped, cause="job finished")
    assert types(events) == ["SlotRequestCancelled"] * 2 + ["SlotFreeRequested"] * 2
    assert [e.allocation_id for e in events[2:]] == ["x", "y"]
    assert p.pool.to_dict()["registered_task_managers"] == [] and not p.pool.started


def test_sp_34_suspend_cancels_pending_and_forgets_slots_without_freeing(p):
    p.request("r1")
    p.request("r2")
    p.offer("x")
    events = p.apply(JobMasterLeadershipRevoked, job_master_id=JM)
    assert types(events) == ["SlotRequestCancelled", "JobManagerDisconnected"]
    assert "SlotFreeRequested" not in types(events)
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
    events = p.offer("small", prof=profile(1.0, 256))
    assert types(events) == ["SlotOfferAccepted"]
    assert "small" in p.pool.available_slots and "big" in p.pool.pending_requests


def test_sp_38_a_batch_request_without_rm_times_out_after_the_batch_timeout():
    p = Pool(batch_slot_timeout_ms=2)
    p.start(rm=False)
    p.request("b", batch=True)
    assert p.tick(10) == []
    [timed_out] = p.tick(12)
    assert timed_out.type_name() == "SlotRequestTimedOut"


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
    events = p.fail(p.alloc("b"), cause="never", unfulfillable=True)
    assert types(events) == ["SlotRequestFailed", "SlotRequestCancelled"]


def test_sp_42_batch_requests_time_out_once_the_matching_slot_is_gone():
    p = Pool(batch_slot_timeout_ms=1_000)
    p.start()
    p.offer("only", prof=profile(1.0, 1024))
    for name in ("b1", "b2", "b3"):
        p.request(name, prof=UNKNOWN, batch=True)
    p.apply(TaskManagerDisconnected, resource_id=TM, cause="released")
    assert p.tick(50_000) == []
    events = p.tick(51_001)
    assert types(events) == ["SlotRequestTimedOut", "SlotRequestCancelled"] * 3


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
    events = p.apply(JobMasterLeadershipGranted, job_master_id="jm-2")
    assert types(events) == ["SlotRequestCancelled", "JobManagerDisconnected"]
    assert p.pool.job_master_id == "jm-2" and not p.pool.pending_requests


def test_offers_and_registrations_with_a_stale_job_master_id_are_refused(p):
    [rejected] = p.offer("x", jm="jm-old")
    assert rejected.reason == "JobMasterId jm-old is not the leader's"
    [declined] = p.register("tm-2", jm="jm-old")
    assert declined.type_name() == "JobMasterRegistrationDeclined"


def test_events_for_a_job_without_a_leader_are_rejected_with_a_reason():
    pool = SlotPool("ghost-job")
    clock = Clock()
    for event in [
        clock(NewAllocatedSlotRequested, job_id="ghost-job", slot_request_id="r"),
        clock(AllocationFailed, job_id="ghost-job", allocation_id="a", cause="x"),
        clock(SlotRequestReleased, job_id="ghost-job", slot_request_id="r"),
        clock(TaskManagerDisconnected, job_id="ghost-job", resource_id=TM, cause="x"),
    ]:
        [rejected] = pool.apply(event)
        assert rejected.type_name() == "EventRejected"
        assert rejected.reason == "job ghost-job has no started SlotPool (no JobMaster leader)"
        assert rejected.rejected_event_id == event.event_id
    offer = clock(
        SlotOffered, job_id="ghost-job", resource_id=TM, slot_index=0, allocation_id="a",
        resource_profile=ANY,
    )  # fmt: skip
    assert types(pool.apply(offer)) == ["SlotOfferRejected"]


def test_a_duplicate_request_id_is_rejected(p):
    p.request("r1")
    [rejected] = p.request("r1")
    assert rejected.reason == "slot request r1 already exists"


def test_a_slot_the_task_executor_re_allocated_supersedes_the_old_allocation(p):
    p.request("r1")
    a1 = p.alloc("r1")
    p.offer(a1, index=0)
    events = p.offer("newer", index=0)
    assert types(events) == ["SlotOfferAccepted", "SlotRequestFailed"]
    assert events[1].slot_request_id == "r1"
    assert "slot 0 of tm-1 now holds allocation newer" in events[1].cause
    assert p.pool.holds(a1) is None and "newer" in p.pool.available_slots


def test_te_15_every_tick_heartbeats_each_tm_with_the_slots_the_pool_holds_there(p):
    p.register("tm-2")
    p.request("r1")
    a1 = p.alloc("r1")
    p.offer(a1, index=1)
    p.offer("spare", index=3)
    beats = p.tick(50_000, heartbeats=True)
    assert types(beats) == ["JobMasterHeartbeat", "JobMasterHeartbeat"]
    assert [b.resource_id for b in beats] == [TM, "tm-2"]
    assert {(i.slot_index, i.allocation_id) for i in beats[0].allocated_slots} == {
        (1, a1), (3, "spare"),
    }  # fmt: skip
    assert beats[1].allocated_slots == [] and beats[0].job_master_id == JM
