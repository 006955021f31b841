"""Base classes of the event catalog.

Every event is a frozen pydantic model. The `.avsc` files beside this module are generated
from these models (`jobledger schemas write`) and a test regenerates them and compares, so the
models and the published schemas cannot drift apart.

Conventions that the Avro generator (`avro.py`) relies on:
- `int` fields are Avro `long`; annotate with `Int32` where Flink uses a Java `int`.
- an optional field (`X | None = None`) is the union `["null", X]` with default null;
- every field added after a schema's first version has a default (Avro evolution rules);
- every enum is a `CatalogEnum` whose `UNKNOWN` member is the Avro enum default, so a reader
  meets a symbol added by a newer writer as `UNKNOWN` instead of failing.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from .topics import TopicRole

NAMESPACE = "jobledger"

MAX_EVENT_BYTES = 512 * 1024
"""The largest encoded event jobledger accepts where events enter (`jobledger produce`):
half of Apache Kafka's default `max.message.bytes`, so an event always fits a record, with room
for the dead letter that carries it."""

SERVICE_PRODUCERS = frozenset(
    {"jobmaster", "slotpool", "resourcemanager", "taskexecutor", "runtime", "clock"}
)
"""The `producer` names of the services' reducers, runtime and clock: only their decisions
carry them, never a client's input."""


class AvroInt:
    """Marker: this Python `int` is an Avro `int` (32-bit), not the default `long`."""


Int32 = Annotated[int, Field(ge=-(2**31), le=2**31 - 1), AvroInt()]


class CatalogEnum(StrEnum):
    """An Avro enum. `UNKNOWN` is the default symbol readers fall back to."""


class Record(BaseModel):
    """A named Avro record nested inside events (ResourceProfile, JobVertex, ...)."""

    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        frozen=True,
        ser_json_bytes="base64",
        val_json_bytes="base64",
    )


class Event(Record):
    """The header every event carries, then the event's own fields.

    `cause_event_id` names the input a decision was derived from (design rule D-3); inputs
    from outside actors leave it null.
    """

    event_id: str = Field(description="Unique id; derived deterministically for decisions.")
    event_time: int = Field(description="Event time, milliseconds since the Unix epoch.")
    producer: str = Field(description="Who appended the event (service, runner, cli, ...).")
    cause_event_id: str | None = Field(
        default=None, description="The event this decision was derived from; null for inputs."
    )

    topic_role: ClassVar[TopicRole]
    """The inbox the event is written to: the topic of the reducer that consumes it."""
    key_field: ClassVar[str]
    """The field whose value is the Kafka key, i.e. the owner the event is routed to."""
    produced_by: ClassVar[str]
    """Who appends this event, for the catalog's documentation."""

    HEADER_FIELDS: ClassVar[tuple[str, ...]] = (
        "event_id",
        "event_time",
        "producer",
        "cause_event_id",
    )

    @classmethod
    def type_name(cls) -> str:
        """The event's type: the Avro record name and the JSON `type` discriminator."""
        return cls.__name__

    @classmethod
    def full_name(cls) -> str:
        return f"{NAMESPACE}.{cls.__name__}"

    def route(self) -> tuple[TopicRole, str]:
        """The topic role and the key this event is appended with."""
        return self.topic_role, self.__dict__[self.key_field]
