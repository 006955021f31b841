"""A job's exceptions as Flink's REST API shows them (`/jobs/:jobid/exceptions`): the root
exception (the cause of the job's latest failure: under region failover, the latest region's)
and the exception history, one entry per task failure the JobMaster took, newest first, with
the task and where it ran."""

from __future__ import annotations

from typing import Any

from .archived_execution_graph import ArchivedJob, ClusterArchive, TaskFailure


def exception_name(error: str) -> str:
    """`Name: message` -> `Name` (the runner reports a failure as its exception's name and
    text); anything else is named by its first line."""
    head = error.split(":", 1)[0].strip()
    return head if head and " " not in head else error.splitlines()[0] if error else ""


def _task_name(job: ArchivedJob, failure: TaskFailure) -> str:
    """Flink names a task `NAME (SUBTASK+1/PARALLELISM)`."""
    vertex = next((jv for jv in job.vertices() if jv.vertex_id == failure.vertex_id), None)
    name = vertex.vertex.name if vertex else failure.vertex_id
    parallelism = vertex.parallelism if vertex else "?"
    return f"{name} ({failure.subtask_index + 1}/{parallelism})"


def _entry(job: ArchivedJob, failure: TaskFailure) -> dict[str, Any]:
    return {
        "exceptionName": exception_name(failure.error),
        "stacktrace": failure.error,
        "timestamp": failure.timestamp,
        "taskName": _task_name(job, failure),
        "location": failure.resource_id,
        "endpoint": failure.resource_id,
        "taskManagerId": failure.resource_id,
        "failureLabels": {},
        "concurrentExceptions": [],
        "vertex-id": failure.vertex_id,
        "subtask": failure.subtask_index,
        "attempt": failure.attempt_number,
        "attempt-id": failure.attempt_id,
        "position": failure.position,
        "writer": failure.writer.to_dict(),
    }


LEGACY_FIELDS = ("exceptionName", "stacktrace", "timestamp", "taskName", "location")
"""What Flink's older `all-exceptions` list holds of each entry."""


def job_exceptions(archive: ClusterArchive, job_id: str) -> dict[str, Any]:
    job = archive.job(job_id)
    entries = [_entry(job, f) for f in reversed(job.failures)]
    root = job.root_cause
    return {
        "root-exception": root[1] if root else None,
        "timestamp": root[0] if root else None,
        "all-exceptions": [{k: e[k] for k in LEGACY_FIELDS} for e in entries],
        "truncated": False,
        "exceptionHistory": {"entries": entries, "truncated": False},
        "as-of": archive.as_of(),
    }
