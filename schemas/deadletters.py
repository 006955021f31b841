"""Dead letters: input records a service could not even read, kept with the reason and the
original bytes (design rule D-7). Valid events that break a state machine are decisions
(EventRejected), not dead letters.

A dead letter always fits on its topic: a record whose key and value together are larger than
an event may be (`MAX_EVENT_BYTES`) is kept by its position and the SHA-256 digest of its
value instead of its bytes; the record itself stays where it was read."""

from __future__ import annotations

from pydantic import Field

from .model import Event, Int32
from .topics import TopicRole


class DeadLettered(Event):
    """A record of an input topic that is not a decodable, valid event."""

    topic_role = TopicRole.DEAD_LETTER
    key_field = "source_topic"
    produced_by = "the service runtime"

    source_topic: str = Field(description="Topic the record was read from.")
    source_partition: Int32 = Field(description="Its partition.")
    source_offset: int = Field(description="Its offset.")
    original_key: bytes | None = Field(default=None, description="The record's key, as read.")
    original_value: bytes | None = Field(default=None, description="The record's value, as read.")
    reason: str = Field(description="Why it could not be read.")
    original_value_sha256: str | None = Field(
        default=None,
        description="SHA-256 (hex) of the record's value where the dead letter leaves the value "
        "out (too large to carry); the record is at source_topic/source_partition/source_offset.",
    )
