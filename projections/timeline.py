"""Read models of one job's story, for people: every attempt's states over time, and what
the log says about a job that has not ended."""

from __future__ import annotations

from jobledger.schemas.tasks import TaskDeploymentRequested, TaskExecutionStateChanged

from .log_file import LogRecord
from .replay import replay


def timeline(records: list[LogRecord], job_id: str) -> list[str]:
    """Each attempt: vertex, subtask, attempt number, slot, and its states with times since
    the job's first event."""
    start = min((r.event.event_time for r in records if getattr(r.event, "job_id", None) == job_id),
                default=0)  # fmt: skip
    deployed = {
        r.event.execution_attempt_id: r.event
        for r in records
        if isinstance(r.event, TaskDeploymentRequested) and r.event.job_id == job_id
    }
    states: dict[str, list[str]] = {}
    for r in records:
        e = r.event
        if isinstance(e, TaskExecutionStateChanged) and e.job_id == job_id:
            states.setdefault(e.execution_attempt_id, []).append(
                f"{e.execution_state.value}@{(e.event_time - start) / 1000:.2f}s"
            )
    lines = []
    for attempt, d in sorted(deployed.items(), key=lambda kv: (kv[1].attempt_number,
                             kv[1].vertex_id != "source", kv[1].subtask_index)):  # fmt: skip
        lines.append(
            f"  {d.vertex_id:>6}[{d.subtask_index}] attempt {d.attempt_number} on "
            f"{d.resource_id} slot {d.slot_index}: {' -> '.join(states.get(attempt, []))}"
        )
    return lines


def stalled_job(records: list[LogRecord], job_id: str) -> list[str]:
    """What the log says about a job that did not end: its status, the timeline, and the
    state of every subtask's current attempt as the JobMaster sees it."""
    jm = replay(records).driver.job_masters.get(job_id)
    lines = [
        f"job status: {jm.status.value if jm else 'unknown to the JobMaster'}",
        "timeline (seconds since submission):",
        *timeline(records, job_id),
    ]
    if jm is not None and jm.graph is not None:
        lines.extend(
            f"  {ev.job_vertex_id}[{ev.subtask_index}] attempt "
            f"{ev.current.attempt_number}: {ev.current.state.value}"
            for ev in jm.graph.execution_vertices()
        )
    return lines
