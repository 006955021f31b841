"""Key groups, one test per rule KG-* with the vectors of docs/reference/flink-rules.md."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobledger.services.control.key_groups import (
    DEFAULT_LOWER_BOUND_MAX_PARALLELISM,
    EMPTY_KEY_GROUP_RANGE,
    UPPER_BOUND_MAX_PARALLELISM,
    KeyGroupRange,
    assign_to_key_group,
    compute_default_max_parallelism,
    compute_key_group_for_key_hash,
    compute_key_group_range_for_operator_index,
    compute_operator_index_for_key_group,
    java_hash_code,
    murmur_hash,
)


def test_kg_1_constants():
    assert DEFAULT_LOWER_BOUND_MAX_PARALLELISM == 128
    assert UPPER_BOUND_MAX_PARALLELISM == 32768


def test_kg_2_key_to_key_group_and_null_keys():
    assert assign_to_key_group("hello", 128) == compute_key_group_for_key_hash(99162322, 128)
    with pytest.raises(ValueError, match="Assigned key must not be null!"):
        assign_to_key_group(None, 128)


VECTORS = [
    (0, 593689054, 94, 2), (1, 68075478, 86, 2), (2, 1085422463, 127, 3),
    (3, 847579505, 113, 3), (42, 1134849565, 29, 0), (-1, 1982413648, 80, 2),
    (2147483647, 1653689534, 62, 1), (-2147483648, 1718298732, 108, 3),
    (97, 1455541201, 81, 2), (99162322, 1715862179, 35, 1), (97520992, 1330823394, 98, 3),
]  # fmt: skip


@pytest.mark.parametrize(("code", "murmur", "kg", "operator"), VECTORS)
def test_kg_3_kg_4_kg_8_murmur_hash_key_group_and_operator_vectors(code, murmur, kg, operator):
    assert murmur_hash(code) == murmur
    assert compute_key_group_for_key_hash(code, 128) == kg
    assert compute_operator_index_for_key_group(128, 4, kg) == operator


def test_kg_8_java_hash_codes_of_the_vector_strings():
    assert [java_hash_code(s) for s in ("a", "hello", "flink")] == [97, 99162322, 97520992]
    assert java_hash_code("€𝄞") == (8364 * 31 + 0xD834) * 31 + 0xDD1E, "UTF-16 code units"
    assert java_hash_code("polygenelubricants") == -2147483648, "wraps like a Java int"
    assert java_hash_code(7) == 7
    assert java_hash_code(2**40 + 5) == 261, "a Java long folds its high word in"
    assert java_hash_code(True) == 1231


@given(st.integers(-(2**31), 2**31 - 1))
def test_kg_3_murmur_is_never_negative(code):
    assert 0 <= murmur_hash(code) < 2**31


@pytest.mark.parametrize(
    ("max_p", "p", "ranges"),
    [
        (128, 3, [(0, 42), (43, 85), (86, 127)]),
        (128, 7, [(0, 18), (19, 36), (37, 54), (55, 73), (74, 91), (92, 109), (110, 127)]),
        (10, 3, [(0, 3), (4, 6), (7, 9)]),
    ],
)
def test_kg_5_ranges_per_operator_index(max_p, p, ranges):
    got = [compute_key_group_range_for_operator_index(max_p, p, i) for i in range(p)]
    assert [(r.start, r.end) for r in got] == ranges


def test_kg_5_operator_index_of_every_key_group_agrees_with_the_ranges():
    assert [compute_operator_index_for_key_group(10, 3, kg) for kg in range(10)] == [
        0, 0, 0, 0, 1, 1, 1, 2, 2, 2,
    ]  # fmt: skip
    for max_p in (1, 7, 128, 299, 32768):
        for p in range(1, min(max_p, 64) + 1):
            for i in range(p):
                r = compute_key_group_range_for_operator_index(max_p, p, i)
                assert {compute_operator_index_for_key_group(max_p, p, kg) for kg in r} == {i}


def test_kg_5_preconditions():
    for max_p, p in [(0, 1), (32769, 1), (4, 0), (4, 8)]:
        with pytest.raises(ValueError):
            compute_key_group_range_for_operator_index(max_p, p, 0)


@pytest.mark.parametrize(
    ("p", "expected"),
    [(1, 128), (85, 128), (86, 256), (171, 256), (172, 512), (1000, 2048), (21846, 32768),
     (32768, 32768)],
)  # fmt: skip
def test_kg_6_default_max_parallelism(p, expected):
    assert compute_default_max_parallelism(p) == expected


def test_kg_6_parallelism_beyond_the_bound_is_refused():
    with pytest.raises(ValueError):
        compute_default_max_parallelism(32769)


def test_kg_7_key_group_range_basics():
    r = KeyGroupRange(3, 7)
    assert len(r) == 5 and list(r) == [3, 4, 5, 6, 7]
    assert r.contains(3) and r.contains(7) and not r.contains(8)
    assert KeyGroupRange.of(5, 2) == EMPTY_KEY_GROUP_RANGE and len(EMPTY_KEY_GROUP_RANGE) == 0
    assert r.intersection(KeyGroupRange(5, 10)) == KeyGroupRange(5, 7)
    assert KeyGroupRange(5, 10).intersection(r) == KeyGroupRange(5, 7)
    assert r.intersection(KeyGroupRange(8, 9)) == EMPTY_KEY_GROUP_RANGE
    for bad in [(-3, 2), (4, 1)]:
        with pytest.raises(ValueError):
            KeyGroupRange(*bad)
