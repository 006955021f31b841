"""Why something is the way it is, told from the log.

A TARGET is an event id (its chain of causes back to the input that started it, across
topics and reducers), a task `JOB/VERTEX[SUBTASK]` with an optional `#ATTEMPT` (VERTEX by id
or name: the story of each attempt, from the slot request through the ResourceManager's
placement, the TaskExecutor's allocation and offer, to the deployment, its states, what ended
it and what the restart strategy decided, then what it waits for now), an allocation id or a
TaskExecutor (every event that names it, each with its cause).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from jobledger.schemas import Event
from jobledger.schemas.jobs import JobSubmitted
from jobledger.schemas.slots import (
    SlotAllocationRequested,
    SlotOfferAccepted,
    SlotOffered,
    SlotRequested,
    SlotRequestFulfilled,
)
from jobledger.schemas.tasks import (
    TaskDeploymentRequested,
    TaskExecutionStateChanged,
    TaskSubmissionAccepted,
)
from jobledger.schemas.types import JobStatus, RestartStrategy, RestartStrategyKind
from jobledger.services.control.driver import ReducerDriver
from jobledger.services.control.queries import ArchivedExecution, ArchivedExecutionJobVertex

from ..log.log_file import LogRecord
from ..log.positions import Cut, where
from ..log.writers import Writers
from .failovers import failovers
from .history import fields, iso, refused_reports
from .slots import slot_report

_TASK = re.compile(
    r"^(?P<job>[^/\s]+)/(?P<vertex>[^\[]+)\[(?P<subtask>\d+)\](?:#(?P<attempt>\d+))?$"
)


def task_job(target: str) -> str | None:
    """The job of a task target (`JOB/VERTEX[SUBTASK]#ATTEMPT`), None for any other."""
    match = _TASK.match(target)
    return match["job"] if match else None


class UnknownTarget(LookupError):
    """A target naming nothing in the log; the message says what does exist."""


@dataclass
class Story:
    """What `explain` answers: a title and its lines."""

    title: str
    lines: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {"target": self.title, "lines": self.lines}

    def text(self) -> str:
        return "\n".join([self.title, *self.lines])


def explain(
    ordered: list[LogRecord], driver: ReducerDriver, target: str, writers: Writers | None = None
) -> Story:
    """The story of `target` in the log `ordered` (log order), whose replayed state is
    `driver`; each record with its writer, by `writers` (default: signatures named by key)."""
    writers = writers or Writers()
    by_id: dict[str, LogRecord] = {}
    for record in ordered:
        by_id.setdefault(record.event.event_id, record)
    if match := _TASK.match(target):
        return _task(ordered, driver, match, writers)
    event_id = target.removeprefix("id:")  # as a position names an event
    if event_id in by_id:
        return _causes(by_id, by_id[event_id], writers)
    if (task := attempt_task(ordered, driver, target)) is not None:
        return _task(ordered, driver, _TASK.match(task), writers)
    for name, named in (("allocation", "allocation_id"), ("TaskExecutor", "resource_id")):
        records = [r for r in ordered if getattr(r.event, named, None) == target]
        if records:
            story = Story(f"{name} {target}: {len(records)} events")
            story.lines = [_line(r, by_id, writers) for r in records]
            return story
    raise UnknownTarget(
        f"{target!r} is no event id, task, attempt id, allocation or TaskExecutor of this log; "
        "tasks look "
        f"like JOB/VERTEX[SUBTASK] ({', '.join(_some_tasks(ordered)) or 'none here'}), "
        f"TaskExecutors here: {', '.join(_resources(ordered)) or 'none'}"
    )


def attempt_task(ordered: list[LogRecord], driver: ReducerDriver, attempt_id: str) -> str | None:
    """The task an ExecutionAttemptID names, as JOB/VERTEX[SUBTASK]#ATTEMPT (what `job wait`,
    `kvstate lookup` and the REST API print): from its deployment, else from the JobMaster's
    graph (an attempt never deployed); None if it names none."""
    for record in ordered:
        event = record.event
        if isinstance(event, TaskDeploymentRequested) and event.execution_attempt_id == attempt_id:
            return f"{event.job_id}/{event.vertex_id}[{event.subtask_index}]#{event.attempt_number}"
    for job_id, jm in sorted(driver.job_masters.items()):
        graph = jm.archived_graph()
        found = graph.attempt(attempt_id) if graph is not None else None
        if found is not None:
            ev, attempt = found
            return f"{job_id}/{ev.job_vertex_id}[{ev.subtask_index}]#{attempt.attempt_number}"
    return None


def _line(record: LogRecord, by_id: dict[str, LogRecord], writers: Writers) -> str:
    cause = by_id.get(record.event.cause_event_id or "")
    because = f"  <- {cause.event.type_name()} {where(cause)}" if cause else ""
    return (
        f"  {iso(record.timestamp)} {where(record)} {record.event.type_name()} "
        f"[{writers.of(record).text()}] {fields(record.event)}{because}"
    )


def _causes(by_id: dict[str, LogRecord], record: LogRecord, writers: Writers) -> Story:
    chain = [record]
    seen = {record.event.event_id}
    while (cause := chain[-1].event.cause_event_id) in by_id and cause not in seen:
        seen.add(cause)  # a record naming itself (or a loop) as its cause ends the chain
        chain.append(by_id[cause])
    story = Story(f"event {record.event.event_id}: {len(chain) - 1} cause(s) back to an input")
    for depth, link in enumerate(reversed(chain)):
        role = "input" if depth == 0 else "decided"
        story.lines.append(
            f"  {'  ' * depth}{role} by {link.event.producer} [{writers.of(link).text()}]: "
            f"{iso(link.timestamp)} "
            f"{where(link)} {link.event.type_name()} {fields(link.event)}"
        )
    missing = chain[-1].event.cause_event_id
    if missing and missing not in by_id:
        story.lines.append(f"  (its cause {missing} is not in this log)")
    elif missing:
        story.lines.append(f"  (its cause {missing} is already in the chain: a loop)")
    return story


def _task(
    ordered: list[LogRecord], driver: ReducerDriver, match: re.Match[str], writers: Writers
) -> Story:
    job_id, vertex_ref, subtask = match["job"], match["vertex"], int(match["subtask"])
    submissions = (r.event for r in ordered if isinstance(r.event, JobSubmitted))
    submitted = next((s for s in submissions if s.job_id == job_id), None)
    if submitted is None:
        jobs = sorted({s.job_id for s in (r.event for r in ordered)
                       if isinstance(s, JobSubmitted)})  # fmt: skip
        raise UnknownTarget(
            f"no job {job_id!r} was submitted in this part of the log; jobs submitted: "
            f"{', '.join(jobs) or 'none'}"
        )
    vertex = next((v for v in submitted.vertices if vertex_ref in (v.vertex_id, v.name)), None)
    if vertex is None:
        names = ", ".join(f"{v.vertex_id} ({v.name})" for v in submitted.vertices)
        raise UnknownTarget(f"job {job_id} has no vertex {vertex_ref!r}; vertices: {names}")
    jm = driver.job_masters.get(job_id)
    graph = jm.archived_graph() if jm is not None else None
    archived = graph.vertex(vertex.vertex_id) if graph is not None else None
    parallelism = archived.parallelism if archived is not None else vertex.parallelism
    if subtask >= parallelism:
        raise UnknownTarget(
            f"vertex {vertex.vertex_id} of job {job_id} has subtasks 0-{parallelism - 1}"
        )
    attempts = _attempts_of(ordered, archived, job_id, vertex.vertex_id, subtask)
    if match["attempt"] is not None:
        wanted = int(match["attempt"])
        if wanted not in attempts:
            raise UnknownTarget(
                f"{job_id}/{vertex.vertex_id}[{subtask}] has attempts "
                f"{', '.join(map(str, sorted(attempts))) or 'none'}, not #{wanted}"
            )
        attempts = {wanted: attempts[wanted]}
    story = Story(
        f"task {job_id}/{vertex.vertex_id}[{subtask}] ({vertex.name!r}, subtask {subtask} of "
        f"{parallelism}): {len(attempts)} attempt(s)"
    )
    start = min(r.timestamp for r in ordered if getattr(r.event, "job_id", None) == job_id)
    refused = refused_reports(ordered)
    for number, attempt_id in sorted(attempts.items()):
        story.lines += _attempt(ordered, number, attempt_id, start, refused, writers)
    story.lines += _now(ordered, driver, job_id, archived, subtask, submitted)
    return story


def _attempts_of(
    ordered: list[LogRecord], jv: ArchivedExecutionJobVertex | None, job_id: str,
    vertex_id: str, subtask: int,
) -> dict[int, str]:  # fmt: skip
    """Attempt number -> attempt id: every attempt deployed, and those the JobMaster made
    and has not deployed (yet); `jv`: the vertex as the JobMaster holds it, if it does."""
    found = {
        r.event.attempt_number: r.event.execution_attempt_id for r in ordered
        if isinstance(r.event, TaskDeploymentRequested) and r.event.job_id == job_id
        and r.event.vertex_id == vertex_id and r.event.subtask_index == subtask
    }  # fmt: skip
    for execution in jv.subtasks[subtask].attempts if jv is not None else ():
        found.setdefault(execution.attempt_number, execution.attempt_id)
    return found


def _attempt(
    ordered: list[LogRecord], number: int, attempt: str, start: int, refused: dict[str, str],
    writers: Writers,
) -> list[str]:  # fmt: skip
    def at(record: LogRecord) -> str:
        """When it was appended (a decision carries its input's event time), after the
        job's first record."""
        return f"+{(record.timestamp - start) / 1000:.2f}s {where(record)}"

    def last(kind: type[Event], before: LogRecord | None = None, **wanted: object):
        """The latest such record (before `before`, if given): a slot placed or offered
        again is told as it was when it served."""
        end = ordered.index(before) if before is not None else len(ordered)
        return next(
            (r for r in reversed(ordered[:end]) if isinstance(r.event, kind)
             and all(getattr(r.event, k) == v for k, v in wanted.items())),
            None,
        )  # fmt: skip

    lines = [f"attempt {number} ({attempt}):"]
    deployment = last(TaskDeploymentRequested, execution_attempt_id=attempt)
    fulfilled = last(SlotRequestFulfilled, deployment, slot_request_id=attempt)
    requested = last(SlotRequested, fulfilled, slot_request_id=attempt)
    if requested is not None:
        lines.append(f"  asked the ResourceManager for allocation {requested.event.allocation_id} "
                     f"({at(requested)})")  # fmt: skip
        placed = last(SlotAllocationRequested, fulfilled,
                      allocation_id=requested.event.allocation_id)  # fmt: skip
        if placed is not None:
            lines.append(f"  the ResourceManager placed it on {placed.event.resource_id} slot "
                         f"{placed.event.slot_index} ({at(placed)})")  # fmt: skip
    if fulfilled is not None:
        allocation = fulfilled.event.allocation_id
        # the pool accepts an offer and fulfils a request in one step: the two records land
        # on two topics in either order, so both are looked for before the deployment
        offered = last(SlotOffered, deployment, allocation_id=allocation)
        accepted = last(SlotOfferAccepted, deployment, allocation_id=allocation)
        if offered is not None:
            lines.append(f"  {offered.event.resource_id} offered allocation {allocation} "
                         f"({at(offered)})"
                         + (f", accepted ({at(accepted)})" if accepted else ""))  # fmt: skip
        if requested is None:
            how = "gave it an available slot,"
        elif requested.event.allocation_id != allocation:
            how = "fulfilled the request with another allocation,"
        else:
            how = "fulfilled the request with"
        lines.append(f"  the pool {how} {allocation} ({at(fulfilled)})")
    if deployment is None:
        return [*lines, "  not deployed"]
    d = deployment.event
    lines.append(f"  deployed to {d.resource_id} slot {d.slot_index} ({at(deployment)})")
    accepted_task = last(TaskSubmissionAccepted, execution_attempt_id=attempt)
    if accepted_task is not None:
        lines.append(f"  {d.resource_id} accepted the task ({at(accepted_task)})")
    for report in (r for r in ordered if isinstance(r.event, TaskExecutionStateChanged)
                   and r.event.execution_attempt_id == attempt):  # fmt: skip
        event = report.event
        said = "the TaskExecutor" if event.producer != "jobmaster" else "the JobMaster"
        reason = refused.get(event.event_id)
        lines.append(
            f"  {event.execution_state.value} from {said} [{writers.of(report).text()}] "
            f"({at(report)})"
            + (f": {event.error}" if event.error else "")
            + (f" — refused by the JobMaster: {reason}" if reason else "")
        )
    return lines


def _restart_account(strategy: RestartStrategy, n: int) -> str:
    kind = strategy.kind.value
    if strategy.kind is RestartStrategyKind.FIXED_DELAY:
        return (f"{kind}, {n} of {strategy.restart_attempts} attempts used, delay "
                f"{strategy.delay_ms} ms")  # fmt: skip
    if strategy.kind is RestartStrategyKind.FAILURE_RATE:
        limit, interval = strategy.max_failures_per_interval, strategy.failure_rate_interval_ms
        return f"{kind}, at most {limit} failures per {interval} ms, delay {strategy.delay_ms} ms"
    return kind


def _now(
    ordered: list[LogRecord], driver: ReducerDriver, job_id: str,
    jv: ArchivedExecutionJobVertex | None, subtask: int, submitted: JobSubmitted,
) -> list[str]:  # fmt: skip
    """The restart strategy's account and what the subtask waits for now (`jv`: its vertex
    as the JobMaster holds it, if it does)."""
    jm = driver.job_masters.get(job_id)
    strategy = submitted.restart_strategy
    if jm is not None and jm.job is not None:
        strategy = jm.restart_strategy_of(submitted)  # the cluster's, if not its own
    lines = []
    for n, failover in enumerate(failovers(ordered, job_id, driver_factory=driver.fresh), start=1):
        cause = f"; cause: {failover.cause}" if failover.cause else ""
        restarted = "the whole job" if failover.whole_job else ", ".join(failover.subtasks)
        lines.append(f"restart {n} ({where(failover.record)}) of {restarted}: "
                     f"{_restart_account(strategy, failover.failures)}{cause}")  # fmt: skip
    if jm is None or jv is None:
        return [*lines, "now: the JobMaster holds no ExecutionGraph for the job"]
    ev = jv.subtasks[subtask]
    for prior in ev.prior:
        lines.append(f"the JobMaster's view of attempt {prior.attempt_number}: {prior.state.value}")
    current = ev.current
    lines.append(f"now: job {jm.status.value}; attempt {current.attempt_number} is "
                 f"{current.state.value}{_waiting(ordered, driver, job_id, current)}"
                 f"{_liveness(driver, current, _last_time(ordered))}")  # fmt: skip
    return lines


def _last_time(ordered: list[LogRecord]) -> int | None:
    """The time a replayed log is as of: that of its last record."""
    return ordered[-1].timestamp if ordered else None


def _liveness(driver: ReducerDriver, current: ArchivedExecution, now_ms: int | None) -> str:
    """How long the attempt's TaskExecutor has been silent, against the timeout after which
    it is lost and the attempt failed: what a wait on a dead runner ends with."""
    if current.state.value not in ("DEPLOYING", "INITIALIZING", "RUNNING", "CANCELING"):
        return ""
    rm = driver.resource_manager
    te = rm.task_manager(current.resource_id)
    if te is None:
        return f"; TaskExecutor {current.resource_id} is not registered at the ResourceManager"
    if now_ms is None:
        return ""
    silent_s = max(0, now_ms - te.last_heartbeat) // 1000
    return (f"; TaskExecutor {current.resource_id} silent for {silent_s} s; lost after "
            f"{rm.config.heartbeat_timeout_ms // 1000} s")  # fmt: skip


def _waiting(
    ordered: list[LogRecord], driver: ReducerDriver, job_id: str, current: ArchivedExecution
) -> str:
    state = current.state.value
    if state == "SCHEDULED" and not current.has_slot:
        for pending in slot_report(driver, Cut("end", ordered)).pending:
            if pending.job_id == job_id and pending.slot_request_id == current.slot_request_id:
                return f", waiting for a slot: {pending.reason}"
        return ", waiting for a slot request to be made"
    if state == "SCHEDULED":
        graph = driver.job_masters[job_id].archived_graph()
        subtasks = graph.execution_vertices() if graph is not None else []
        waiting = sum(1 for ev in subtasks if not ev.current.has_slot)
        return (f", holding its slot; waiting for the job's {waiting} other slot request(s) "
                "(EAGER scheduling deploys every task at once)")  # fmt: skip
    if state == "DEPLOYING":
        return f", waiting for {current.resource_id} to report it INITIALIZING"
    return ""


def _some_tasks(ordered: list[LogRecord]) -> list[str]:
    tasks = {
        f"{r.event.job_id}/{r.event.vertex_id}[{r.event.subtask_index}]"
        for r in ordered if isinstance(r.event, TaskDeploymentRequested)
    }  # fmt: skip
    return sorted(tasks)[:3]


def _resources(ordered: list[LogRecord]) -> list[str]:
    return sorted({r.event.resource_id for r in ordered if getattr(r.event, "resource_id", None)})


def waiting_for(
    ordered: list[LogRecord], driver: ReducerDriver, job_id: str, now_ms: int | None = None
) -> list[str]:
    """What a job that has not ended waits for, in the order a person checks: a submission
    the JobMaster accepted, a leader, a restart, then every subtask whose current attempt has
    not ended (a slot, a deployment, its TaskExecutor's reports and how long it has been
    silent as of `now_ms`, by default the log's last record)."""
    now_ms = _last_time(ordered) if now_ms is None else now_ms
    jm = driver.job_masters.get(job_id)
    if jm is None or jm.job is None:
        return [f"the JobMaster has accepted no submission of job {job_id}"]
    info = jm.info()
    if info.job_master_id is None:
        return ["a JobMaster leader: no JobMasterLeadershipGranted for the job in this log"]
    lines = []
    if info.status is JobStatus.RESTARTING and info.restart_at is not None:
        lines.append(f"its restart, due at {iso(info.restart_at)} (a TimerFired then)")
    graph = jm.archived_graph()
    for ev in graph.execution_vertices() if graph is not None else []:
        current = ev.current
        if current.state.value in ("FINISHED", "CANCELED", "FAILED"):
            continue
        waits = _waiting(ordered, driver, job_id, current) or _reported(current)
        waits += _liveness(driver, current, now_ms)
        lines.append(f"{job_id}/{ev.job_vertex_id}[{ev.subtask_index}] attempt "
                     f"{current.attempt_number} is {current.state.value}{waits}")  # fmt: skip
    return lines


def _reported(current: ArchivedExecution) -> str:
    """What an attempt past its deployment waits for: its TaskExecutor's next report."""
    next_report = {"INITIALIZING": "RUNNING", "RUNNING": "FINISHED", "CANCELING": "CANCELED"}
    state = current.state.value
    if state in next_report:
        return f", waiting for {current.resource_id} to report it {next_report[state]}"
    if state == "CREATED":
        return ", not scheduled yet: waiting for its inputs to be ready"
    return ""
