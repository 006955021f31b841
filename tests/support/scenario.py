"""The slot-management scenario of the slot issue: 4 TaskExecutors x 4 slots, 3 jobs asking for
20 slots between them, one job finishing, one TaskExecutor lost and its slots re-requested.

Used in-process (ReducerDriver) and over the real broker; the steps are the same inputs."""

from __future__ import annotations

from collections.abc import Iterable

from jobledger.schemas import Event
from jobledger.schemas.cluster import (
    ResourceManagerConnected,
    TaskManagerLost,
    TaskManagerRegistered,
)
from jobledger.schemas.jobs import JobMasterLeadershipGranted, JobMasterStopped
from jobledger.schemas.slots import NewAllocatedSlotRequested, SlotRequestFailed

from .events import Clock, profile

TASK_EXECUTORS = ["tm-1", "tm-2", "tm-3", "tm-4"]
SLOTS = 4
DEMAND = {"job-a": 8, "job-b": 6, "job-c": 6}
SLOT_PROFILE = profile(1.0, 1024, 512)


def start_cluster(clock: Clock) -> list[Event]:
    events: list[Event] = [
        clock(
            TaskManagerRegistered,
            resource_id=tm,
            address=f"{tm}:6122",
            number_of_slots=SLOTS,
            resource_profile=SLOT_PROFILE,
        )
        for tm in TASK_EXECUTORS
    ]
    for job, slots in DEMAND.items():
        events.append(clock(JobMasterLeadershipGranted, job_id=job, job_master_id=f"jm-{job}"))
        events.append(
            clock(ResourceManagerConnected, job_id=job, resource_manager_id="resourcemanager")
        )
        events.extend(
            clock(
                NewAllocatedSlotRequested,
                job_id=job,
                slot_request_id=f"{job}/req-{i}",
                timeout_ms=3_600_000,
            )
            for i in range(slots)
        )
    return events


def finish_job_a(clock: Clock) -> list[Event]:
    return [clock(JobMasterStopped, job_id="job-a", cause="job finished")]


def lose_tm_4(clock: Clock) -> list[Event]:
    return [clock(TaskManagerLost, resource_id="tm-4", cause="TaskExecutor process killed")]


def re_request_failed(clock: Clock, log: Iterable[Event]) -> list[Event]:
    """What the JobMaster's scheduler does with a request whose slot was lost: ask again."""
    return [
        clock(
            NewAllocatedSlotRequested,
            job_id=e.job_id,
            slot_request_id=f"{e.slot_request_id}/retry",
            timeout_ms=3_600_000,
        )
        for e in log
        if isinstance(e, SlotRequestFailed) and "killed" in e.cause
    ]
