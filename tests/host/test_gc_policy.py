"""The collection policies of replays, rebuilds and the live service: what they freeze,
they give back."""

from __future__ import annotations

import gc

from jobledger.services.host.gc_policy import (
    BULK_THRESHOLDS,
    LIVE_THRESHOLDS,
    bulk_replay,
    live_service,
    rebuilt,
    settled,
)


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


def test_the_live_policy_freezes_what_a_rebuild_left_and_a_rebuild_gives_it_back():
    before = gc.get_threshold()
    frozen = gc.get_freeze_count()
    try:
        live_service()
        assert gc.get_threshold() == LIVE_THRESHOLDS
        state = [[i] for i in range(1_000)]
        rebuilt()
        assert gc.get_freeze_count() >= frozen + len(state)
        with bulk_replay():  # the next rebuild
            assert gc.get_threshold() == BULK_THRESHOLDS
        assert gc.get_threshold() == LIVE_THRESHOLDS
        assert gc.get_freeze_count() == 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_rebuilt_outside_the_live_policy_freezes_nothing():
    frozen = gc.get_freeze_count()
    state = [{"alive": i} for i in range(100)]
    rebuilt()
    assert gc.get_freeze_count() == frozen
    assert state
