"""Closed jobs archived: each finished, failed or cancelled job's story kept as an export file
in an archive location, so that a retention deleting its records from the topics takes none
of its debugging away (the way Temporal archives a closed workflow's history).

A job's story is every record of the job (its JobMaster's inputs, which are all of the job
topic's records keyed by the job, and every record elsewhere that names it), the records its
decisions rest on (each record's cause, and that record's cause, back to an input), and the
dead letters of any of those, each record with its place in the log and its provenance. It
is written as `jobledger export` writes a log (log_file.py), with the job's id in the file's
metadata (`ARCHIVED_JOB`): every command that reads an export reads it, and `replay
--verify` knows to re-derive only the job's own JobMaster from it (`derives_whole`), since
the cluster's records in it are a part of their partitions, not all of it.

The location is a local folder or any fsspec URL (`s3://bucket/jobs`, `memory://` in tests);
one file per job, `<location>/<job id>.avro`.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path

import fsspec
from fsspec.implementations.local import LocalFileSystem

from jobledger.schemas.deadletters import DeadLettered
from jobledger.schemas.jobs import JobStatusChanged
from jobledger.schemas.timers import TimerFired
from jobledger.schemas.topics import TopicRole
from jobledger.schemas.types import JobStatus

from .log_file import LogRecord, read_export_metadata, write_export

ARCHIVED_JOB = "jobledger.archived.job"
"""The export metadata key that names the job an archive file is the story of."""

CLOSED = (JobStatus.FINISHED, JobStatus.FAILED, JobStatus.CANCELED)
"""The globally terminal states: a job in one of them has no more story to come."""

SUFFIX = ".avro"
_JOB_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


class ArchiveError(ValueError):
    """An archive location or file that cannot be used as asked; says why in one line."""


def closed_jobs(records: Iterable[LogRecord]) -> list[str]:
    """The jobs the log holds a globally terminal status of, in the order they closed."""
    closed: dict[str, None] = {}
    for record in records:
        event = record.event
        if isinstance(event, JobStatusChanged) and event.to_status in CLOSED:
            closed.setdefault(event.job_id, None)
    return list(closed)


def _names_job(record: LogRecord, job_id: str) -> bool:
    event = record.event
    if record.role is TopicRole.JOB and event.route()[1] == job_id:
        return True
    if isinstance(event, TimerFired):
        return event.owner_id == job_id
    if isinstance(event, DeadLettered):
        return event.original_key == job_id.encode()
    return getattr(event, "job_id", None) == job_id


def story(ordered: list[LogRecord], job_id: str) -> list[LogRecord]:
    """The job's records, the records they rest on (causes, transitively) and the dead
    letters of any of them, in log order."""
    by_id: dict[str, list[LogRecord]] = {}
    for record in ordered:
        by_id.setdefault(record.event.event_id, []).append(record)
    kept = {id(r): r for r in ordered if _names_job(r, job_id)}
    pending = list(kept.values())
    while pending:
        cause = pending.pop().event.cause_event_id
        for found in by_id.get(cause or "", ()):
            if id(found) not in kept:
                kept[id(found)] = found
                pending.append(found)
    places = {(r.role.value, r.partition, r.offset) for r in kept.values()}
    for record in ordered:
        event = record.event
        if (
            isinstance(event, DeadLettered)
            and record.role is TopicRole.DEAD_LETTER
            and (
                (_role_value(event.source_topic), event.source_partition, event.source_offset)
                in places
            )
        ):
            kept[id(record)] = record
    return [r for r in ordered if id(r) in kept]


def _role_value(topic: str) -> str:
    return next((role.value for role in TopicRole if topic.endswith(role.value)), topic)


def _checked(job_id: str) -> str:
    if not _JOB_ID.match(job_id):
        raise ArchiveError(f"{job_id!r} is no job id an archive file may be named by")
    return job_id


def job_url(location: str, job_id: str) -> str:
    """Where the archive of `job_id` is in `location`."""
    return f"{location.rstrip('/')}/{_checked(job_id)}{SUFFIX}"


def archived(location: str) -> dict[str, str]:
    """Job id -> the URL of its archive, for every job archived in `location`."""
    fs, root = fsspec.core.url_to_fs(location)
    if not fs.exists(root):
        return {}
    found = {}
    for path in sorted(fs.ls(root, detail=False)):
        name = path.rstrip("/").rsplit("/", 1)[-1]
        if name.endswith(SUFFIX) and _JOB_ID.match(name[: -len(SUFFIX)]):
            found[name[: -len(SUFFIX)]] = job_url(location, name[: -len(SUFFIX)])
    return found


def write_archive(ordered: list[LogRecord], job_id: str, location: str) -> tuple[str, int]:
    """Write `job_id`'s story to `location`; its URL and how many records it holds. The
    file is written beside its final name and moved there, so a reader never finds half."""
    url = job_url(location, job_id)
    fs, path = fsspec.core.url_to_fs(url)
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    partial = f"{path}.partial"
    with fs.open(partial, "wb") as out:
        count = write_export(story(ordered, job_id), out, {ARCHIVED_JOB: job_id})
    fs.mv(partial, path)
    return url, count


def archived_job(path: Path) -> str | None:
    """The job an export file is the archive of (None: a whole log's export)."""
    return read_export_metadata(path).get(ARCHIVED_JOB)


def local_copy(url: str, cache: Path) -> Path:
    """A local file holding the archive at `url` (a local path is itself; any other URL is
    copied under `cache` once, where the index the debugging commands keep beside a file
    can live too)."""
    fs, path = fsspec.core.url_to_fs(url)
    if isinstance(fs, LocalFileSystem):
        if not os.path.isfile(path):
            raise ArchiveError(f"{url}: no such archive file")
        return Path(path)
    if not fs.isfile(path):
        raise ArchiveError(f"{url}: no such archive file")
    folder = cache / hashlib.sha256(url.encode()).hexdigest()[:16]
    local = folder / path.rsplit("/", 1)[-1]
    stamp = str(fs.info(path).get("size"))
    marker = folder / "size"
    if not local.exists() or not marker.exists() or marker.read_text() != stamp:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        with fs.open(path, "rb") as src, open(local, "wb") as dst:
            shutil.copyfileobj(src, dst)
        marker.write_text(stamp)
    return local
