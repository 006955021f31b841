"""Where the ResourceManager puts a slot request: which TaskExecutor's free slot it gets.

Flink's `cluster.evenly-spread-out-slots` chooses between SPREAD (the least used TaskExecutor)
and PACK (fill one TaskExecutor before the next); ties go to the TaskExecutor registered
first. Scanning every TaskExecutor per request made a 1,000-TaskExecutor cluster spend most of
its replay there, so the free TaskExecutors are kept in one heap per distinct slot profile,
ordered by (utilization, registration), with stale entries dropped lazily when they surface.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Mapping
from enum import StrEnum
from typing import Protocol

from jobledger.schemas.types import ResourceProfile

from .resource_profile import is_matching


class SlotPlacement(StrEnum):
    """SPREAD picks the least used TaskExecutor, PACK fills one before the next
    (Flink's `cluster.evenly-spread-out-slots`)."""

    SPREAD = "SPREAD"
    PACK = "PACK"


class Placeable(Protocol):
    """What the index needs to know of a registered TaskExecutor."""

    resource_id: str
    resource_profile: ResourceProfile
    registration: int
    free: int

    def utilization(self) -> float: ...


Entry = tuple[float, int, str]
"""(placement order key, registration number, resource id)."""


class FreeSlotIndex:
    """TaskExecutors with free slots, by slot profile, in placement order.

    `changed(te)` must be called whenever a TaskExecutor registers or its free count changes,
    `removed(te)` when it leaves. Only the latest entry of each TaskExecutor is valid; older
    ones are dropped when they reach the top of a heap, or all at once when a heap has grown
    to twice the TaskExecutors it could hold.
    """

    def __init__(self, placement: SlotPlacement) -> None:
        self.placement = placement
        self.heaps: dict[ResourceProfile, list[Entry]] = {}
        self.latest: dict[str, tuple[Entry, ResourceProfile]] = {}
        self.free_by_executor: dict[str, int] = {}
        self.free_total = 0

    def changed(self, te: Placeable) -> None:
        self.free_total += te.free - self.free_by_executor.get(te.resource_id, 0)
        self.free_by_executor[te.resource_id] = te.free
        if not te.free:
            self.latest.pop(te.resource_id, None)
            return
        utilization = te.utilization()
        key = utilization if self.placement is SlotPlacement.SPREAD else -utilization
        entry = (key, te.registration, te.resource_id)
        self.latest[te.resource_id] = (entry, te.resource_profile)
        heap = self.heaps.get(te.resource_profile)
        if heap is None:  # not `setdefault`, which makes an empty list on every change
            heap = self.heaps[te.resource_profile] = []
        heapq.heappush(heap, entry)
        if len(heap) > 2 * len(self.latest) + 64:
            heap[:] = [e for e, p in self.latest.values() if p == te.resource_profile]
            heapq.heapify(heap)

    def removed(self, te: Placeable) -> None:
        self.free_total -= self.free_by_executor.pop(te.resource_id, 0)
        self.latest.pop(te.resource_id, None)

    def pick(
        self,
        request: ResourceProfile,
        executors: Mapping[str, Placeable],
        blocked: Collection[str] = (),
    ) -> Placeable | None:
        """The TaskExecutor whose free slot serves `request`, or None if no free slot fits;
        never one of `blocked`."""
        if not self.free_total:
            return None
        if blocked:
            return self._pick_outside(request, executors, frozenset(blocked))
        best: Entry | None = None
        for profile, heap in self.heaps.items():
            if not is_matching(profile, request):
                continue
            while heap and self.latest.get(heap[0][2], (None,))[0] != heap[0]:
                heapq.heappop(heap)
            if heap and (best is None or heap[0] < best):
                best = heap[0]
        return executors[best[2]] if best else None

    def _pick_outside(
        self, request: ResourceProfile, executors: Mapping[str, Placeable], blocked: frozenset[str]
    ) -> Placeable | None:
        """`pick` past the blocked ones: a scan of the current entries, which only the rare
        request of a job that blocked a TaskExecutor pays (the heaps' tops may be blocked)."""
        candidates = [
            entry
            for entry, profile in self.latest.values()
            if entry[2] not in blocked and is_matching(profile, request)
        ]
        return executors[min(candidates)[2]] if candidates else None
