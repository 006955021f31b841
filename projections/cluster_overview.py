"""Flink's ClusterOverview (`/overview`): TaskManagers, slots and jobs by status, counted
from a `ClusterArchive`."""

from __future__ import annotations

from typing import Any

from .archived_execution_graph import ClusterArchive
from .slots import slot_report


def cluster_overview(archive: ClusterArchive) -> dict[str, Any]:
    report = slot_report(archive.driver, archive.cut)
    slots = [s for rows in report.task_executors.values() for s in rows]
    statuses = [job.status for job in archive.jobs.values()]
    ended = ("FINISHED", "CANCELED", "FAILED", "SUSPENDED")
    return {
        "taskmanagers": len(report.task_executors),
        "slots-total": len(slots),
        "slots-available": sum(1 for s in slots if s["at_resource_manager"] == "FREE"),
        "jobs-running": sum(1 for s in statuses if s not in ended),
        "jobs-finished": statuses.count("FINISHED"),
        "jobs-cancelled": statuses.count("CANCELED"),
        "jobs-failed": statuses.count("FAILED"),
        "flink-version": "jobledger",
        "flink-commit": "",
        "pending-slot-requests": len(report.pending),
        "as-of": archive.as_of(),
    }
