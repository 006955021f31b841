"""One job's story across every topic: each event that names the job (its inputs, the
JobMaster's and the pool's decisions, the ResourceManager's and the TaskExecutors' decisions
about its slots and tasks, its clock ticks and dead letters), in log order, each with the
record that caused it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

from jobledger.schemas import Event, event_to_dict
from jobledger.schemas.deadletters import DeadLettered
from jobledger.schemas.rejections import EventRejected
from jobledger.schemas.timers import TimerFired
from jobledger.schemas.types import OwnerKind

from ..log.log_file import LogRecord
from ..log.positions import where
from ..log.writers import UNSIGNED, Writer, Writers

HEADER = ("type", "event_id", "event_time", "producer", "cause_event_id", "job_id")
"""Fields every line shows in its own columns, or that the job makes plain."""


class UnknownJob(LookupError):
    """The log holds no event of that job; the message names the jobs it does hold."""


def belongs_to(event: Event, job_id: str) -> bool:
    if isinstance(event, TimerFired):
        return event.scope is OwnerKind.JOB and event.owner_id == job_id
    if isinstance(event, DeadLettered):
        return event.original_key == job_id.encode()
    if isinstance(event, EventRejected):
        return event.scope is OwnerKind.JOB and event.owner_id == job_id
    return getattr(event, "job_id", None) == job_id


def jobs_in(ordered: list[LogRecord]) -> list[str]:
    return sorted({r.event.job_id for r in ordered if getattr(r.event, "job_id", None)})


@dataclass(frozen=True)
class Entry:
    """One event of the job's history and the record that caused it (None for an input)."""

    record: LogRecord
    cause: LogRecord | None
    writer: Writer = UNSIGNED

    def to_dict(self) -> dict[str, object]:
        """The record as `tail --format json` prints it, who wrote it, and where its cause is."""
        r = self.record
        return {
            "position": where(r),
            "timestamp": r.timestamp,
            "writer": self.writer.to_dict(),
            "event": event_to_dict(r.event),
            "cause": where(self.cause) if self.cause else None,
        }

    def line(self) -> str:
        """TIME POSITION TYPE WRITER fields... <- CAUSE_TYPE CAUSE_POSITION"""
        r = self.record
        cause = (
            f"  <- {self.cause.event.type_name()} {where(self.cause)}"
            if self.cause
            else f"  <- {r.event.cause_event_id} (not in this log)"
            if r.event.cause_event_id
            else ""
        )
        return (
            f"{iso(r.timestamp)} {where(r):<24} {r.event.type_name():<30} "
            f"{self.writer.label():<20} {fields(r.event)}{cause}"
        )


def history(
    ordered: list[LogRecord], job_id: str, timers: bool = True, writers: Writers | None = None,
    by: str | None = None,
) -> list[Entry]:  # fmt: skip
    """Every event of `job_id` in `ordered` (log order), with its cause and its writer (by
    `writers`; default: signatures named by key only); the clock's TimerFired ticks only with
    `timers`; only what principal `by` wrote, if given."""
    writers = writers or Writers()
    seen: dict[str, LogRecord] = {}
    entries = []
    for r in ordered:
        if belongs_to(r.event, job_id) and (timers or not isinstance(r.event, TimerFired)):
            writer = writers.of(r)
            if by is None or writer.principal == by:
                cause = seen.get(r.event.cause_event_id) if r.event.cause_event_id else None
                entries.append(Entry(r, cause, writer))
        seen[r.event.event_id] = r  # a cause is the latest record with its id before
    if not entries and not any(belongs_to(r.event, job_id) for r in ordered):
        known = jobs_in(ordered)
        raise UnknownJob(
            f"no event of job {job_id!r} in this part of the log ({len(ordered)} records); "
            f"jobs in it: {', '.join(known) or 'none'}"
        )
    return entries


def fields(event: Event) -> str:
    """The fields that matter, compactly: scalars as k=v, records as JSON, lists by size
    (a JobGraph's vertices are its own document)."""
    shown = []
    for name, value in event_to_dict(event).items():
        if name in HEADER or value is None:
            continue
        if isinstance(value, list):
            shown.append(f"{name}=[{len(value)}]")
        elif isinstance(value, dict):
            shown.append(f"{name}={json.dumps(value, separators=(',', ':'))}")
        else:
            shown.append(f"{name}={value}")
    return " ".join(shown)


def iso(ms: int) -> str:
    moment = datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
    return moment.replace("+00:00", "Z")


def refused_reports(ordered: list[LogRecord]) -> dict[str, str]:
    """Event id -> reason of every task state report the JobMaster refused."""
    return {
        r.event.rejected_event_id: r.event.reason for r in ordered
        if isinstance(r.event, EventRejected)
        and r.event.rejected_event_type == "TaskExecutionStateChanged"
    }  # fmt: skip
