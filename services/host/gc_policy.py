"""How the cyclic garbage collector runs while the reducers replay a log in bulk.

Replay allocates a few objects per event (the event, its decisions) and keeps many of them
(the log being replayed, the reducers' state). CPython's collector runs a young-generation
pass every 700 net allocations and, every few passes, walks every older object that is still
alive: with a log of a million events in memory, that walk is most of the time. Measured on
200k events of bench/replay.py (process CPU time, ReducerDriver.process on decoded events):
45-53k events/s as CPython sets it, 61k/s with the collector off, 64-67k/s with the objects
alive at the start frozen (`gc.freeze`: never walked again) or with thresholds of
(50_000, 20, 100), 65-77k/s with both. Switching it off would be no faster and would let
the rare reference cycle pile up for the whole replay, so `bulk_replay` freezes what is alive
(the log read so far) and collects young objects 70 times less often; on exit it restores
the thresholds and puts the frozen objects back where a full collection sees them.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

BULK_THRESHOLDS = (50_000, 20, 100)


@contextmanager
def bulk_replay() -> Iterator[None]:
    """Run the body (a replay, a rebuild) under the bulk collection policy above; inside
    another bulk replay it changes nothing (the outer one restores the collector)."""
    before = gc.get_threshold()
    if before == BULK_THRESHOLDS:
        yield
        return
    gc.freeze()
    gc.set_threshold(*BULK_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


def settled() -> None:
    """Inside `bulk_replay`: what is alive now is state that lives on (a snapshot's objects,
    just built), and is not walked again until the bulk replay ends, as the log it froze on
    entry, so the collector's passes over the tail's young objects do not walk the snapshot's
    hundreds of thousands again (which would double a restart's tail). Outside a bulk replay
    it does nothing (nothing would unfreeze)."""
    if gc.get_threshold() == BULK_THRESHOLDS:
        gc.freeze()


LIVE_THRESHOLDS = (10_000, 20, 100)
"""The collector of a `services run` process as it serves the live log (set by the command,
not by a runtime hosted in a thread of some other program)."""


def live_service() -> None:
    """Collect young objects 14 times less often and walk every live object far less often
    than CPython does: a service's heap is mostly the reducers' state, which lives on, and a
    full pass over it stops every partition the process serves. Measured with bench/stall.py
    at P=2000 (one instance, window 1,000): CPython's thresholds made 6 full passes of
    116-422 ms (1.4 s) while the giant was derived, each a pause of every hop of every other
    job on the instance; these made 2 (40 ms), and the small job beside the giant took 3.8 s
    instead of 4.9-5.8 s, the giant 6.9 s to deployed instead of 9.6-12.0 s. A reference
    cycle still dies in a young pass, or in a full one later."""
    gc.set_threshold(*LIVE_THRESHOLDS)


def rebuilt() -> None:
    """Under the live policy, the state just rebuilt (the partitions taken over) lives on:
    it is frozen, never walked again until the next rebuild, whose `bulk_replay` gives it
    back to the collector (what a revoked partition left in cycles is found then). Outside
    the live policy (a runtime in a test's thread, a replay) it does nothing."""
    if gc.get_threshold() == LIVE_THRESHOLDS:
        gc.freeze()
