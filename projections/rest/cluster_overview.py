"""Flink's ClusterOverview (`/overview`): registered TaskManagers, their slots and jobs by
status, counted from a `ClusterArchive`."""

from __future__ import annotations

from typing import Any

from jobledger.services.control.job_status import TERMINAL

from ..debugging.slots import slot_report
from .archived_execution_graph import ClusterArchive


def cluster_overview(archive: ClusterArchive) -> dict[str, Any]:
    report = slot_report(archive.driver, archive.cut)
    # a lost TaskExecutor's slot table is still in the log, but it is no TaskManager of the
    # cluster's any more: counted, as Flink's overview counts, are the registered ones
    registered = archive.driver.resource_manager.task_managers()
    live = [rid for rid in report.task_executors if rid in registered]
    slots = [s for rid in live for s in report.task_executors[rid]]
    statuses = [job.status for job in archive.jobs.values()]
    return {
        "taskmanagers": len(live),
        "slots-total": len(slots),
        "slots-available": sum(1 for s in slots if s["at_resource_manager"] == "FREE"),
        "jobs-running": sum(1 for s in statuses if s not in TERMINAL),
        "jobs-finished": statuses.count("FINISHED"),
        "jobs-cancelled": statuses.count("CANCELED"),
        "jobs-failed": statuses.count("FAILED"),
        "flink-version": "jobledger",
        "flink-commit": "",
        "pending-slot-requests": len(report.pending),
        "as-of": archive.as_of(),
    }
