"""KvStateLocationRegistry, one test per rule KV-* (atomic where Flink is not: KV-11, KV-13).

The registry answers with refusals, not events: each test compares a refusal whole (its exact
reason and whether the vertex fails), the way the reducer tests compare derived events."""

from __future__ import annotations

import pytest

from jobledger.services.control.key_groups import KeyGroupRange, assign_to_key_group
from jobledger.services.control.kv_state_location_registry import (
    IndexOutOfRange,
    KvStateLocation,
    KvStateLocationRegistry,
    KvStateRegistration,
    RegistryRefusal,
)

A, B = "vertex-a", "vertex-b"


def reg(n: int) -> KvStateRegistration:
    return KvStateRegistration(f"kv-{n}", "10.0.0.1", 9069 + n)


@pytest.fixture
def registry() -> KvStateLocationRegistry:
    return KvStateLocationRegistry("job-1", {A: 16, B: 8})


def test_kv_1_first_registration_creates_a_location_sized_by_max_parallelism(registry):
    assert registry.notify_registered(A, KeyGroupRange(0, 0), "counts", reg(1)) is None
    location = registry.locations["counts"]
    assert (location.job_vertex_id, location.num_key_groups) == (A, 16)
    assert location.num_registered_key_groups == 1
    assert location.lookup(0) == reg(1) and location.lookup(1) is None


def test_kv_2_unknown_vertex_is_refused_and_nothing_stored(registry):
    refusal = registry.notify_registered("ghost", KeyGroupRange(0, 0), "counts", reg(1))
    assert refusal == RegistryRefusal("Unknown JobVertexID ghost", fail_vertex=False)
    assert registry.locations == {}


def test_kv_3_a_name_clash_fails_the_second_vertex_without_restarts(registry):
    registry.notify_registered(A, KeyGroupRange(0, 3), "counts", reg(1))
    refusal = registry.notify_registered(B, KeyGroupRange(0, 0), "counts", reg(2))
    assert refusal == RegistryRefusal(
        "Registration name clash. KvState with name 'counts' has already been registered "
        "by another operator (vertex-a).",
        fail_vertex=True,
    )
    assert registry.locations["counts"].job_vertex_id == A
    assert registry.locations["counts"].num_registered_key_groups == 4


def test_kv_4_a_clash_from_an_unknown_vertex_fails_no_vertex(registry):
    registry.notify_registered(A, KeyGroupRange(0, 0), "counts", reg(1))
    refusal = registry.notify_registered("ghost", KeyGroupRange(0, 0), "counts", reg(2))
    assert refusal == RegistryRefusal(
        "Registration name clash. KvState with name 'counts' has already been registered "
        "by another operator (vertex-a).",
        fail_vertex=False,
    )


def test_kv_5_lookup_of_an_unknown_name_finds_nothing(registry):
    assert registry.lookup("nothing", "key") is None


def test_kv_6_unregistering_an_unknown_name_is_refused(registry):
    refusal = registry.notify_unregistered(A, KeyGroupRange(0, 0), "counts")
    assert refusal == RegistryRefusal(
        "Unknown registration name 'counts'. Probably registration/unregistration race."
    )


def test_kv_7_unregistering_from_another_operator_is_refused(registry):
    registry.notify_registered(A, KeyGroupRange(0, 0), "counts", reg(1))
    refusal = registry.notify_unregistered(B, KeyGroupRange(0, 0), "counts")
    assert refusal == RegistryRefusal(
        "Another operator (vertex-a) registered the KvState under 'counts'."
    )


def test_kv_8_unregistering_a_key_group_never_registered_is_refused(registry):
    registry.notify_registered(A, KeyGroupRange(0, 0), "counts", reg(1))
    refusal = registry.notify_unregistered(A, KeyGroupRange(2, 2), "counts")
    assert refusal == RegistryRefusal("Not registered. Probably registration/unregistration race.")


def test_kv_9_the_location_goes_with_its_last_key_group(registry):
    registry.notify_registered(A, KeyGroupRange(0, 3), "counts", reg(1))
    assert registry.notify_unregistered(A, KeyGroupRange(0, 1), "counts") is None
    assert registry.locations["counts"].num_registered_key_groups == 2
    assert registry.notify_unregistered(A, KeyGroupRange(2, 3), "counts") is None
    assert "counts" not in registry.locations
    assert registry.lookup("counts", "key") is None


def test_kv_10_register_counts_each_key_group_once_and_overwrites_ids():
    location = KvStateLocation("job", A, 123, "counts")
    ranges = [KeyGroupRange(i * 12, min(i * 12 + 11, 122)) for i in range(11)]
    for n, r in enumerate(ranges):
        assert location.register(r, reg(n)) is None
    assert location.num_registered_key_groups == 123
    for n, r in enumerate(ranges):
        location.register(r, reg(100 + n))
    assert location.num_registered_key_groups == 123
    assert location.lookup(0) == reg(100)
    refusal = location.register(KeyGroupRange(120, 123), reg(9))
    assert refusal == "Key group index: range [120, 123] is outside 0..122 of vertex vertex-a"
    assert location.lookup(120) == reg(110)


def test_kv_11_unregistering_is_atomic_when_a_key_group_is_missing():
    location = KvStateLocation("job", A, 8, "counts")
    location.register(KeyGroupRange(0, 1), reg(1))
    refusal = location.unregister(KeyGroupRange(0, 2))
    assert refusal == "Not registered. Probably registration/unregistration race."
    assert location.num_registered_key_groups == 2, "nothing cleared before the refusal"
    assert location.unregister(KeyGroupRange(0, 9)) == (
        "Key group index: range [0, 9] is outside 0..7 of vertex vertex-a"
    )


def test_kv_12_lookups_outside_the_key_groups_fail_and_empty_ones_are_none():
    location = KvStateLocation("job", A, 4, "counts")
    assert location.lookup(3) is None
    for bad in (-1, 4):
        with pytest.raises(IndexOutOfRange):
            location.lookup(bad)


def test_kv_13_a_failed_first_registration_leaves_no_entry(registry):
    refusal = registry.notify_registered(A, KeyGroupRange(10, 20), "counts", reg(1))
    assert refusal == RegistryRefusal(
        "Key group index: range [10, 20] is outside 0..15 of vertex vertex-a"
    )
    assert "counts" not in registry.locations


def test_kv_15_the_same_vertex_re_registering_overlapping_ranges_last_write_wins(registry):
    registry.notify_registered(A, KeyGroupRange(0, 7), "counts", reg(1))
    assert registry.notify_registered(A, KeyGroupRange(4, 11), "counts", reg(2)) is None
    location = registry.locations["counts"]
    assert [location.lookup(kg) for kg in (3, 4, 11)] == [reg(1), reg(2), reg(2)]


def test_lookup_by_key_goes_through_the_key_group_of_the_key(registry):
    registry.notify_registered(A, KeyGroupRange(0, 7), "counts", reg(1))
    registry.notify_registered(A, KeyGroupRange(8, 15), "counts", reg(2))
    for word in ("hello", "flink", "a", "jobledger"):
        expected = reg(1) if assign_to_key_group(word, 16) <= 7 else reg(2)
        assert registry.lookup("counts", word) == expected
