"""`jobledger produce`: JSON lines in, Avro events on their topics out.

Each line is validated on its own. A bad line is reported with its number and reason and
nothing of it is written; the good lines still go, in transactions, so readers see whole
chunks or nothing.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from confluent_kafka import Producer

from jobledger.schemas import Event, EventSerde, InvalidEventError, topic_name
from jobledger.schemas.json_form import event_from_dict

TYPE_HEADER = "jobledger.type"
CHUNK = 1000


@dataclass(frozen=True)
class RejectedLine:
    line_number: int
    reason: str


@dataclass
class ProduceReport:
    written: int = 0
    rejected: list[RejectedLine] = field(default_factory=list)


def fill_header(data: dict, producer: str) -> dict:
    """Supply the header fields a person typing events should not have to invent."""
    data.setdefault("event_id", str(uuid.uuid4()))
    data.setdefault("event_time", int(time.time() * 1000))
    data.setdefault("producer", producer)
    return data


def parse_lines(lines: Iterable[str], producer: str) -> Iterator[Event | RejectedLine]:
    """Each non-blank line as its event, or as the reason it is not one."""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            if isinstance(data, dict):
                fill_header(data, producer)
            yield event_from_dict(data)
        except json.JSONDecodeError as exc:
            yield RejectedLine(number, f"not JSON: {exc}")
        except InvalidEventError as exc:
            yield RejectedLine(number, str(exc))


def produce_lines(
    lines: Iterable[str], producer: Producer, serde: EventSerde, prefix: str, name: str = "cli"
) -> ProduceReport:
    """Append every valid line's event to its topic, keyed by its owner."""
    report = ProduceReport()
    pending = 0
    producer.begin_transaction()
    for parsed in parse_lines(lines, name):
        if isinstance(parsed, RejectedLine):
            report.rejected.append(parsed)
            continue
        role, key = parsed.route()
        topic = topic_name(role, prefix)
        producer.produce(
            topic,
            key=key.encode(),
            value=serde.encode(parsed, topic),
            headers={TYPE_HEADER: parsed.type_name()},
        )
        pending += 1
        if pending == CHUNK:
            producer.commit_transaction(60)
            report.written += pending
            pending = 0
            producer.begin_transaction()
    producer.commit_transaction(60)
    report.written += pending
    return report
