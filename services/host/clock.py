"""The services' clock: the only place time enters the control plane. When an owner's next
deadline has come, the clock appends a TimerFired for it to the owner's partition; the
reducers see time only when they read it back, so replay fires every timeout where it fired
live."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

from jobledger.schemas.timers import CLOCK, TOPIC_OF_OWNER, TimerFired
from jobledger.schemas.topics import TopicRole

from ..control.driver import ReducerDriver

OWNER_OF_ROLE = {role: kind for kind, role in TOPIC_OF_OWNER.items()}


@dataclass
class Clock:
    interval_ms: int
    """How often to look for owners whose deadline has come (0: no clock)."""
    last_tick: float = field(default_factory=time.monotonic)

    def tick(self) -> int | None:
        """The wall-clock time in ms when a look is due now, else None."""
        if not self.interval_ms or (time.monotonic() - self.last_tick) * 1000 < self.interval_ms:
            return None
        self.last_tick = time.monotonic()
        return int(time.time() * 1000)


def timers_fired(driver: ReducerDriver, role: TopicRole, now_ms: int) -> list[TimerFired]:
    """A TimerFired for each owner of the partition whose deadline is at or before `now_ms`."""
    scope = OWNER_OF_ROLE[role]
    return [
        TimerFired(
            event_id=uuid.uuid4().hex,
            event_time=now_ms,
            producer=CLOCK,
            scope=scope,
            owner_id=owner,
        )
        for owner in driver.due_timers(role, now_ms)
    ]
