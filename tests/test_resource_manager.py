"""ResourceManager: registration, placement, waiting requests, lost TaskExecutors."""

from __future__ import annotations

import pytest

from jobledger.schemas.cluster import (
    TaskManagerConnectionClosed,
    TaskManagerHeartbeat,
    TaskManagerLost,
    TaskManagerRegistered,
)
from jobledger.schemas.slots import (
    SlotAllocated,
    SlotAllocationFailed,
    SlotFreed,
    SlotRequestCancelled,
    SlotRequested,
)
from jobledger.schemas.timers import TimerFired
from jobledger.schemas.types import OwnerKind
from jobledger.services.resource_manager import (
    ResourceManager,
    ResourceManagerConfig,
    SlotPlacement,
    SlotState,
)

from .events import UNKNOWN, Clock, profile, types

SLOT = profile(1.0, 1024)


class RM:
    def __init__(self, placement=SlotPlacement.SPREAD, heartbeat_timeout_ms=1_000) -> None:
        self.clock = Clock()
        self.rm = ResourceManager(ResourceManagerConfig("rm", placement, heartbeat_timeout_ms))

    def apply(self, cls, at=None, **fields):
        return self.rm.apply(self.clock(cls, at=at, **fields))

    def register(self, tm: str, slots: int = 2, prof=SLOT, at=None):
        return self.apply(
            TaskManagerRegistered, at=at, resource_id=tm, address=f"{tm}:1", number_of_slots=slots,
            resource_profile=prof,
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


def test_registration_is_acknowledged_with_the_slot_table_to_build():
    rm = RM()
    [accepted] = rm.register("tm-1", slots=3)
    assert accepted.type_name() == "TaskManagerRegistrationAccepted"
    assert (accepted.resource_manager_id, accepted.number_of_slots) == ("rm", 3)
    assert rm.rm.free_slots() == 3


def test_a_request_goes_to_a_free_matching_slot_with_the_job_master_id():
    rm = RM()
    rm.register("tm-1")
    [asked] = rm.request("a1")
    assert asked.type_name() == "SlotAllocationRequested"
    assert (asked.resource_id, asked.slot_index, asked.job_master_id) == ("tm-1", 0, "jm")
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
    assert [rm.request(f"a{i}")[0].resource_id for i in range(4)] == expected


def test_requests_wait_while_no_slot_is_free_and_are_served_in_order():
    rm = RM()
    rm.register("tm-1", slots=1)
    rm.request("a1")
    assert rm.request("a2") == [] and rm.request("a3") == []
    assert [r.allocation_id for r in rm.rm.waiting()] == ["a2", "a3"]
    [asked] = rm.register("tm-2", slots=1)[1:]
    assert asked.allocation_id == "a2"


def test_a_freed_slot_serves_the_oldest_waiting_request():
    rm = RM()
    rm.register("tm-1", slots=1)
    rm.confirm(rm.request("a1")[0])
    rm.request("a2")
    [asked] = rm.apply(SlotFreed, resource_id="tm-1", slot_index=0, allocation_id="a1", cause="x")
    assert (asked.allocation_id, asked.slot_index) == ("a2", 0)


def test_a_request_no_slot_matches_waits_without_blocking_the_others():
    rm = RM()
    rm.register("tm-1", slots=2, prof=profile(1.0, 1024))
    assert rm.request("big", prof=profile(8.0)) == []
    [asked] = rm.request("small", prof=profile(0.5, 512))
    assert asked.allocation_id == "small"
    assert [r.allocation_id for r in rm.rm.waiting()] == ["big"]


def test_a_lost_task_executors_in_flight_allocations_are_re_requested_elsewhere():
    rm = RM()
    rm.register("tm-1", slots=1)
    rm.register("tm-2", slots=1)
    confirmed = rm.request("a1")[0]
    rm.confirm(confirmed)
    in_flight = rm.request("a2")[0]
    assert in_flight.resource_id != confirmed.resource_id
    rm.register("tm-3", slots=1)
    events = rm.apply(TaskManagerLost, resource_id=in_flight.resource_id, cause="killed")
    assert types(events) == ["TaskManagerConnectionClosed", "SlotAllocationRequested"]
    assert (events[1].allocation_id, events[1].resource_id) == ("a2", "tm-3")


def test_jobs_holding_slots_of_a_lost_task_executor_are_told_once_each():
    rm = RM()
    rm.register("tm-1", slots=3)
    for alloc, job in [("a1", "j1"), ("a2", "j1"), ("a3", "j2")]:
        rm.confirm(rm.request(alloc, job=job)[0])
    events = rm.apply(TaskManagerLost, resource_id="tm-1", cause="killed")
    assert types(events) == ["TaskManagerDisconnected"] * 2 + ["TaskManagerConnectionClosed"]
    assert [e.job_id for e in events[:2]] == ["j1", "j2"]
    assert "tm-1" not in rm.rm.task_executors


def test_heartbeat_timeout_loses_the_task_executor():
    rm = RM(heartbeat_timeout_ms=1_000)
    rm.register("tm-1", at=10_000)
    rm.register("tm-2", at=10_000)
    rm.apply(TaskManagerHeartbeat, at=10_900, resource_id="tm-2")
    scope = dict(scope=OwnerKind.RESOURCE_MANAGER, owner_id="rm")
    assert rm.apply(TimerFired, at=11_000, **scope) == []
    lost, closed = rm.apply(TimerFired, at=11_001, **scope)
    cause = "heartbeat of TaskExecutor tm-1 timed out"
    assert (lost, closed) == (
        TaskManagerLost(event_id=lost.event_id, event_time=11_001, producer="resourcemanager",
                        cause_event_id=lost.cause_event_id, resource_id="tm-1", cause=cause),
        TaskManagerConnectionClosed(event_id=closed.event_id, event_time=11_001,
                                    producer="resourcemanager", cause_event_id=lost.cause_event_id,
                                    resource_id="tm-1", resource_manager_id="rm", cause=cause),
    )  # fmt: skip
    assert list(rm.rm.task_executors) == ["tm-2"]


def test_a_heartbeat_from_an_unknown_task_executor_closes_its_connection():
    """Else a TaskExecutor the ResourceManager does not know beats, and is rejected, forever."""
    rm = RM()
    beat = rm.clock(TaskManagerHeartbeat, resource_id="tm-9")
    rejected, closed = rm.rm.apply(beat)
    assert closed == TaskManagerConnectionClosed(
        event_id=closed.event_id, event_time=beat.event_time, producer="resourcemanager",
        cause_event_id=beat.event_id, resource_id="tm-9", resource_manager_id="rm",
        cause="TaskExecutor tm-9 is not registered",
    )  # fmt: skip
    assert (rejected.type_name(), rejected.reason) == (
        "EventRejected",
        "TaskExecutor tm-9 is not registered",
    )


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
    asked = rm.request("a1")[0]
    events = rm.apply(
        SlotAllocationFailed, resource_id="tm-1", slot_index=0, allocation_id="a1",
        job_id="job", reason="occupied",
    )  # fmt: skip
    assert events == []
    assert rm.rm.task_executors["tm-1"].slots[asked.slot_index].state is SlotState.OCCUPIED
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
    rejected = rm.apply(event_cls, resource_id="tm-9", **fields)[0]
    assert (rejected.type_name(), rejected.reason) == ("EventRejected", reason)


def test_unknown_allocations_and_duplicates_are_rejected():
    rm = RM()
    rm.register("tm-1", slots=1)
    [rejected] = rm.apply(
        SlotRequestCancelled, job_id="j", slot_request_id="r", allocation_id="nope", cause="x"
    )
    assert rejected.reason == "allocation nope has no open request"
    rm.request("a1")
    [duplicate] = rm.request("a1")
    assert duplicate.reason == "allocation a1 was already requested"
    [bad_index] = rm.apply(
        SlotFreed, resource_id="tm-1", slot_index=7, allocation_id="a", cause="x"
    )
    assert bad_index.reason == "TaskExecutor tm-1 has no slot 7"


@pytest.mark.parametrize("slots", [0, -3, 4097, 2**31 - 1])
def test_a_task_executor_with_an_absurd_number_of_slots_is_rejected(slots):
    rm = RM()
    [rejected] = rm.register("tm-1", slots=slots)
    assert rejected.reason == f"a TaskExecutor has 1 to 4096 slots, not {slots}"
    assert rm.rm.task_executors == {}
