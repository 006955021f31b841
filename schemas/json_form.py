"""The JSON form of events: the Avro fields plus a `type` discriminator naming the event.

Used by the CLI, tests and humans. Validation is strict (no string-to-number coercion, no
unknown fields), so a mistyped line is reported instead of guessed at.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from .catalog import EVENTS_BY_NAME
from .model import Event


class InvalidEventError(ValueError):
    """A JSON event that cannot become an event; the message is the reason."""


def event_to_dict(event: Event) -> dict[str, Any]:
    return {"type": event.type_name(), **event.model_dump(mode="json")}


def event_to_json(event: Event) -> str:
    return json.dumps(event_to_dict(event), separators=(",", ":"))


def event_from_dict(data: Any) -> Event:
    """Validate a parsed JSON object into its event model."""
    if not isinstance(data, dict):
        raise InvalidEventError(f"expected a JSON object, got {type(data).__name__}")
    type_name = data.get("type")
    if not isinstance(type_name, str):
        raise InvalidEventError("missing string field 'type' naming the event")
    cls = EVENTS_BY_NAME.get(type_name)
    if cls is None:
        raise InvalidEventError(f"unknown event type {type_name!r}")
    fields = {k: v for k, v in data.items() if k != "type"}
    try:
        return cls.model_validate_json(json.dumps(fields))
    except ValidationError as exc:
        raise InvalidEventError(_describe(type_name, exc)) from None


def event_from_json(text: str) -> Event:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidEventError(f"not JSON: {exc}") from None
    return event_from_dict(data)


def _describe(type_name: str, exc: ValidationError) -> str:
    problems = "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or '(event)'}: {err['msg']}" for err in exc.errors()
    )
    return f"invalid {type_name}: {problems}"
