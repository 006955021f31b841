"""The bulk collection policy of replays and rebuilds: what it freezes, it gives back."""

from __future__ import annotations

import gc

from jobledger.services.host.gc_policy import BULK_THRESHOLDS, bulk_replay, settled


def test_state_settled_inside_a_bulk_replay_is_frozen_until_it_ends():
    before = gc.get_threshold()
    frozen = gc.get_freeze_count()
    with bulk_replay():
        assert gc.get_threshold() == BULK_THRESHOLDS
        at_entry = gc.get_freeze_count()
        state = [[i] for i in range(1_000)]  # lists: tracked by the collector
        settled()
        assert gc.get_freeze_count() >= at_entry + len(state)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == frozen


def test_settled_outside_a_bulk_replay_freezes_nothing():
    frozen = gc.get_freeze_count()
    state = [{"alive": i} for i in range(100)]
    settled()
    assert gc.get_freeze_count() == frozen
    assert state
