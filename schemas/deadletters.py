"""Dead letters: input records a service could not even read, kept with the reason and the
original bytes (DESIGN.md rule 7). Valid events that break a state machine are decisions
(EventRejected), not dead letters."""

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
