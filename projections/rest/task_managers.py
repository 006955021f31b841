"""TaskManagers as Flink's REST API shows them (`/taskmanagers`, `/taskmanagers/:tmid`): each
TaskExecutor the ResourceManager or the log knows, its slots (total, free, allocated to which
job), as of a `ClusterArchive`. A TaskExecutor that has a slot table but is not registered at
the ResourceManager is listed too (`registered: false`), since that is what a person debugging
needs to see."""

from __future__ import annotations

from typing import Any

from jobledger.schemas.types import ResourceProfile
from jobledger.services.control.queries import TaskManagerInfo

from ..debugging.slots import profile_text, slot_report
from .archived_execution_graph import ClusterArchive


class UnknownTaskManager(LookupError):
    """No TaskExecutor of that resource id; the message names those there are."""


def _resource(profile: ResourceProfile | None, slots: int) -> dict[str, Any]:
    """Flink's ResourceProfileInfo of `slots` slots of `profile` (UNKNOWN: zeros)."""
    specified = profile is not None and profile.kind.value == "SPECIFIED"
    return {
        "cpuCores": profile.cpu_cores * slots if specified else 0.0,
        "taskHeapMemory": profile.task_heap_memory_mb * slots if specified else 0,
        "taskOffHeapMemory": 0,
        "managedMemory": profile.managed_memory_mb * slots if specified else 0,
        "networkMemory": 0,
        "extendedResources": {},
    }


def _info(archive: ClusterArchive, rid: str, slots: list[dict[str, Any]]) -> dict[str, Any]:
    te: TaskManagerInfo | None = archive.driver.resource_manager.task_manager(rid)
    profile = te.resource_profile if te else None
    free = sum(1 for s in slots if s["at_resource_manager"] == "FREE")
    now = archive.cut.time
    return {
        "id": rid,
        "path": te.address if te else "",
        "dataPort": -1,
        "jmxPort": -1,
        "timeSinceLastHeartbeat": (now - te.last_heartbeat) if te and now is not None else -1,
        "slotsNumber": len(slots),
        "freeSlots": free,
        "totalResource": _resource(profile, len(slots)),
        "freeResource": _resource(profile, free),
        "hardware": {"cpuCores": -1, "physicalMemory": -1, "freeMemory": -1, "managedMemory": -1},
        "blocked": False,
        "registered": te is not None,
        "slot-profile": profile_text(profile) if profile else "UNKNOWN",
    }


def task_managers(archive: ClusterArchive) -> dict[str, Any]:
    """`/taskmanagers`."""
    report = slot_report(archive.driver, archive.cut)
    return {
        "taskmanagers": [_info(archive, rid, s) for rid, s in report.task_executors.items()],
        "as-of": archive.as_of(),
    }


def task_manager(archive: ClusterArchive, rid: str) -> dict[str, Any]:
    """`/taskmanagers/:tmid`: the TaskExecutor and each of its slots, as the ResourceManager
    and the TaskExecutor's own slot table see it."""
    report = slot_report(archive.driver, archive.cut)
    slots = report.task_executors.get(rid)
    if slots is None:
        known = ", ".join(report.task_executors) or "none"
        raise UnknownTaskManager(
            f"no TaskManager {rid!r} as of {archive.cut.position} (TaskManagers: {known})"
        )
    te = archive.driver.resource_manager.task_manager(rid)
    profile = _resource(te.resource_profile if te else None, 1)
    return {
        **_info(archive, rid, slots),
        "metrics": {},
        "allocatedSlots": [
            {
                "index": s["index"],
                "resource": profile,
                "jobId": s["job"],
                "allocationId": s["allocation"],
                "state": s["at_resource_manager"],
                "at-task-executor": s["at_task_executor"],
            }
            for s in slots
            if s["allocation"] or s["at_task_executor"]
        ],
        "slots": slots,
        "as-of": archive.as_of(),
    }
