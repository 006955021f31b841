"""`jobledger tail`: a topic's events as JSON lines, for people and shell pipelines."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import TextIO

from confluent_kafka import Consumer

from jobledger.schemas import DecodeError, EventSerde, event_to_json

from .kafka import read_topic


def tail(
    consumer: Consumer,
    topic: str,
    serde: EventSerde,
    from_beginning: bool,
    max_events: int | None,
    exit_at_end: bool,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
) -> int:
    """Print events until `max_events` or, with `exit_at_end`, the end of every partition.

    A record that does not decode is reported on `err` with its position and skipped.
    Returns the number of events printed.
    """
    printed = 0
    if max_events == 0:
        return printed
    for line in _lines(consumer, topic, serde, from_beginning, exit_at_end, err):
        print(line, file=out, flush=True)
        printed += 1
        if printed == max_events:
            break
    return printed


def _lines(
    consumer: Consumer,
    topic: str,
    serde: EventSerde,
    from_beginning: bool,
    exit_at_end: bool,
    err: TextIO,
) -> Iterator[str]:
    for msg in read_topic(consumer, topic, from_beginning, stop_at_end=exit_at_end):
        try:
            yield event_to_json(serde.decode(msg.value(), topic))
        except DecodeError as exc:
            print(f"{topic}/{msg.partition()}@{msg.offset()}: skipped: {exc}", file=err)
