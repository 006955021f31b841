"""Rejections: an input that breaks a state machine becomes a decision with a reason
(design rule D-3), never an exception that stops a service."""

from __future__ import annotations

from pydantic import Field

from .model import Event
from .timers import TOPIC_OF_OWNER
from .topics import TopicRole
from .types import OwnerKind


class EventRejected(Event):
    """A reducer refused an input that breaks its state machine (unknown job, TaskManager,
    allocation or request; stale fencing token; ...). Nothing changed; `reason` says why."""

    topic_role = TopicRole.JOB
    key_field = "owner_id"
    produced_by = "any reducer"

    scope: OwnerKind = Field(description="Kind of the refusing owner.")
    owner_id: str = Field(description="JobID, ResourceManager id or ResourceID of the owner.")
    rejected_event_id: str = Field(description="event_id of the refused input.")
    rejected_event_type: str = Field(description="Type of the refused input.")
    reason: str = Field(description="Why it was refused.")

    def route(self) -> tuple[TopicRole, str]:
        """Rejections stay with their owner, beside the input they refuse."""
        return TOPIC_OF_OWNER.get(self.scope, TopicRole.JOB), self.owner_id
