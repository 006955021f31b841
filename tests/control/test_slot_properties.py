"""Invariants of slot management under random event sequences (hypothesis), over the whole
cluster of reducers: SlotPools, the ResourceManager and the TaskExecutors."""

from __future__ import annotations

import copy
import dataclasses
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobledger.schemas import Event
from jobledger.schemas.cluster import (
    ResourceManagerConnected,
    TaskManagerDisconnected,
    TaskManagerLost,
    TaskManagerRegistered,
)
from jobledger.schemas.jobs import (
    JobMasterLeadershipGranted,
    JobMasterLeadershipRevoked,
    JobMasterStopped,
)
from jobledger.schemas.slots import (
    AllocationFailed,
    AvailableSlotAllocationRequested,
    NewAllocatedSlotRequested,
    SlotFreeRequested,
    SlotOffered,
    SlotRequestReleased,
)
from jobledger.schemas.timers import TimerFired
from jobledger.schemas.topics import TopicRole
from jobledger.schemas.types import OwnerKind
from jobledger.services.control.driver import ReducerDriver
from jobledger.services.control.job_master import JobMasterConfig
from jobledger.services.control.resource_manager import (
    ResourceManager,
    ResourceManagerConfig,
    SlotState,
)
from jobledger.services.control.slot_pool import SlotPool, SlotPoolConfig

from ..support.events import ANY, UNKNOWN, profile

JOBS = ["job-1", "job-2"]
TMS = ["tm-1", "tm-2", "tm-3"]
PROFILES = [UNKNOWN, profile(1.0, 100), profile(4.0, 100)]

job = st.sampled_from(JOBS)
tm = st.sampled_from(TMS)
request_id = st.sampled_from(["r1", "r2", "r3", "r4"])
allocation = st.sampled_from(["x1", "x2"])  # offers of allocations nobody asked for


def _step(draw, time: int) -> dict:
    kind = draw(st.sampled_from([
        "request", "request", "request", "request", "release", "release", "tick", "tick",
        "fail", "take", "free", "offer", "register", "lost", "disconnect", "stop", "revoke",
        "start", "connect",
    ]))  # fmt: skip
    return {"kind": kind, "time": time, "job": draw(job), "tm": draw(tm),
            "req": draw(request_id), "alloc": draw(allocation),
            "profile": draw(st.sampled_from(PROFILES)), "batch": draw(st.booleans()),
            "jm": draw(st.sampled_from(["jm-a", "jm-b"]))}  # fmt: skip


PRELUDE = [{"kind": "register", "tm": t} for t in TMS] + [
    {"kind": k, "job": j, "jm": "jm-a"} for j in JOBS for k in ("start", "connect")
]


@st.composite
def scripts(draw) -> list[dict]:
    """A running cluster (every TaskExecutor registered, every job led and connected), then
    random steps."""
    n = draw(st.integers(1, 40))
    prelude = [{**_step(draw, 0), **step} for step in PRELUDE]
    return prelude + [_step(draw, 1_000 * (i + 1)) for i in range(n)]


def to_event(step: dict, n: int, driver: ReducerDriver) -> Event:
    """One scripted step as an input event; ids of real allocations are looked up."""
    head = {"event_id": f"in-{n}", "event_time": step["time"], "producer": "test"}
    j, t, kind = step["job"], step["tm"], step["kind"]
    pool = driver.pools.get(j)
    known = sorted(pool.request_of_allocation) + sorted(pool.available_slots) if pool else []
    alloc = known[n % len(known)] if known and kind in ("fail", "take", "free") else step["alloc"]
    match kind:
        case "register":
            return TaskManagerRegistered(**head, resource_id=t, address=t, number_of_slots=2,
                                         resource_profile=profile(2.0, 200))  # fmt: skip
        case "start":
            return JobMasterLeadershipGranted(**head, job_id=j, job_master_id=step["jm"])
        case "connect":
            return ResourceManagerConnected(**head, job_id=j, resource_manager_id="resourcemanager")
        case "request":
            return NewAllocatedSlotRequested(
                **head, job_id=j, slot_request_id=step["req"], resource_profile=step["profile"],
                batch_request=step["batch"], timeout_ms=5_000,
            )  # fmt: skip
        case "release":
            return SlotRequestReleased(**head, job_id=j, slot_request_id=step["req"])
        case "fail":
            return AllocationFailed(**head, job_id=j, allocation_id=alloc, cause="chaos")
        case "lost":
            return TaskManagerLost(**head, resource_id=t, cause="chaos")
        case "stop":
            return JobMasterStopped(**head, job_id=j, cause="chaos")
        case "revoke":
            return JobMasterLeadershipRevoked(**head, job_id=j, job_master_id=step["jm"])
        case "offer":
            return SlotOffered(**head, job_id=j, resource_id=t, slot_index=n % 3,
                               allocation_id=alloc, resource_profile=ANY)  # fmt: skip
        case "take":
            return AvailableSlotAllocationRequested(
                **head, job_id=j, slot_request_id=f"take-{n}", allocation_id=alloc
            )
        case "free":
            return SlotFreeRequested(**head, job_id=j, resource_id=t, allocation_id=alloc,
                                     cause="chaos")  # fmt: skip
        case "disconnect":
            return TaskManagerDisconnected(**head, job_id=j, resource_id=t, cause="chaos")
        case _:
            scope = [OwnerKind.JOB, OwnerKind.RESOURCE_MANAGER, OwnerKind.TASK_EXECUTOR][n % 3]
            owner = {OwnerKind.JOB: j, OwnerKind.TASK_EXECUTOR: t}.get(scope, "resourcemanager")
            return TimerFired(**head, scope=scope, owner_id=owner)


def run(script: list[dict], check=None, heartbeat_timeout_ms: int = 50_000) -> list[Event]:
    pool = SlotPoolConfig(idle_slot_timeout_ms=3_000, batch_slot_timeout_ms=4_000)
    driver = ReducerDriver(
        resource_manager=ResourceManager(
            ResourceManagerConfig(heartbeat_timeout_ms=heartbeat_timeout_ms)
        ),
        job_master_config=JobMasterConfig(pool=pool),
    )
    log: list[Event] = []
    for n, step in enumerate(script):
        log.extend(driver.run([to_event(step, n, driver)]))
        if check is not None:
            check(driver, step["time"])
    return log


SCOPES = {TopicRole.JOB: OwnerKind.JOB, TopicRole.RESOURCE_MANAGER: OwnerKind.RESOURCE_MANAGER,
          TopicRole.TASK_EXECUTOR: OwnerKind.TASK_EXECUTOR}  # fmt: skip
OWNERS = {TopicRole.JOB: JOBS, TopicRole.RESOURCE_MANAGER: ["resourcemanager"],
          TopicRole.TASK_EXECUTOR: TMS}  # fmt: skip


def check_only_due_timers_matter(driver: ReducerDriver, time: int) -> None:
    """A TimerFired for an owner whose deadline has not come derives nothing and changes
    nothing: so the clock may leave it out (it writes timers for `due_timers` only)."""
    for now in (time, time + 500, time + 999):
        for role, owners in OWNERS.items():
            due = driver.due_timers(role, now)
            for owner in set(owners) - set(due):
                copied = copy.deepcopy(driver)
                before = copied.to_dict()
                timer = TimerFired(event_id=f"t-{owner}-{now}", event_time=now, producer="clock",
                                   scope=SCOPES[role], owner_id=owner)  # fmt: skip
                assert copied.process(timer) == [], (owner, now)
                assert copied.to_dict() == before, (owner, now)


def check_indexes_as_rebuilt(pool: SlotPool) -> None:
    """The pool's indexes, kept up to date event by event, are those a snapshot's restore
    rebuilds from the state it keeps, each TaskManager's slots in the same order."""
    rebuilt = dataclasses.replace(pool)

    def ordered(index: dict[str, dict[str, object]]) -> dict[str, list[tuple[str, object]]]:
        return {resource_id: list(slots.items()) for resource_id, slots in index.items()}

    assert pool.pending_of_allocation == rebuilt.pending_of_allocation
    assert ordered(pool.available_on) == ordered(rebuilt.available_on)
    assert ordered(pool.allocated_on) == ordered(rebuilt.allocated_on)


def check_invariants(driver: ReducerDriver) -> None:
    for pool in driver.pools.values():
        allocated = [s.allocation_id for s in pool.allocated_slots.values()]
        available = list(pool.available_slots)
        assert len(allocated) == len(set(allocated)), "an AllocationID held by two slots"
        assert not set(allocated) & set(available), "a slot both available and allocated"
        slot_ids = [s.slot_id for s in pool.allocated_slots.values()]
        slot_ids += [s.slot_id for s, _ in pool.available_slots.values()]
        assert len(slot_ids) == len(set(slot_ids)), "a slot serving two requests"
        assert {pool.request_of_allocation[a] for a in allocated} == set(pool.allocated_slots)
        waiting = set(pool.pending_requests) | set(pool.waiting_for_resource_manager)
        assert not waiting & set(pool.allocated_slots), "a request both waiting and fulfilled"
        pending = [r.allocation_id for r in pool.pending_requests.values()]
        assert len(pending) == len(set(pending)), "two pending requests under one AllocationID"
        check_indexes_as_rebuilt(pool)
    held = Counter(a for te in driver.task_executors.values() if te.table
                   for a in te.table.slots)  # fmt: skip
    assert all(c == 1 for c in held.values()), "an AllocationID in two TaskExecutors"
    rm_slots = Counter(
        s.allocation_id
        for te in driver.resource_manager.task_executors.values()
        for s in te.slots
        if s.state in (SlotState.PENDING, SlotState.ALLOCATED)
    )
    assert all(c == 1 for c in rm_slots.values()), "the RM placed an allocation twice"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scripts())
def test_slot_invariants_hold_after_every_event(script):
    run(script, lambda driver, _: check_invariants(driver))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scripts())
def test_a_timer_that_is_not_due_changes_nothing(script):
    run(script, check_only_due_timers_matter, heartbeat_timeout_ms=2_500)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scripts())
def test_replaying_the_same_events_gives_the_same_decisions(script):
    assert run(script) == run(script)
