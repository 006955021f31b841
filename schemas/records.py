"""What both wire formats share (`serde.py`'s single-object encoding and
`confluent_serde.py`'s Confluent format): the error for bytes that are no event, and a decoded
Avro record made a model."""

from __future__ import annotations

from typing import Any

from .construct import from_avro
from .model import Event

CONFLUENT_MAGIC = 0
"""The first byte of a record in the Confluent wire format."""


class DecodeError(ValueError):
    """Bytes that are not a decodable event; the message says why (for the dead-letter topic)."""


def event_from_avro_dict(cls: type[Event], record: dict[str, Any]) -> Event:
    """Build the model from a decoded Avro record. The schema typed every value already (the
    schemas are generated from the models), so it is built without validating it again
    (`construct.from_avro`); a record that is not one of `cls` is a DecodeError."""
    try:
        return from_avro(cls)(record)
    except (KeyError, TypeError, ValueError) as exc:
        raise DecodeError(f"{cls.type_name()} does not fit its model: {exc!r}") from exc
