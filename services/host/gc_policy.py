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
