"""Input events for reducer tests: unique ids, increasing event times, terse construction."""

from __future__ import annotations

from typing import Any, TypeVar

from jobledger.schemas import Event
from jobledger.schemas.types import ResourceProfile, ResourceProfileKind

E = TypeVar("E", bound=Event)

ANY = ResourceProfile(kind=ResourceProfileKind.ANY)
UNKNOWN = ResourceProfile()


def profile(cpu: float, heap: int = 0, managed: int = 0) -> ResourceProfile:
    return ResourceProfile(
        kind=ResourceProfileKind.SPECIFIED,
        cpu_cores=cpu,
        task_heap_memory_mb=heap,
        managed_memory_mb=managed,
    )


class Clock:
    """Makes input events; `at` sets the event time, otherwise time moves 1 ms per event."""

    def __init__(self, start: int = 1_000) -> None:
        self.now = start
        self.count = 0

    def __call__(self, cls: type[E], at: int | None = None, **fields: Any) -> E:
        self.count += 1
        self.now = at if at is not None else self.now + 1
        return cls(event_id=f"in-{self.count}", event_time=self.now, producer="test", **fields)


def types(events: list[Event]) -> list[str]:
    return [e.type_name() for e in events]
