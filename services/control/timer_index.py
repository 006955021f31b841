"""The next timer of every owner of one topic (its JobMasters, or its TaskExecutors), kept as
owners change, so the clock's look each second costs the owners changed since the last look,
not a pass over all of them: with 100,000 TaskExecutors a pass took ~50 ms per partition of
12,500, every second, on each of eight partitions (bench/README.md, "The cluster's
throughput"). Only the clock asks; what it is told is what a pass would say."""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field

from .reducer import Reducer


@dataclass
class TimerIndex:
    changed: set[str] = field(default_factory=set)
    """Owners that reduced an input since the last look: their next timer may have moved."""
    known: dict[str, int] = field(default_factory=dict)
    """Each owner's next timer as last looked at (absent: none)."""
    heap: list[tuple[int, str]] = field(default_factory=list)
    """(next timer, owner) of `known`, and stale entries of timers since moved."""
    primed: bool = False
    """Whether every owner was looked at once (a driver rebuilt from a snapshot starts with
    owners this index never saw change)."""

    def due(self, owners: Mapping[str, Reducer], now: int) -> list[str]:
        """The owners whose next timer is at or before `now`, by name."""
        if not self.primed:
            self.changed.update(owners)
            self.primed = True
        for owner in self.changed:
            reducer = owners.get(owner)
            at = reducer.next_timer() if reducer is not None else None
            if at is None:
                self.known.pop(owner, None)
            elif self.known.get(owner) != at:
                self.known[owner] = at
                heapq.heappush(self.heap, (at, owner))
        self.changed.clear()
        if len(self.heap) > 2 * len(self.known) + 1024:
            self.heap = [(at, owner) for owner, at in self.known.items()]
            heapq.heapify(self.heap)
        due: set[tuple[int, str]] = set()
        while self.heap and self.heap[0][0] <= now:
            at, owner = heapq.heappop(self.heap)
            if self.known.get(owner) == at and owner in owners:
                due.add((at, owner))
        for entry in due:  # still due until a TimerFired changes the owner
            heapq.heappush(self.heap, entry)
        return sorted(owner for _, owner in due)
