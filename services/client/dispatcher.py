"""Dispatcher: where a client's JobGraph becomes a job, as Flink's `Dispatcher#submitJob`
makes it one, and where a client asks for a job's cancellation (`Dispatcher#cancelJob`).

A submission is three events appended in one transaction: the JobGraph (`JobSubmitted`), the
leadership of a JobMaster for it under a fresh JobMasterId (Flink's leader election grants
it when the Dispatcher starts the JobMaster) and that JobMaster's connection to the
ResourceManager. Written apart, a JobGraph without its leader would stay CREATED forever.

Invariants:
- a JobGraph is checked before anything is written: the event model (field names and
  types), the checks of every client input (`produce.check_line`: Avro-encodable, within the
  size limit) and the ExecutionGraph it expands to (vertex ids, edges, cycles, parallelism),
  so a JobGraph the JobMaster would refuse never reaches the log;
- the header of the submission (event id, time, producer) is jobledger's, never the file's.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from confluent_kafka import Producer

from jobledger.schemas import Event, EventSerde
from jobledger.schemas.cluster import ResourceManagerConnected
from jobledger.schemas.jobs import (
    JobCancellationRequested,
    JobMasterLeadershipGranted,
    JobSubmitted,
)

from ..control.execution_graph import ExecutionGraph, InvalidJobGraph
from ..control.resource_manager import ResourceManagerConfig
from ..kafka import append_events
from .produce import RejectedLine, check_line

JOB_GRAPH_FIELDS = tuple(f for f in JobSubmitted.model_fields if f not in Event.HEADER_FIELDS)
"""What a JobGraph document holds: the fields of `JobSubmitted` without the event header."""


class JobGraphRefused(ValueError):
    """A JobGraph that cannot be submitted; the message names the field or the rule."""


def now_ms() -> int:
    """Event time of what a client writes: the wall clock, in ms."""
    return int(time.time() * 1000)


def job_submitted(
    graph: Any, producer: str, job_id: str | None = None, job_name: str | None = None
) -> JobSubmitted:
    """The `JobSubmitted` event of a JobGraph document (its JSON form, with or without
    `"type": "JobSubmitted"` and an old header, which is replaced), checked as the module
    docstring says. `job_id` overrides the document's (none: a fresh 32-hex-digit id, as
    Flink's JobID); `job_name` is used where the document has none."""
    if not isinstance(graph, dict):
        raise JobGraphRefused(f"a JobGraph is a JSON object, not {type(graph).__name__}")
    kind = graph.get("type", JobSubmitted.type_name())
    if kind != JobSubmitted.type_name():
        raise JobGraphRefused(f"type is {kind!r}: a JobGraph is a JobSubmitted, if it names one")
    fields = {k: v for k, v in graph.items() if k != "type" and k not in Event.HEADER_FIELDS}
    fields["job_id"] = job_id or fields.get("job_id") or uuid.uuid4().hex
    if job_name is not None:
        fields.setdefault("job_name", job_name)
    try:
        line = json.dumps({"type": JobSubmitted.type_name(), **fields})
    except (TypeError, ValueError) as exc:  # a builder's dict holding something not JSON
        raise JobGraphRefused(f"not JSON data: {exc}") from None
    checked = check_line(1, line, producer, EventSerde(), "")
    if isinstance(checked, RejectedLine):
        raise JobGraphRefused(checked.reason)
    job = checked.event
    assert isinstance(job, JobSubmitted)
    try:
        ExecutionGraph.build(job, lambda vertex, subtask, attempt: "")
    except InvalidJobGraph as exc:
        raise JobGraphRefused(f"invalid JobGraph: {exc}") from None
    return job


def submission(job: JobSubmitted, producer: str) -> list[Event]:
    """What starts a job: the JobGraph, its JobMaster's leadership and that JobMaster's
    connection to the ResourceManager."""
    at = now_ms()
    return [
        job,
        JobMasterLeadershipGranted(
            event_id=uuid.uuid4().hex, event_time=at, producer=producer, job_id=job.job_id,
            job_master_id=f"jm-{uuid.uuid4().hex}",
        ),
        ResourceManagerConnected(
            event_id=uuid.uuid4().hex, event_time=at, producer=producer, job_id=job.job_id,
            resource_manager_id=ResourceManagerConfig().resource_manager_id,
        ),
    ]  # fmt: skip


def submit(client: Producer, prefix: str, job: JobSubmitted, serde: EventSerde) -> list[Event]:
    """Append the job's submission in one transaction; the events written."""
    events = submission(job, job.producer)
    append_events(client, prefix, events, serde)
    return events


def cancel(
    client: Producer, prefix: str, job_id: str, producer: str, serde: EventSerde
) -> JobCancellationRequested:
    """Ask the job's JobMaster to cancel it; the request written."""
    request = JobCancellationRequested(
        event_id=uuid.uuid4().hex, event_time=now_ms(), producer=producer, job_id=job_id
    )
    append_events(client, prefix, [request], serde)
    return request
