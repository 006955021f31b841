"""Dispatcher: where a client's JobGraph becomes a job, as Flink's `Dispatcher#submitJob`
makes it one, and where a client asks for a job's cancellation (`Dispatcher#cancelJob`).

A submission is three events appended in one transaction: the JobGraph (`JobSubmitted`), the
leadership of a JobMaster for it under a fresh JobMasterId (Flink's leader election grants
it when the Dispatcher starts the JobMaster) and that JobMaster's connection to the
ResourceManager. Written apart, a JobGraph without its leader would stay CREATED forever.

Invariants:
- a JobGraph is checked before anything is written: JSON data, the event model (field names
  and types), the checks of every client input (`produce.check_data`: Avro-encodable, within
  the size limit) and the ExecutionGraph it expands to (vertex ids, edges, cycles,
  parallelism), so a JobGraph the JobMaster would refuse never reaches the log;
- it is converted once: the document to its event, the event to the Avro bytes its check
  measured, which are the bytes written;
- the header of the submission (event id, time, producer) is jobledger's, never the file's.
"""

from __future__ import annotations

import math
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

from ..control.execution_graph import ExecutionGraph, InvalidJobGraph, JobLimits
from ..control.resource_manager import ResourceManagerConfig
from ..control.tenants import principal_refusal
from ..kafka import append_events, produce_encoded, produce_event
from .produce import ReadyLine, RejectedLine, check_data

JOB_GRAPH_FIELDS = tuple(f for f in JobSubmitted.model_fields if f not in Event.HEADER_FIELDS)
"""What a JobGraph document holds: the fields of `JobSubmitted` without the event header."""


class JobGraphRefused(ValueError):
    """A JobGraph that cannot be submitted; the message names the field or the rule."""


def now_ms() -> int:
    """Event time of what a client writes: the wall clock, in ms."""
    return int(time.time() * 1000)


def check_job_graph(
    graph: Any,
    producer: str,
    serde: EventSerde,
    prefix: str,
    job_id: str | None = None,
    job_name: str | None = None,
    limits: JobLimits | None = None,
    principal: str | None = None,
) -> ReadyLine:
    """The `JobSubmitted` of a JobGraph document (its JSON form, with or without
    `"type": "JobSubmitted"` and an old header, which is replaced), checked as the module
    docstring says and encoded by `serde` for its topic under `prefix`: what `submit` writes.
    `job_id` overrides the document's (none: a fresh 32-hex-digit id, as Flink's JobID);
    `job_name` is used where the document has none; `limits` are the services' (`-D
    jobledger.job.max-subtasks=...`; None: the defaults), which the JobMaster enforces again;
    `principal` overrides the document's (the tenant the job counts against, docs/operations/
    tenants.md), refused here if the JobMaster would refuse it."""
    if not isinstance(graph, dict):
        raise JobGraphRefused(f"a JobGraph is a JSON object, not {type(graph).__name__}")
    kind = graph.get("type", JobSubmitted.type_name())
    if kind != JobSubmitted.type_name():
        raise JobGraphRefused(f"type is {kind!r}: a JobGraph is a JobSubmitted, if it names one")
    fields = {k: v for k, v in graph.items() if k != "type" and k not in Event.HEADER_FIELDS}
    fields["job_id"] = job_id or fields.get("job_id") or uuid.uuid4().hex
    if job_name is not None:
        fields.setdefault("job_name", job_name)
    if principal is not None:
        fields["principal"] = principal
    _check_json_data(fields, "the JobGraph")
    checked = check_data(1, {"type": JobSubmitted.type_name(), **fields}, producer, serde, prefix)
    if isinstance(checked, RejectedLine):
        raise JobGraphRefused(checked.reason)
    assert isinstance(checked.event, JobSubmitted)
    refusal = principal_refusal(checked.event.principal)
    if refusal is not None:
        raise JobGraphRefused(refusal)
    try:
        ExecutionGraph.build(checked.event, lambda vertex, subtask, attempt: "", limits=limits)
    except InvalidJobGraph as exc:
        raise JobGraphRefused(f"invalid JobGraph: {exc}") from None
    return checked


def _check_json_data(value: Any, at: str) -> None:
    """Refuse what JSON cannot hold, which a builder's dict may (a parsed file never does): an
    object, NaN or an infinity. Checked in place, as the document is not written out as JSON
    and read back."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str | int | float | None):  # bool is an int
                raise JobGraphRefused(f"not JSON data: {at} has a {type(key).__name__} key")
            _check_json_data(item, f"{at}.{key}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check_json_data(item, f"{at}[{index}]")
    elif isinstance(value, float) and not math.isfinite(value):
        raise JobGraphRefused(f"not JSON data: {at} is {value}, not a JSON number")
    elif not isinstance(value, str | int | float | None):  # bool is an int
        raise JobGraphRefused(f"not JSON data: {at} is a {type(value).__name__}")


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


def submit(
    client: Producer, prefix: str, job: ReadyLine | JobSubmitted, serde: EventSerde
) -> list[Event]:
    """Append the job's submission in one transaction; the events written. A JobGraph checked
    by `check_job_graph` (for this `prefix`) goes as the bytes its check encoded; a
    `JobSubmitted` built in code (a benchmark's, a test's) is encoded here."""
    submitted = job.event if isinstance(job, ReadyLine) else job
    events = submission(submitted, submitted.producer)
    client.begin_transaction()
    if isinstance(job, ReadyLine):
        produce_encoded(client, job.topic, job.key, job.value, submitted.type_name())
    else:
        produce_event(client, prefix, submitted, serde)
    for event in events[1:]:
        produce_event(client, prefix, event, serde)
    client.commit_transaction(30)
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
