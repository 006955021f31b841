"""The cluster as the REST API and the dashboard read it, as of one point of the log: Flink's
web monitor reads an ArchivedExecutionGraph per job (a frozen copy of the ExecutionGraph with
each status' and each attempt state's timestamp); here the same copy is made from a cut of the
log and its replayed state.

States come from the replayed reducers (what the JobMaster believes); times come from the log:
when each record was appended (a decision carries its input's event time, so only its append
time tells it apart). `now` is the cut's latest append time, never the clock, so the same cut
gives the same answer bit for bit. Task state reports the JobMaster refused are left out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from jobledger.schemas.jobs import JobCancellationRequested, JobStatusChanged, JobSubmitted
from jobledger.schemas.rejections import EventRejected
from jobledger.schemas.tasks import TaskDeploymentRequested, TaskExecutionStateChanged
from jobledger.schemas.types import ExecutionState, JobStatus
from jobledger.services.control.driver import ReducerDriver
from jobledger.services.control.job_master import JobMaster
from jobledger.services.control.queries import (
    ArchivedExecution,
    ArchivedExecutionGraph,
    ArchivedExecutionJobVertex,
)

from ..debugging.history import UnknownJob, refused_reports
from ..log.log_file import LogRecord
from ..log.positions import Cut, where
from ..log.replay import replay
from ..log.writers import UNSIGNED, Writer, Writers


class UnknownVertex(LookupError):
    """A job has no vertex of that id; the message names those it has."""


@dataclass
class ArchivedAttempt:
    """One attempt of one subtask as the REST API shows it: the JobMaster's ArchivedExecution
    with where the log says it was deployed and when it entered each state."""

    attempt_id: str
    vertex_id: str
    subtask_index: int
    attempt_number: int
    state: str
    resource_id: str | None = None
    slot_index: int | None = None
    allocation_id: str | None = None
    timestamps: dict[str, int] = field(default_factory=dict)
    """State -> when the attempt first entered it."""
    error: str | None = None

    @property
    def start(self) -> int:
        return min(self.timestamps.values(), default=-1)

    @property
    def end(self) -> int:
        ended = [self.timestamps[s] for s in TERMINAL if s in self.timestamps]
        return max(ended, default=-1)


TERMINAL = ("FINISHED", "CANCELED", "FAILED")
UNDECIDED = "INITIALIZING"


@dataclass
class TaskFailure:
    """A FAILED report the JobMaster took: an entry of Flink's exception history."""

    attempt_id: str
    vertex_id: str
    subtask_index: int
    attempt_number: int
    error: str
    resource_id: str | None
    timestamp: int
    position: str
    writer: Writer = UNSIGNED
    """Who reported the failure."""


@dataclass(frozen=True)
class StatusEntry:
    """One status change of a job: when, who wrote it, and what asked for it (a
    submission or a cancellation, and whose), where the log says."""

    status: str
    timestamp: int
    writer: Writer
    cause: tuple[str, Writer] | None

    def to_dict(self) -> dict[str, object]:
        cause = self.cause
        return {
            "status": self.status, "timestamp": self.timestamp,
            "writer": self.writer.to_dict(),
            "cause": None if cause is None else {"type": cause[0], "writer": cause[1].to_dict()},
        }  # fmt: skip


@dataclass
class ArchivedJob:
    """One job: its JobGraph, the JobMaster's view of it, and times from the log."""

    job_id: str
    master: JobMaster | None
    submitted: JobSubmitted | None
    submitted_at: int
    graph: ArchivedExecutionGraph | None = None
    """The JobMaster's ExecutionGraph frozen at the cut (`held_by`); None without one."""
    last_modified: int = -1
    """When the job or one of its attempts last changed (Flink's JobDetails
    lastUpdateTime): its submission, a status change, a deployment, a report taken."""
    status_timestamps: dict[str, int] = field(default_factory=dict)
    """Status -> when the job last entered it (Flink keeps one time per status)."""
    root_cause: tuple[int, str] | None = None
    """(time, cause) of the latest failure: a task failure the JobMaster took (each one sets
    it, as Flink's setGlobalFailureCause does, whether it restarts a region or the job) or a
    status change naming a cause, whichever the log says last."""
    deployed: dict[str, TaskDeploymentRequested] = field(default_factory=dict)
    reports: dict[str, list[tuple[int, str, str | None]]] = field(default_factory=dict)
    """Attempt id -> (time, state, error) of its deployment and every state report taken."""
    failures: list[TaskFailure] = field(default_factory=list)
    submitted_by: Writer | None = None
    """Who wrote the job's JobSubmitted (the one taken)."""
    cancelled_by: Writer | None = None
    """Who wrote the latest JobCancellationRequested the services admitted."""
    requests: dict[str, tuple[str, Writer]] = field(default_factory=dict)
    """Event id -> (type, writer) of the job's submissions and cancellations: what a status
    change names as its cause, and whose it was."""
    status_history: list[StatusEntry] = field(default_factory=list)
    """Every status change, in log order, with its writer and its cause's."""
    decided: str | None = None
    """The status the services last decided for the job (its latest `JobStatusChanged` not
    dead-lettered), None while they have decided none: the reducers here may have derived
    more from inputs the services have not read yet, which is no decision of theirs."""

    @property
    def name(self) -> str:
        return self.submitted.job_name if self.submitted else ""

    @property
    def status(self) -> str:
        """What the services decided; a job they have not decided yet is INITIALIZING, as
        Flink says of a job its Dispatcher took and no JobMaster runs yet."""
        return self.decided if self.decided is not None else UNDECIDED

    def held_by(self, master: JobMaster) -> None:
        """The job as `master` holds it at the cut: its graph is copied once, here, so every
        answer about the cut reads the same frozen graph."""
        self.master, self.graph = master, master.archived_graph()

    def vertices(self) -> tuple[ArchivedExecutionJobVertex, ...]:
        return self.graph.vertices if self.graph else ()

    def vertex(self, vertex_id: str) -> ArchivedExecutionJobVertex:
        for jv in self.vertices():
            if jv.vertex_id == vertex_id:
                return jv
        known = ", ".join(jv.vertex_id for jv in self.vertices()) or "none"
        raise UnknownVertex(f"job {self.job_id!r} has no vertex {vertex_id!r} (vertices: {known})")

    def attempts(self, jv: ArchivedExecutionJobVertex) -> list[list[ArchivedAttempt]]:
        """Per subtask, its attempts oldest first (the last one is current)."""
        return [
            [self._archived(jv.vertex_id, ev.subtask_index, e) for e in ev.attempts]
            for ev in jv.subtasks
        ]

    def _archived(
        self, vertex_id: str, subtask: int, execution: ArchivedExecution
    ) -> ArchivedAttempt:
        archived = ArchivedAttempt(
            execution.attempt_id, vertex_id, subtask, execution.attempt_number,
            execution.state.value, execution.resource_id, execution.slot_index,
            execution.allocation_id,
        )  # fmt: skip
        deployment = self.deployed.get(execution.attempt_id)
        if deployment is not None:
            archived.resource_id = deployment.resource_id
            archived.slot_index = deployment.slot_index
            archived.allocation_id = deployment.allocation_id
        for at, state, error in self.reports.get(execution.attempt_id, []):
            archived.timestamps.setdefault(state, at)
            archived.error = error or archived.error
        return archived


@dataclass
class ClusterArchive:
    """Everything the REST API answers from, as of one cut."""

    cut: Cut
    driver: ReducerDriver
    jobs: dict[str, ArchivedJob]
    now: int
    """The cut's latest append time (-1 for an empty cut): "now" for durations."""

    def job(self, job_id: str) -> ArchivedJob:
        job = self.jobs.get(job_id)
        if job is None:
            known = ", ".join(sorted(self.jobs)) or "none"
            raise UnknownJob(
                f"no job {job_id!r} as of {self.cut.position} ({len(self.cut.records)} records); "
                f"jobs: {known}"
            )
        return job

    def as_of(self) -> dict[str, object]:
        return self.cut.as_of()


TAKEN = (
    JobSubmitted, JobStatusChanged, TaskDeploymentRequested, TaskExecutionStateChanged,
    JobCancellationRequested,
)  # fmt: skip
"""The events an archive takes its times and writers from."""
ARCHIVED = (*TAKEN, EventRejected)
"""What an archive reads (a refusal: to leave the report it refuses out); a question about
the live log decodes only these (projections/log/live_log.py)."""


def archive(
    upto: Cut, driver_factory: Callable[[], ReducerDriver] = ReducerDriver,
    writers: Writers | None = None,
) -> ClusterArchive:  # fmt: skip
    """The archive of every job the JobMasters hold as of `upto`, replayed by the reducers
    `driver_factory` makes; writers named by `writers` (default: by key only)."""
    driver = replay(upto.records, driver_factory, refused=upto.refused).driver
    now = max((r.timestamp for r in upto.records), default=-1)
    return archive_of(upto, driver, now, writers)


def archive_of(
    upto: Cut, driver: ReducerDriver, now: int, writers: Writers | None = None
) -> ClusterArchive:
    """The archive of the jobs `driver` holds, its times from the `ARCHIVED` records of
    `upto` (others may be left out of it); `now`: the cut's latest append time."""
    writers = writers or Writers()
    jobs = {}
    for job_id, master in sorted(driver.job_masters.items()):
        jobs[job_id] = ArchivedJob(job_id, None, None, -1)
        jobs[job_id].held_by(master)
    refused = refused_reports(upto.records)
    for record in upto.records:
        job = jobs.get(getattr(record.event, "job_id", None) or "")
        if job is not None:
            dead = (record.role.value, record.partition, record.offset) in upto.refused
            take(job, record, refused, writers.of(record), admitted=not dead)
    for job in jobs.values():
        if job.submitted is None and job.master.archived_graph() is not None:  # submission deleted
            held_only_in_state(job)
    return ClusterArchive(upto, driver, jobs, now)


def held_only_in_state(job: ArchivedJob) -> None:
    """A job whose records retention deleted, held by its JobMaster's state alone (the
    services' snapshot): its status and their times are the JobMaster's, which the services
    decided and committed with the snapshot; its tasks' times went with the records (its
    whole story is in its archive: `jobledger archive`)."""
    job.decided = job.master.status.value
    for status in JobStatus:
        at = job.master.status_since(status)
        if at is not None:
            job.status_timestamps.setdefault(status.value, at)


def take(
    job: ArchivedJob, record: LogRecord, refused: dict[str, str], writer: Writer = UNSIGNED,
    admitted: bool = True,
) -> None:  # fmt: skip
    """The job's times after `record`, a record of the job written by `writer` (`refused`:
    event id -> why, of the task state reports the JobMaster refused; `admitted`: the
    services did not dead-letter the record)."""
    event = record.event
    if not isinstance(event, TAKEN):
        return
    at = record.timestamp
    if isinstance(event, TaskExecutionStateChanged) and event.event_id in refused:
        return
    if isinstance(event, JobCancellationRequested):
        if admitted:
            job.requests[event.event_id] = (event.type_name(), writer)
            job.cancelled_by = writer
        return
    job.last_modified = max(job.last_modified, at)
    if isinstance(event, JobSubmitted) and job.submitted is None:
        job.submitted, job.submitted_at, job.submitted_by = event, at, writer
        job.requests[event.event_id] = (event.type_name(), writer)
        job.status_timestamps.setdefault("INITIALIZING", at)
    elif isinstance(event, JobStatusChanged):
        job.status_timestamps[event.to_status.value] = at
        cause = job.requests.get(event.cause_event_id or "")
        job.status_history.append(StatusEntry(event.to_status.value, at, writer, cause))
        if admitted:
            job.decided = event.to_status.value
        if event.cause:
            job.root_cause = (at, event.cause)
    elif isinstance(event, TaskDeploymentRequested):
        job.deployed[event.execution_attempt_id] = event
        job.reports.setdefault(event.execution_attempt_id, []).append((at, "DEPLOYING", None))
    elif isinstance(event, TaskExecutionStateChanged):
        state = event.execution_state.value
        job.reports.setdefault(event.execution_attempt_id, []).append((at, state, event.error))
        deployment = job.deployed.get(event.execution_attempt_id)
        if event.execution_state is ExecutionState.FAILED and deployment is not None:
            job.failures.append(TaskFailure(
                event.execution_attempt_id, deployment.vertex_id, deployment.subtask_index,
                deployment.attempt_number, event.error or "(no error text)",
                event.resource_id or deployment.resource_id, at, where(record), writer,
            ))  # fmt: skip
            job.root_cause = (at, f"{event.execution_attempt_id}: {job.failures[-1].error}")
