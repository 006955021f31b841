"""Time: the only way timeouts happen, so a replay fires them exactly where they fired live."""

from __future__ import annotations

from pydantic import Field

from .model import Event
from .topics import TopicRole
from .types import OwnerKind

CLOCK = "clock"
"""The `producer` of every TimerFired: the services' clock, the only writer that moves time."""

TOPIC_OF_OWNER = {
    OwnerKind.JOB: TopicRole.JOB,
    OwnerKind.RESOURCE_MANAGER: TopicRole.RESOURCE_MANAGER,
    OwnerKind.TASK_EXECUTOR: TopicRole.TASK_EXECUTOR,
}


class TimerFired(Event):
    """The clock reached `event_time` for one owner; its reducer fires every deadline due.

    `timer_key` names one timer when the clock fires a single one; null is a plain tick.
    """

    topic_role = TopicRole.JOB
    key_field = "owner_id"
    produced_by = "the service runtime's clock"

    scope: OwnerKind = Field(description="Kind of owner: JOB, RESOURCE_MANAGER, TASK_EXECUTOR.")
    owner_id: str = Field(description="JobID, ResourceManager id or ResourceID of the owner.")
    timer_key: str | None = Field(default=None, description="One timer, or null for a tick.")

    def route(self) -> tuple[TopicRole, str]:
        """Timers go to their owner's inbox; an UNKNOWN scope falls back to the job topic."""
        return TOPIC_OF_OWNER.get(self.scope, TopicRole.JOB), self.owner_id
