"""Read models of one job's story, for people: every attempt's states over time (as lines,
and as a Gantt chart of attempts per slot drawn with matplotlib), and what the log says about
a job that has not ended."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from jobledger.schemas.tasks import TaskDeploymentRequested, TaskExecutionStateChanged
from jobledger.services.control.driver import ReducerDriver

from ..log.log_file import LogRecord
from ..log.replay import replay
from .failovers import failovers
from .history import refused_reports


def timeline(
    records: list[LogRecord], job_id: str,
    driver_factory: Callable[[], ReducerDriver] = ReducerDriver,
) -> list[str]:  # fmt: skip
    """Each attempt in its slot, with the states it went through and when: the same bars the
    Gantt chart draws (`bars`), as lines, so the two never disagree."""
    drawn, _ = bars(records, job_id, driver_factory)
    steps: dict[str, list[Bar]] = {}
    for bar in drawn:
        steps.setdefault(bar.attempt, []).append(bar)
    ordered = sorted(steps.values(), key=lambda b: (int(b[0].label.rsplit("#", 1)[1]), b[0].start))
    return [
        f"  {b[0].label} on {b[0].slot}: "
        + " -> ".join(f"{bar.state}@{bar.start:.2f}s" for bar in b)
        for b in ordered
    ]


def stalled_job(
    records: list[LogRecord], job_id: str,
    driver_factory: Callable[[], ReducerDriver] = ReducerDriver,
) -> list[str]:  # fmt: skip
    """What the log says about a job that did not end: its status, the timeline, and the
    state of every subtask's current attempt as the JobMaster sees it."""
    jm = replay(records, driver_factory).driver.job_masters.get(job_id)
    lines = [
        f"job status: {jm.status.value if jm else 'unknown to the JobMaster'}",
        "timeline (seconds since submission):",
        *timeline(records, job_id, driver_factory),
    ]
    graph = jm.archived_graph() if jm is not None else None
    if graph is not None:
        lines.extend(
            f"  {ev.job_vertex_id}[{ev.subtask_index}] attempt "
            f"{ev.current.attempt_number}: {ev.current.state.value}"
            for ev in graph.execution_vertices()
        )
    return lines


@dataclass(frozen=True)
class Bar:
    """One stretch of one attempt in one slot: a state from when it was entered (seconds
    since the job's first event) until the next state, or the end of the log."""

    slot: str
    attempt: str
    label: str
    state: str
    start: float
    end: float


def bars(
    records: list[LogRecord], job_id: str,
    driver_factory: Callable[[], ReducerDriver] = ReducerDriver,
) -> tuple[list[Bar], list[float]]:  # fmt: skip
    """Every attempt's states per slot, and the times of the job's failovers (one per region
    that failed, under region failover), as data to draw. Times are when records were
    appended (a decision carries its input's event time), in seconds after the job's first
    record; reports the JobMaster refused are left out."""
    times = [r.timestamp for r in records if getattr(r.event, "job_id", None) == job_id]
    if not times:
        return [], []
    start, end = min(times), max(times)
    seconds = lambda ms: (ms - start) / 1000  # noqa: E731 (a local unit conversion)
    refused = refused_reports(records)
    reports: dict[str, list[tuple[int, str]]] = {}
    for r in records:  # log order: a partition's reports in the order they were appended
        e = r.event
        if (
            isinstance(e, TaskExecutionStateChanged)
            and e.job_id == job_id
            and e.event_id not in refused
        ):
            reports.setdefault(e.execution_attempt_id, []).append(
                (r.timestamp, e.execution_state.value)
            )
    restarts = [
        seconds(f.record.timestamp)
        for f in failovers(records, job_id, driver_factory=driver_factory)
    ]
    drawn = []
    for r in records:
        d = r.event
        if not (isinstance(d, TaskDeploymentRequested) and d.job_id == job_id):
            continue
        steps = [(r.timestamp, "DEPLOYING"), *reports.get(d.execution_attempt_id, [])]
        label = f"{d.vertex_id}[{d.subtask_index}]#{d.attempt_number}"
        slot = f"{d.resource_id}/{d.slot_index}"
        for (at, state), (until, _) in zip(steps, [*steps[1:], (end, "")], strict=True):
            stop = at if state in TERMINAL_STATES else until
            drawn.append(
                Bar(slot, d.execution_attempt_id, label, state, seconds(at), seconds(stop))
            )
            if state in TERMINAL_STATES:
                break
    return drawn, restarts


TERMINAL_STATES = {"FINISHED", "FAILED", "CANCELED"}
COLOURS = {
    "DEPLOYING": "#c6dbef", "INITIALIZING": "#9ecae1", "RUNNING": "#4292c6",
    "CANCELING": "#fdae6b", "FINISHED": "#31a354", "FAILED": "#de2d26", "CANCELED": "#969696",
}  # fmt: skip


def draw(
    records: list[LogRecord], job_id: str, path: Path,
    driver_factory: Callable[[], ReducerDriver] = ReducerDriver,
) -> int:  # fmt: skip
    """A Gantt chart of the job's attempts per slot over time (states coloured, failures and
    restarts marked) written to `path` (.svg, .png or .pdf); returns how many bars."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot
    from matplotlib.patches import Patch

    drawn, restarts = bars(records, job_id, driver_factory)
    slots = sorted({b.slot for b in drawn})
    figure, axes = pyplot.subplots(figsize=(11, 1 + 0.45 * max(1, len(slots))))
    for bar in drawn:
        row = slots.index(bar.slot)
        if bar.state in TERMINAL_STATES:
            marker = "X" if bar.state == "FAILED" else "|"
            axes.plot(bar.start, row, marker, color=COLOURS[bar.state], markersize=10)
            continue
        axes.barh(row, max(bar.end - bar.start, 0.01), left=bar.start, height=0.6,
                  color=COLOURS[bar.state], edgecolor="white")  # fmt: skip
        if bar.state == "DEPLOYING":
            axes.text(bar.start, row + 0.38, bar.label, fontsize=7, va="bottom")
    for at in restarts:
        axes.axvline(at, color=COLOURS["FAILED"], linestyle="--", linewidth=1)
    axes.set_yticks(range(len(slots)), slots)
    axes.invert_yaxis()
    axes.set_xlabel("seconds since the job's first event")
    axes.set_title(f"job {job_id}: attempts per slot" + (
        f" ({len(restarts)} restart{'s' if len(restarts) != 1 else ''}, dashed)" if restarts else ""
    ))  # fmt: skip
    axes.legend(handles=[Patch(color=c, label=s) for s, c in COLOURS.items()],
                fontsize=7, ncol=7, loc="upper center", bbox_to_anchor=(0.5, -0.25))  # fmt: skip
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)
    return len(drawn)
