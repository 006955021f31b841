"""Where every slot is and why a request waits: Flink's NoResourceAvailableException made
useful. Per job, the SlotPool's pending requests (age, profile, and the reason nothing
satisfies them), available and allocated slots; per TaskExecutor, its slots as the
ResourceManager and the TaskExecutor itself see them. Everything is read from a replayed
state and the log: ages are measured to the latest event time of the cut, not the clock."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jobledger.schemas.slots import NewAllocatedSlotRequested, SlotRequested
from jobledger.schemas.types import ResourceProfile
from jobledger.services.control.driver import ReducerDriver
from jobledger.services.control.queries import (
    PendingRequestInfo,
    TaskManagerInfo,
    TaskManagerSlot,
    TaskSlotInfo,
)
from jobledger.services.control.resource_manager import ResourceManager, SlotState
from jobledger.services.control.resource_profile import is_matching
from jobledger.services.control.slot_pool import SlotPool

from ..log.positions import Cut


def profile_text(profile: ResourceProfile) -> str:
    if profile.kind.value != "SPECIFIED":
        return profile.kind.value
    return (
        f"{profile.cpu_cores:g} cpu, {profile.task_heap_memory_mb} MB heap, "
        f"{profile.managed_memory_mb} MB managed"
    )


@dataclass
class Pending:
    """A request the pool is waiting on, and why nothing satisfies it yet."""

    job_id: str
    slot_request_id: str
    allocation_id: str | None
    profile: str
    age_ms: int | None
    reason: str


@dataclass
class SlotReport:
    as_of: dict[str, object]
    pending: list[Pending] = field(default_factory=list)
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    task_executors: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "as_of": self.as_of,
            "pending": [vars(p) for p in self.pending],
            "jobs": self.jobs,
            "task_executors": self.task_executors,
        }


def slot_report(
    driver: ReducerDriver, upto: Cut, requested_at: dict[tuple[str, str], int] | None = None
) -> SlotReport:
    """The report of the state `driver` at the cut `upto`; `requested_at` (job, request) ->
    when first asked for, if known (the log's index knows), else read from the cut."""
    requested_at = _request_times(upto) if requested_at is None else requested_at
    now = upto.time
    report = SlotReport(upto.as_of())
    rm = driver.resource_manager
    task_managers = rm.task_managers()
    seen: dict[ResourceProfile, Matching] = {}
    for job_id, jm in sorted(driver.job_masters.items()):
        pool = jm.pool
        slots = pool.slots()
        allocated = sorted((s.slot_request_id, s) for s in slots if s.slot_request_id is not None)
        report.jobs[job_id] = {
            "allocated": {
                request: f"{s.resource_id}/{s.slot_index} allocation {s.allocation_id}"
                for request, s in allocated
            },
            "available": sorted(
                f"{s.resource_id}/{s.slot_index} allocation {s.allocation_id}"
                for s in slots
                if s.slot_request_id is None
            ),
        }
        for request in pool.pending_slot_requests():
            since = requested_at.get((job_id, request.slot_request_id))
            report.pending.append(Pending(
                job_id, request.slot_request_id, request.allocation_id,
                profile_text(request.resource_profile),
                None if since is None or now is None else now - since,
                _why_pending(pool, request, rm, task_managers, seen),
            ))  # fmt: skip
    for rid in sorted(set(task_managers) | set(driver.task_executors)):
        te = task_managers.get(rid)
        own = driver.task_executors.get(rid)
        table = {s.index: s for s in own.task_slots()} if own is not None else {}
        count = len(te.slots) if te is not None else own.number_of_slots() if own else 0
        report.task_executors[rid] = [
            {
                "index": index,
                "at_resource_manager": te.slots[index].state.value if te else "NOT REGISTERED",
                "allocation": te.slots[index].allocation_id if te else None,
                "job": te.slots[index].job_id if te else None,
                "at_task_executor": _table_state(table, index),
            }
            for index in range(count)
        ]
    return report


def pending_requests(driver: ReducerDriver) -> set[tuple[str, str]]:
    """(job, slot request) of every request a pool waits on: the ones `slot_report` ages."""
    return {
        (job_id, request.slot_request_id)
        for job_id, jm in driver.job_masters.items()
        for request in jm.pool.pending_slot_requests()
    }


def _table_state(table: dict[int, TaskSlotInfo], index: int) -> str | None:
    """The TaskExecutor's own view of its slot `index` (None: free there, or no table)."""
    owner = table.get(index)
    return None if owner is None else f"{owner.state.value} to {owner.job_id}"


def _request_times(upto: Cut) -> dict[tuple[str, str], int]:
    """When each (job, request) was first asked for, as the log says."""
    times: dict[tuple[str, str], int] = {}
    for record in upto.records:
        event = record.event
        if isinstance(event, NewAllocatedSlotRequested | SlotRequested):
            times.setdefault((event.job_id, event.slot_request_id), event.event_time)
    return times


Matching = tuple[list[tuple[str, int, TaskManagerSlot]], list[str], str]


def _matching_slots(
    task_managers: dict[str, TaskManagerInfo], wanted: ResourceProfile,
    seen: dict[ResourceProfile, Matching],
) -> Matching:  # fmt: skip
    """Every slot whose TaskExecutor's profile serves `wanted`, those of them taken, and
    the taken as one text; worked out once per profile (`seen`), not once per pending
    request: thousands of requests over thousands of slots took minutes."""
    found = seen.get(wanted)
    if found is None:
        matching = [
            (rid, index, slot)
            for rid, te in sorted(task_managers.items())
            if is_matching(te.resource_profile, wanted)
            for index, slot in enumerate(te.slots)
        ]
        taken = [
            f"{rid}/{index} to {slot.job_id or '?'}" for rid, index, slot in matching
            if slot.state is not SlotState.FREE
        ]  # fmt: skip
        found = seen[wanted] = (matching, taken, ", ".join(taken))
    return found


def _why_pending(
    pool: SlotPool, request: PendingRequestInfo, rm: ResourceManager,
    task_managers: dict[str, TaskManagerInfo], seen: dict[ResourceProfile, Matching],
) -> str:  # fmt: skip
    """The first reason, in the order a person checks them, that nothing satisfies it."""
    if not request.at_resource_manager:
        return "the JobMaster is not connected to a ResourceManager: the request waits for one"
    if not task_managers:
        return "no TaskExecutor is registered at the ResourceManager"
    wanted = request.resource_profile
    matching, taken, taken_text = _matching_slots(task_managers, wanted, seen)
    if not matching:
        offered = sorted({profile_text(te.resource_profile) for te in task_managers.values()})
        if offered == ["UNKNOWN"]:
            return "every TaskExecutor's slots have an UNKNOWN profile, which serves no request"
        return (
            f"its profile ({profile_text(wanted)}) is larger than every TaskExecutor's slots "
            f"({'; '.join(offered)})"
        )
    at_rm_request = rm.slot_request(request.allocation_id or "")
    if at_rm_request is None:
        return "sent to the ResourceManager, which has not received it yet"
    if at_rm_request.assigned is not None:
        rid, index = at_rm_request.assigned
        te = task_managers.get(rid)
        if te is not None and te.slots[index].state is not SlotState.PENDING:
            lost = (
                ""
                if pool.is_connected_to_resource_manager()
                else " (the JobMaster has lost the ResourceManager)"
            )
            return (
                f"{rid} allocated slot {index} for it; waiting for its offer to reach the job "
                f"and be accepted{lost}"
            )
        return (
            f"the ResourceManager gave it slot {index} of {rid}; waiting for that TaskExecutor "
            "to allocate the slot and offer it to the job"
        )
    if len(taken) == len(matching):
        return f"all {len(matching)} matching slots are taken: {taken_text}"
    return (
        f"queued at the ResourceManager behind "
        f"{rm.requests_queued_before(request.allocation_id or '')} earlier request(s)"
    )
