"""Jobs as Flink's REST API shows them (`/jobs/overview`, `/jobs/:jobid`, a vertex, its
subtask times, the plan), read from a `ClusterArchive`; `jobledger job list` and `job show`
print the same dicts. Field names are Flink's (its dashboard and tools read them); jobledger's
additions are named apart (`as-of`, `attempt-history`, `slot-index`...).

Times are epoch ms of appends to the log; -1 where Flink says -1 (not yet ended, not started).
"""

from __future__ import annotations

from typing import Any

from jobledger.schemas.types import ExecutionState, JobStatus
from jobledger.services.control.job_status import TERMINAL
from jobledger.services.control.queries import ArchivedExecutionJobVertex

from .archived_execution_graph import ArchivedAttempt, ArchivedJob, ClusterArchive

EXECUTION_STATES = [s.value for s in ExecutionState if s is not ExecutionState.UNKNOWN]
JOB_STATUSES = [s.value for s in JobStatus if s is not JobStatus.UNKNOWN]

AGGREGATE_ORDER = ("FAILED", "CANCELING", "CANCELED", "INITIALIZING", "RUNNING")
"""Flink's aggregate state of a vertex (ExecutionJobVertex.getAggregateJobVertexState): the
first of these any subtask is in; else FINISHED when all are, RUNNING when some are; anything
else (scheduled, deploying) shows as CREATED."""


def _duration(start: int, end: int, now: int) -> int:
    if start < 0:
        return -1
    return (end if end >= 0 else now) - start


def end_time(job: ArchivedJob) -> int:
    return job.status_timestamps.get(job.status, -1) if job.status in TERMINAL else -1


def state_counts(states: list[str]) -> dict[str, int]:
    """Every ExecutionState with how many of `states` are in it (Flink's status-counts)."""
    return {state: states.count(state) for state in EXECUTION_STATES}


def _current_states(job: ArchivedJob) -> list[str]:
    return [ev.current.state.value for jv in job.vertices() for ev in jv.subtasks]


def job_overview(job: ArchivedJob, now: int) -> dict[str, Any]:
    """One entry of `/jobs/overview` (Flink's JobDetails)."""
    counts = state_counts(_current_states(job))
    end = end_time(job)
    return {
        "jid": job.job_id,
        "name": job.name,
        "state": job.status,
        "start-time": job.submitted_at,
        "end-time": end,
        "duration": _duration(job.submitted_at, end, now),
        "last-modification": job.last_modified,
        "tasks": {"total": sum(counts.values()), **{s.lower(): n for s, n in counts.items()}},
        "restarts": job.master.restarts,
        "decided": job.decided is not None,
    }


def jobs_overview(archive: ClusterArchive) -> dict[str, Any]:
    """`/jobs/overview`: every job, most recently started first (as Flink lists them)."""
    jobs = sorted(archive.jobs.values(), key=lambda j: (-j.submitted_at, j.job_id))
    return {"jobs": [job_overview(j, archive.now) for j in jobs], "as-of": archive.as_of()}


def vertex_status(states: list[str]) -> str:
    found = next((s for s in AGGREGATE_ORDER if s in states), None)
    if found is not None:
        return found
    if "FINISHED" in states:
        return "FINISHED" if all(s == "FINISHED" for s in states) else "RUNNING"
    return "CREATED"


def _vertex_summary(job: ArchivedJob, jv: ArchivedExecutionJobVertex, now: int) -> dict[str, Any]:
    current = [attempts[-1] for attempts in job.attempts(jv)]
    states = [a.state for a in current]
    starts = [a.start for a in current if a.start >= 0]
    start = min(starts, default=-1)
    ends = [a.end for a in current]
    end = max(ends) if ends and all(e >= 0 for e in ends) else -1
    return {
        "id": jv.vertex_id,
        "name": jv.vertex.name,
        "maxParallelism": jv.max_parallelism,
        "parallelism": jv.parallelism,
        "status": vertex_status(states),
        "start-time": start,
        "end-time": end,
        "duration": _duration(start, end, now),
        "tasks": state_counts(states),
    }


def job_details(archive: ClusterArchive, job_id: str) -> dict[str, Any]:
    """`/jobs/:jobid`: status and its times, every vertex with its subtasks' states."""
    job = archive.job(job_id)
    end = end_time(job)
    return {
        "jid": job.job_id,
        "name": job.name,
        "isStoppable": False,
        "state": job.status,
        "job-type": "STREAMING",
        "start-time": job.submitted_at,
        "end-time": end,
        "duration": _duration(job.submitted_at, end, archive.now),
        "maxParallelism": -1,
        "now": archive.now,
        "timestamps": {s: job.status_timestamps.get(s, 0) for s in JOB_STATUSES},
        "status-history": [entry.to_dict() for entry in job.status_history],
        "submitted-by": job.submitted_by.to_dict() if job.submitted_by else None,
        "cancelled-by": job.cancelled_by.to_dict() if job.cancelled_by else None,
        "vertices": [_vertex_summary(job, jv, archive.now) for jv in job.vertices()],
        "status-counts": state_counts(_current_states(job)),
        "plan": plan_of(job),
        "restarts": job.master.restarts,
        "failure-cause": job.master.failure_cause,
        "decided": job.decided is not None,
        "as-of": archive.as_of(),
    }


def plan_of(job: ArchivedJob) -> dict[str, Any]:
    """The JobGraph as Flink's plan: nodes and the edges into them."""
    vertices = job.submitted.vertices if job.submitted else []
    return {
        "jid": job.job_id,
        "name": job.name,
        "type": "STREAMING",
        "nodes": [
            {
                "id": v.vertex_id,
                "parallelism": v.parallelism,
                "operator": "",
                "operator_strategy": "",
                "description": v.name,
                "operators": [op.name for op in v.operators],
                "inputs": [
                    {
                        "num": n,
                        "id": edge.source_vertex_id,
                        "ship_strategy": edge.distribution_pattern.value,
                        "exchange": edge.result_partition_type.value.lower(),
                    }
                    for n, edge in enumerate(v.inputs)
                ],
                "optimizer_properties": {},
            }
            for v in vertices
        ],
    }


def job_plan(archive: ClusterArchive, job_id: str) -> dict[str, Any]:
    """`/jobs/:jobid/plan`."""
    return {"plan": plan_of(archive.job(job_id)), "as-of": archive.as_of()}


def _attempt(a: ArchivedAttempt, now: int) -> dict[str, Any]:
    return {
        "attempt": a.attempt_number,
        "attempt-id": a.attempt_id,
        "status": a.state,
        "taskmanager-id": a.resource_id or "(unassigned)",
        "slot-index": a.slot_index,
        "allocation-id": a.allocation_id,
        "start-time": a.start,
        "end-time": a.end,
        "duration": _duration(a.start, a.end, now),
        "timestamps": dict(sorted(a.timestamps.items(), key=lambda kv: kv[1])),
        "error": a.error,
    }


class UnknownSubtask(LookupError):
    """A vertex has no such subtask, or a subtask no such attempt; the message says which
    there are."""


def subtask_attempt(
    archive: ClusterArchive, job_id: str, vertex_id: str, subtask: int, attempt: int | None
) -> dict[str, Any]:
    """`/jobs/:jobid/vertices/:vertexid/subtasks/:subtaskindex[/attempts/:attempt]`: one
    attempt of one subtask (default: its current one)."""
    job = archive.job(job_id)
    jv = job.vertex(vertex_id)
    if not 0 <= subtask < jv.parallelism:
        raise UnknownSubtask(
            f"vertex {vertex_id!r} of job {job_id!r} has subtasks 0-{jv.parallelism - 1}, "
            f"not {subtask}"
        )
    attempts = job.attempts(jv)[subtask]
    chosen = attempts[-1] if attempt is None else next(
        (a for a in attempts if a.attempt_number == attempt), None
    )  # fmt: skip
    if chosen is None:
        numbers = ", ".join(str(a.attempt_number) for a in attempts)
        raise UnknownSubtask(
            f"subtask {subtask} of {vertex_id!r} has no attempt {attempt} (attempts: {numbers})"
        )
    return {
        "subtask": subtask,
        **_attempt(chosen, archive.now),
        "endpoint": chosen.resource_id or "(unassigned)",
        "metrics": {},
        "as-of": archive.as_of(),
    }


def vertex_details(archive: ClusterArchive, job_id: str, vertex_id: str) -> dict[str, Any]:
    """`/jobs/:jobid/vertices/:vertexid`: each subtask's current attempt, and (jobledger)
    every earlier attempt with the times it entered each state."""
    job = archive.job(job_id)
    jv = job.vertex(vertex_id)
    subtasks = []
    for index, attempts in enumerate(job.attempts(jv)):
        current = attempts[-1]
        subtasks.append({
            "subtask": index,
            **_attempt(current, archive.now),
            "endpoint": current.resource_id or "(unassigned)",
            "metrics": {},
            "attempt-history": [_attempt(a, archive.now) for a in attempts],
        })  # fmt: skip
    return {
        "id": jv.vertex_id,
        "name": jv.vertex.name,
        "parallelism": jv.parallelism,
        "maxParallelism": jv.max_parallelism,
        "now": archive.now,
        "subtasks": subtasks,
        "as-of": archive.as_of(),
    }


def subtask_times(archive: ClusterArchive, job_id: str, vertex_id: str) -> dict[str, Any]:
    """`/jobs/:jobid/vertices/:vertexid/subtasktimes`: when each subtask's current attempt
    entered each state (0: not yet)."""
    job = archive.job(job_id)
    jv = job.vertex(vertex_id)
    subtasks = []
    for index, attempts in enumerate(job.attempts(jv)):
        current = attempts[-1]
        subtasks.append({
            "subtask": index,
            "host": current.resource_id or "(unassigned)",
            "endpoint": current.resource_id or "(unassigned)",
            "duration": _duration(current.start, current.end, archive.now),
            "timestamps": {s: current.timestamps.get(s, 0) for s in EXECUTION_STATES},
        })  # fmt: skip
    return {
        "id": jv.vertex_id,
        "name": jv.vertex.name,
        "now": archive.now,
        "subtasks": subtasks,
        "as-of": archive.as_of(),
    }
