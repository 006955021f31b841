"""`RecentIds`, the runner's memory of the deployments it read: it keeps a replayed
micro-batch's deployments from running twice, and stays bounded however long the runner runs."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="the runner needs the `spark` extra")

from jobledger.services.runner.routing import RecentIds


def test_it_holds_no_more_than_its_limit_however_many_ids_come() -> None:
    seen = RecentIds(limit=3)
    assert [seen.add(f"attempt-{i}") for i in range(10_000)] == [True] * 10_000
    assert len(seen) == 3
    assert [f"attempt-{i}" in seen for i in range(9_996, 10_000)] == [False, True, True, True]


def test_an_id_read_again_within_the_window_is_not_new_and_changes_nothing() -> None:
    seen = RecentIds(limit=3)
    for attempt in ("a", "b", "c"):
        seen.add(attempt)
    assert not seen.add("b")
    assert seen.add("d")  # drops the oldest, a: b's second read did not make it younger
    assert "a" not in seen and "b" in seen


def test_the_oldest_is_forgotten_first_and_is_new_again() -> None:
    seen = RecentIds(limit=2)
    for attempt in ("a", "b", "c"):
        seen.add(attempt)
    assert "a" not in seen and "b" in seen and "c" in seen
    assert seen.add("a")
    assert "b" not in seen
