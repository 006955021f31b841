"""What the SlotPool tells its user about slot requests, and when.

Flink's requestNewAllocatedSlot and allocateAvailableSlot answer with a future the pool
completes; here the pool derives the decision that completes a request and tells its
SlotRequestListener (the job's Scheduler) of it. Kept apart from the pool so that this seam,
the one place the pool calls back into its user, shows in the imports.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from jobledger.schemas.slots import SlotRequestFailed, SlotRequestFulfilled, SlotRequestTimedOut

from .decisions import Decisions

Completion = SlotRequestFulfilled | SlotRequestFailed | SlotRequestTimedOut
"""A decision that completes a slot request (Flink completes the request's future)."""

F = TypeVar("F", bound=Callable[..., None])


class SlotRequestListener(Protocol):
    """Who hears what became of the pool's slot requests, one call per completed future."""

    def on_slot_request_fulfilled(self, fulfilled: SlotRequestFulfilled, out: Decisions) -> None:
        """The future completed with a slot (allocated to the request)."""

    def on_slot_request_failed(self, failed: SlotRequestFailed, out: Decisions) -> None:
        """The future completed exceptionally: released while waiting, or its slot was lost."""

    def on_slot_request_timed_out(self, timed_out: SlotRequestTimedOut, out: Decisions) -> None:
        """The future completed with a TimeoutException: no slot within the request timeout."""


class CompletingPool(Protocol):
    """What `completes_requests` needs of the pool (the SlotPool, without importing it)."""

    completed: list[Completion]
    told: int

    def tell(self, completion: Completion, out: Decisions) -> None: ...

    def send_held_requests(self, out: Decisions) -> None: ...


def completes_requests(operation: F) -> F:
    """Mark a SlotPool operation (its last argument the Decisions) that may complete slot
    requests (the pool keeps them in `completed`). The listener hears of them once the
    operation has derived all its decisions, so it never sees the pool half-changed nor puts
    its reactions among the pool's decisions.

    Each completion is heard exactly once, in order, and only by the outermost operation: an
    operation the listener calls while it reacts adds what it completes to the same queue and
    returns, and the outermost one tells of it once the listener's reaction is done. (Telling
    a completion twice made the scheduler take a deployed attempt for an outdated one and hand
    its slot to another: two attempts in one slot, tests/control/test_scheduler.py. Telling it from
    within the nested operation made each hand-over of a freed slot one call deeper: a job
    cancelled with a few hundred requests pending raised RecursionError,
    tests/control/test_slot_hand_over.py.)

    Then the requests the pool held back for its window to the ResourceManager go, as far as
    the requests completed (and those the listener made meanwhile) left room."""

    @functools.wraps(operation)
    def run(pool: CompletingPool, *args: Any) -> None:
        out: Decisions = args[-1]
        outermost = not pool.completed
        operation(pool, *args)
        if not outermost:
            return
        try:
            while pool.told < len(pool.completed):
                pool.told += 1
                pool.tell(pool.completed[pool.told - 1], out)
        finally:
            pool.completed.clear()
            pool.told = 0
        pool.send_held_requests(out)

    return run  # type: ignore[return-value]
