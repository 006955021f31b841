"""ResourceManager: registration, placement, waiting requests, lost TaskExecutors; each test
asserts the exact derived events, in order."""

from __future__ import annotations

import pytest

from jobledger.schemas.cluster import (
    TaskManagerConnectionClosed,
    TaskManagerDisconnected,
    TaskManagerHeartbeat,
    TaskManagerLost,
    TaskManagerRegistered,
    TaskManagerRegistrationAccepted,
)
from jobledger.schemas.slots import (
    SlotAllocated,
    SlotAllocationFailed,
    SlotAllocationRequested,
    SlotFreed,
    SlotRequestCancelled,
    SlotRequested,
)
from jobledger.schemas.timers import TimerFired
from jobledger.schemas.types import OwnerKind, SlotStatus
from jobledger.services.control.resource_manager import (
    ResourceManager,
    ResourceManagerConfig,
    SlotPlacement,
    SlotState,
)

from ..support.events import UNKNOWN, Clock, Derived, assert_derived, expect, profile, rejection

SLOT = profile(1.0, 1024)
PRODUCER = "resourcemanager"


class RM:
    def __init__(self, placement=SlotPlacement.SPREAD, heartbeat_timeout_ms=1_000) -> None:
        self.clock = Clock()
        self.rm = ResourceManager(ResourceManagerConfig("rm", placement, heartbeat_timeout_ms))

    def apply(self, cls, at=None, **fields) -> Derived:
        event = self.clock(cls, at=at, **fields)
        return Derived(self.rm.apply(event), event, PRODUCER)

    def register(self, tm: str, slots: int = 2, prof=SLOT, at=None, instance=None, report=()):
        return self.apply(
            TaskManagerRegistered, at=at, resource_id=tm, address=f"{tm}:1", number_of_slots=slots,
            resource_profile=prof, instance_id=instance, slot_report=list(report),
        )  # fmt: skip

    def request(self, alloc: str, job: str = "job", prof=UNKNOWN):
        return self.apply(
            SlotRequested, job_id=job, job_master_id="jm", slot_request_id=f"req-{alloc}",
            allocation_id=alloc, resource_profile=prof, timeout_ms=1000,
        )  # fmt: skip

    def confirm(self, event):
        return self.apply(
            SlotAllocated, resource_id=event.resource_id, slot_index=event.slot_index,
            allocation_id=event.allocation_id, job_id=event.job_id,
        )  # fmt: skip


# the events the ResourceManager derives, whole: every field named


def accepted(tm, slots=2, prof=SLOT, instance=None):
    return expect(
        TaskManagerRegistrationAccepted, resource_id=tm, resource_manager_id="rm",
        number_of_slots=slots, resource_profile=prof, instance_id=instance,
    )  # fmt: skip


def asked(alloc, tm, index, job="job", prof=UNKNOWN):
    """The request's own profile goes to the TaskExecutor, with its JobMaster's id."""
    return expect(
        SlotAllocationRequested, resource_id=tm, slot_index=index, allocation_id=alloc,
        job_id=job, resource_profile=prof, resource_manager_id="rm", job_master_id="jm",
    )  # fmt: skip


def closed(tm, cause, instance=None, replaced_by=None):
    return expect(
        TaskManagerConnectionClosed, resource_id=tm, resource_manager_id="rm", cause=cause,
        instance_id=instance, replaced_by_instance_id=replaced_by,
    )  # fmt: skip


def disconnected(job, tm, cause):
    return expect(TaskManagerDisconnected, job_id=job, resource_id=tm, cause=cause)


def rejected(events: Derived, reason: str):
    return rejection(events.cause, OwnerKind.RESOURCE_MANAGER, "rm", reason)


def test_registration_is_acknowledged_with_the_slot_table_to_build():
    rm = RM()
    assert_derived(rm.register("tm-1", slots=3), [accepted("tm-1", slots=3)])
    assert rm.rm.free_slots() == 3


def test_a_request_goes_to_a_free_matching_slot_with_the_job_master_id():
    rm = RM()
    rm.register("tm-1")
    assert_derived(rm.request("a1"), [asked("a1", "tm-1", 0)])
    assert rm.rm.task_executors["tm-1"].slots[0].state is SlotState.PENDING


@pytest.mark.parametrize(
    ("placement", "expected"),
    [(SlotPlacement.SPREAD, ["tm-1", "tm-2", "tm-1", "tm-2"]),
     (SlotPlacement.PACK, ["tm-1", "tm-1", "tm-2", "tm-2"])],
)  # fmt: skip
def test_spread_and_pack_placement(placement, expected):
    rm = RM(placement)
    rm.register("tm-1")
    rm.register("tm-2")
    for i, tm in enumerate(expected):
        # each TaskExecutor's slots are taken lowest index first
        assert_derived(rm.request(f"a{i}"), [asked(f"a{i}", tm, expected[:i].count(tm))])


def test_requests_wait_while_no_slot_is_free_and_are_served_in_order():
    rm = RM()
    rm.register("tm-1", slots=1)
    rm.request("a1")
    assert rm.request("a2") == [] and rm.request("a3") == []
    assert [r.allocation_id for r in rm.rm.waiting()] == ["a2", "a3"]
    assert_derived(
        rm.register("tm-2", slots=1), [accepted("tm-2", slots=1), asked("a2", "tm-2", 0)]
    )


def test_a_freed_slot_serves_the_oldest_waiting_request():
    rm = RM()
    rm.register("tm-1", slots=1)
    rm.confirm(rm.request("a1")[0])
    rm.request("a2")
    assert_derived(
        rm.apply(SlotFreed, resource_id="tm-1", slot_index=0, allocation_id="a1", cause="x"),
        [asked("a2", "tm-1", 0)],
    )


def test_a_request_no_slot_matches_waits_without_blocking_the_others():
    rm = RM()
    rm.register("tm-1", slots=2, prof=profile(1.0, 1024))
    assert rm.request("big", prof=profile(8.0)) == []
    assert_derived(
        rm.request("small", prof=profile(0.5, 512)),
        [asked("small", "tm-1", 0, prof=profile(0.5, 512))],
    )
    assert [r.allocation_id for r in rm.rm.waiting()] == ["big"]


def test_a_lost_task_executors_in_flight_allocations_are_re_requested_elsewhere():
    """The job whose request was in flight is told too: its TaskExecutor may have allocated
    and offered the slot before the ResourceManager heard back, and a task deployed there
    must fail, not wait for a dead process."""
    rm = RM()
    rm.register("tm-1", slots=1)
    rm.register("tm-2", slots=1)
    confirmed = rm.request("a1")
    assert_derived(confirmed, [asked("a1", "tm-1", 0)])
    rm.confirm(confirmed[0])
    assert_derived(rm.request("a2"), [asked("a2", "tm-2", 0)])  # in flight to another TM
    rm.register("tm-3", slots=1)
    assert_derived(
        rm.apply(TaskManagerLost, resource_id="tm-2", cause="killed"),
        [disconnected("job", "tm-2", "killed"), closed("tm-2", "killed"), asked("a2", "tm-3", 0)],
    )


def test_jobs_holding_slots_of_a_lost_task_executor_are_told_once_each():
    rm = RM()
    rm.register("tm-1", slots=3)
    for alloc, job in [("a1", "j1"), ("a2", "j1"), ("a3", "j2")]:
        rm.confirm(rm.request(alloc, job=job)[0])
    assert_derived(rm.apply(TaskManagerLost, resource_id="tm-1", cause="killed"), [
        disconnected("j1", "tm-1", "killed"), disconnected("j2", "tm-1", "killed"),
        closed("tm-1", "killed"),
    ])  # fmt: skip
    assert "tm-1" not in rm.rm.task_executors


def test_heartbeat_timeout_loses_the_task_executor():
    rm = RM(heartbeat_timeout_ms=1_000)
    rm.register("tm-1", at=10_000)
    rm.register("tm-2", at=10_000)
    rm.apply(TaskManagerHeartbeat, at=10_900, resource_id="tm-2")
    scope = dict(scope=OwnerKind.RESOURCE_MANAGER, owner_id="rm")
    assert rm.apply(TimerFired, at=11_000, **scope) == []
    events = rm.apply(TimerFired, at=11_001, **scope)
    cause = "The heartbeat of TaskManager with id tm-1 timed out."
    assert events.cause.event_time == 11_001
    assert_derived(
        events, [expect(TaskManagerLost, resource_id="tm-1", cause=cause), closed("tm-1", cause)]
    )
    assert list(rm.rm.task_executors) == ["tm-2"]


def test_a_heartbeat_from_an_unknown_task_executor_closes_its_connection():
    """Else a TaskExecutor the ResourceManager does not know beats, and is rejected, forever."""
    rm = RM()
    events = rm.apply(TaskManagerHeartbeat, resource_id="tm-9", instance_id="i1")
    reason = "TaskExecutor tm-9 is not registered"
    assert_derived(events, [rejected(events, reason), closed("tm-9", reason, "i1")])


def test_a_new_instance_replaces_the_old_one_whose_jobs_are_told_first():
    """Flink's registerTaskExecutor with a known ResourceID: the old registration goes
    ("re-connected"), every job with a slot there fails its tasks, then the new instance is
    registered with all its slots free, as its empty slot report says."""
    rm = RM()
    rm.register("tm-1", instance="i1")
    rm.confirm(rm.request("a1", job="j1")[0])
    events = rm.register("tm-1", instance="i2")
    cause = (
        "TaskExecutor tm-1 re-connected to the ResourceManager as instance i2, "
        "replacing instance i1."
    )
    assert_derived(events, [
        expect(TaskManagerLost, resource_id="tm-1", cause=cause), disconnected("j1", "tm-1", cause),
        closed("tm-1", cause, "i1", replaced_by="i2"), accepted("tm-1", instance="i2"),
    ])  # fmt: skip
    assert rm.rm.free_slots() == 2
    assert rm.rm.requests == {}


def test_a_task_executor_shutting_down_is_lost_at_once_but_an_earlier_instance_is_refused():
    """A runner stopping says its instance is gone (Flink's disconnectTaskManager): the jobs
    with slots there are told and nothing is placed there any more; the same word from an
    instance since replaced (an earlier run's, late) changes nothing."""
    rm = RM()
    rm.register("tm-1", instance="i1")
    rm.register("tm-1", instance="i2")
    rm.confirm(rm.request("a1", job="j1")[0])
    cause = "TaskExecutor tm-1 is shutting down."
    late = rm.apply(TaskManagerLost, resource_id="tm-1", cause=cause, instance_id="i1")
    reason = (
        "TaskManagerLost of instance i1 of TaskExecutor tm-1, which is registered as instance "
        "i2: an earlier instance's loss changes nothing"
    )
    assert_derived(late, [rejected(late, reason)])
    assert_derived(
        rm.apply(TaskManagerLost, resource_id="tm-1", cause=cause, instance_id="i2"),
        [disconnected("j1", "tm-1", cause), closed("tm-1", cause, "i2")],
    )
    assert rm.rm.task_executors == {}
    assert_derived(rm.request("a2"), [])


def test_the_same_instance_registering_again_is_acknowledged_again():
    rm = RM()
    rm.register("tm-1", instance="i1")
    rm.confirm(rm.request("a1")[0])
    assert_derived(rm.register("tm-1", instance="i1"), [accepted("tm-1", instance="i1")])
    assert rm.rm.task_executors["tm-1"].slots[0].state is SlotState.ALLOCATED


def test_a_replaced_instance_s_heartbeat_is_refused_and_keeps_nothing_alive():
    rm = RM(heartbeat_timeout_ms=1_000)
    rm.register("tm-1", at=10_000, instance="i1")
    rm.register("tm-1", at=10_100, instance="i2")
    events = rm.apply(TaskManagerHeartbeat, at=11_000, resource_id="tm-1", instance_id="i1")
    reason = "heartbeat of instance i1 of TaskExecutor tm-1, which is registered as instance i2"
    assert_derived(events, [rejected(events, reason)])
    scope = dict(scope=OwnerKind.RESOURCE_MANAGER, owner_id="rm")
    cause = "The heartbeat of TaskManager with id tm-1 timed out."
    assert_derived(rm.apply(TimerFired, at=11_101, **scope), [
        expect(TaskManagerLost, resource_id="tm-1", cause=cause), closed("tm-1", cause, "i2"),
    ])  # fmt: skip


def test_slots_a_registration_reports_allocated_are_not_given_out():
    rm = RM()
    held = SlotStatus(slot_index=1, resource_profile=SLOT, allocation_id="x", job_id="j9")
    rm.register("tm-1", instance="i1", report=[held])
    assert [s.state for s in rm.rm.task_executors["tm-1"].slots] == [
        SlotState.FREE, SlotState.OCCUPIED,
    ]  # fmt: skip
    assert_derived(rm.request("a1"), [asked("a1", "tm-1", 0)])


@pytest.mark.parametrize(
    ("indexes", "reason"),
    [
        ([2], "the slot report names a slot outside 0..1"),
        ([1, 1], "the slot report names a slot twice"),
    ],
)
def test_a_slot_report_that_cannot_describe_the_slots_is_refused(indexes, reason):
    rm = RM()
    report = [SlotStatus(slot_index=i, resource_profile=SLOT) for i in indexes]
    events = rm.register("tm-1", instance="i1", report=report)
    assert_derived(events, [rejected(events, reason)])
    assert rm.rm.task_executors == {}


def test_a_cancelled_request_stops_waiting_or_gives_its_slot_back():
    rm = RM()
    rm.register("tm-1", slots=1)
    rm.request("a1")
    rm.request("a2")
    cancel = dict(job_id="job", slot_request_id="r", cause="timeout")
    assert rm.apply(SlotRequestCancelled, allocation_id="a2", **cancel) == []
    assert rm.rm.waiting() == []
    assert rm.apply(SlotRequestCancelled, allocation_id="a1", **cancel) == []
    assert rm.rm.free_slots() == 1


def test_a_slot_occupied_elsewhere_is_marked_and_the_request_waits_again():
    rm = RM()
    rm.register("tm-1", slots=1)
    asked_for = rm.request("a1")[0]
    events = rm.apply(
        SlotAllocationFailed, resource_id="tm-1", slot_index=0, allocation_id="a1",
        job_id="job", reason="occupied",
    )  # fmt: skip
    assert events == []
    assert rm.rm.task_executors["tm-1"].slots[asked_for.slot_index].state is SlotState.OCCUPIED
    assert [r.allocation_id for r in rm.rm.waiting()] == ["a1"]


@pytest.mark.parametrize(
    ("event_cls", "fields", "reason"),
    [
        (TaskManagerHeartbeat, {}, "TaskExecutor tm-9 is not registered"),
        (TaskManagerLost, {"cause": "x"}, "TaskExecutor tm-9 is not registered"),
        (SlotFreed, {"slot_index": 0, "allocation_id": "a", "cause": "x"},
         "TaskExecutor tm-9 is not registered"),
        (SlotAllocated, {"slot_index": 0, "allocation_id": "a", "job_id": "j"},
         "TaskExecutor tm-9 is not registered"),
    ],
)  # fmt: skip
def test_events_about_unknown_task_executors_are_rejected(event_cls, fields, reason):
    rm = RM()
    events = rm.apply(event_cls, resource_id="tm-9", **fields)
    # a heartbeat's rejection also closes the connection (test above)
    closing = [closed("tm-9", reason)] if event_cls is TaskManagerHeartbeat else []
    assert_derived(events, [rejected(events, reason), *closing])


def test_unknown_allocations_and_duplicates_are_rejected():
    rm = RM()
    rm.register("tm-1", slots=1)
    events = rm.apply(
        SlotRequestCancelled, job_id="j", slot_request_id="r", allocation_id="nope", cause="x"
    )
    assert_derived(events, [rejected(events, "allocation nope has no open request")])
    rm.request("a1")
    events = rm.request("a1")
    assert_derived(events, [rejected(events, "allocation a1 was already requested")])
    events = rm.apply(SlotFreed, resource_id="tm-1", slot_index=7, allocation_id="a", cause="x")
    assert_derived(events, [rejected(events, "TaskExecutor tm-1 has no slot 7")])


@pytest.mark.parametrize("slots", [0, -3, 4097, 2**31 - 1])
def test_a_task_executor_with_an_absurd_number_of_slots_is_rejected(slots):
    rm = RM()
    events = rm.register("tm-1", slots=slots)
    assert_derived(events, [rejected(events, f"a TaskExecutor has 1 to 4096 slots, not {slots}")])
    assert rm.rm.task_executors == {}
