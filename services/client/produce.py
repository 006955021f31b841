"""`jobledger produce`: JSON lines in, Avro events on their topics out.

Every line is checked before anything is sent: that it is JSON (no NaN or Infinity), a valid
event, an input a client may append (not a decision or a clock's TimerFired, which the
services write; no cause; no service's name as producer), encodable in Avro (every long fits
64 bits), no larger than `MAX_EVENT_BYTES` and dated no further ahead of this machine's clock
than the services admit (`event_time.MAX_AHEAD_MS`). By default one bad line stops the
whole file and nothing is written; `skip_invalid` writes the good lines and reports the bad ones.
Sending goes in transactions of `CHUNK` events; if the broker fails part way, the report says
exactly which lines were written.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaException, Producer

from jobledger.schemas import Event, EventSerde, InvalidEventError, topic_name
from jobledger.schemas.deadletters import DeadLettered
from jobledger.schemas.json_form import event_from_dict
from jobledger.schemas.model import MAX_EVENT_BYTES, SERVICE_PRODUCERS
from jobledger.schemas.rejections import EventRejected
from jobledger.schemas.timers import TimerFired

from ..control.event_time import MAX_AHEAD_MS, ahead_refusal
from ..kafka import produce_encoded

CHUNK = 1000
SERVICE_ONLY = (DeadLettered, EventRejected, TimerFired)
"""Events only the services write: a client that appends one forges a service's decision, or
moves time (time reaches the reducers only through the services' clock)."""


@dataclass(frozen=True)
class RejectedLine:
    line_number: int
    reason: str


@dataclass(frozen=True)
class ReadyLine:
    """A line that passed every check: its event, topic and encoded value."""

    line_number: int
    event: Event
    topic: str
    key: bytes
    value: bytes


@dataclass
class ProduceReport:
    written: int = 0
    rejected: list[RejectedLine] = field(default_factory=list)
    failure: str | None = None
    """Why sending stopped part way (a broker error); `written` lines went, the rest did not."""
    last_written_line: int = 0


def fill_header(data: dict, producer: str) -> dict:
    """Supply the header fields a person typing events should not have to invent."""
    data.setdefault("event_id", str(uuid.uuid4()))
    data.setdefault("event_time", int(time.time() * 1000))
    data.setdefault("producer", producer)
    return data


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _as_input(event: Event) -> str | None:
    """Why `event` is not something a client may append, or None."""
    if isinstance(event, SERVICE_ONLY):
        return f"{event.type_name()} is written by the services only, never by a client"
    if event.producer in SERVICE_PRODUCERS:
        return f"producer {event.producer!r} is the name of a jobledger service, not a client's"
    if event.cause_event_id is not None:
        return "cause_event_id is for decisions the services derive; a client's input has none"
    return None


def check_line(
    number: int, line: str, producer: str, serde: EventSerde, prefix: str
) -> ReadyLine | RejectedLine:
    """The line as an event ready to send, or the reason it cannot be one."""
    try:
        data = json.loads(line, parse_constant=_refuse_constant)
    except ValueError as exc:  # JSONDecodeError, or NaN / Infinity
        return RejectedLine(number, f"not JSON: {exc}")
    return check_data(number, data, producer, serde, prefix)


def check_data(
    number: int, data: Any, producer: str, serde: EventSerde, prefix: str
) -> ReadyLine | RejectedLine:
    """`check_line` past the parsing: JSON data already parsed (a JobGraph document) as an
    event ready to send, encoded once for its topic, or the reason it cannot be one."""
    if isinstance(data, dict):
        fill_header(data, producer)
    try:
        event = event_from_dict(data)
    except InvalidEventError as exc:
        return RejectedLine(number, str(exc))
    refusal = _as_input(event)
    if refusal is not None:
        return RejectedLine(number, refusal)
    role, key = event.route()
    topic = topic_name(role, prefix)
    try:
        value = serde.encode(event, topic)
    except (ValueError, OverflowError, TypeError) as exc:  # e.g. a long beyond 64 bits
        return RejectedLine(number, f"not encodable in Avro: {exc}")
    if len(value) > MAX_EVENT_BYTES:
        return RejectedLine(
            number, f"{len(value)} bytes encoded, more than the {MAX_EVENT_BYTES} an event may be"
        )
    ahead = ahead_refusal(event.event_time, int(time.time() * 1000), MAX_AHEAD_MS)
    if ahead is not None:
        return RejectedLine(number, ahead)
    return ReadyLine(number, event, topic, key.encode(), value)


def check_lines(
    lines: Iterable[str], producer: str, serde: EventSerde, prefix: str
) -> Iterator[ReadyLine | RejectedLine]:
    for number, line in enumerate(lines, start=1):
        if line.strip():
            yield check_line(number, line, producer, serde, prefix)


def produce_lines(
    lines: Iterable[str],
    producer: Producer,
    serde: EventSerde,
    prefix: str,
    name: str = "cli",
    skip_invalid: bool = False,
) -> ProduceReport:
    """Check every line, then append the events to their topics, keyed by their owner."""
    report = ProduceReport()
    ready: list[ReadyLine] = []
    for checked in check_lines(lines, name, serde, prefix):
        if isinstance(checked, RejectedLine):
            report.rejected.append(checked)
        else:
            ready.append(checked)
    if report.rejected and not skip_invalid:
        return report
    for start in range(0, len(ready), CHUNK):
        chunk = ready[start : start + CHUNK]
        try:
            _send(producer, chunk)
        except KafkaException as exc:
            report.failure = str(exc.args[0] if exc.args else exc)
            return report
        report.written += len(chunk)
        report.last_written_line = chunk[-1].line_number
    return report


def _send(producer: Producer, chunk: list[ReadyLine]) -> None:
    """One transaction; aborted if the broker refuses any of it, so nothing of it shows."""
    producer.begin_transaction()
    try:
        for line in chunk:
            produce_encoded(producer, line.topic, line.key, line.value, line.event.type_name())
        producer.commit_transaction(60)
    except KafkaException:
        producer.abort_transaction(60)
        raise
