"""Flink's JobStatus and the transitions the JobMaster may make (JS-1..JS-3, RS-9).

FAILED, CANCELED and FINISHED are globally terminal; SUSPENDED is terminal for this JobMaster
only (another leader may take the job over).
"""

from __future__ import annotations

from jobledger.schemas import Event
from jobledger.schemas.jobs import JobStatusChanged
from jobledger.schemas.rejections import EventRejected
from jobledger.schemas.types import JobStatus as J

GLOBALLY_TERMINAL = frozenset({J.FAILED, J.CANCELED, J.FINISHED})
TERMINAL = GLOBALLY_TERMINAL | {J.SUSPENDED}

ALLOWED: dict[J, frozenset[J]] = {
    J.INITIALIZING: frozenset({J.CREATED, J.FAILED, J.SUSPENDED}),
    J.CREATED: frozenset({J.RUNNING, J.CANCELLING, J.FAILING, J.FAILED, J.SUSPENDED}),
    J.RUNNING: frozenset({J.FINISHED, J.FAILING, J.CANCELLING, J.RESTARTING, J.SUSPENDED}),
    J.RESTARTING: frozenset({J.RUNNING, J.CANCELLING, J.FAILING, J.FAILED, J.SUSPENDED}),
    J.FAILING: frozenset({J.FAILED, J.RESTARTING, J.CANCELLING, J.SUSPENDED}),
    J.CANCELLING: frozenset({J.CANCELED, J.SUSPENDED}),
}


def transition_refusal(current: J, target: J) -> str | None:
    """Why the job may not go from `current` to `target`, or None if it may."""
    if current in TERMINAL:
        return f"Job is trying to leave terminal state {current} to {target}."
    if target not in ALLOWED.get(current, frozenset()):
        return f"Job cannot go from {current} to {target}."
    return None


def awaited_by_clients(event: Event) -> bool:
    """Whether a client blocks on `event`: a job's end, or the refusal of its submission
    (`job wait`, the demo). A client believes one only once the services have committed past
    it unrefused (projections/log/job_results.py), so they commit past one as soon as they read it
    back instead of after their idle interval."""
    if isinstance(event, JobStatusChanged):
        return event.to_status in GLOBALLY_TERMINAL
    return isinstance(event, EventRejected) and event.rejected_event_type == "JobSubmitted"
