"""The runner's operators without Spark: splits, the allow-list, chain checks, aggregation."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobledger.schemas.types import OperatorSpec
from jobledger.services.runner import functions
from jobledger.services.runner.operators import (
    FunctionLoader,
    Keyed,
    OperatorError,
    Subtask,
    aggregate,
    check_chain,
    open_source,
    run_transforms,
    split_chain,
    text_file_split,
    write_file_sink,
)


def op(name: str, **config: str) -> OperatorSpec:
    return OperatorSpec(name=name, config=config)


lines = st.lists(
    st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\r\n"), max_size=30),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(lines, st.integers(1, 9))
def test_text_splits_read_every_line_exactly_once_in_order(tmp_path_factory, content, parallelism):
    path = tmp_path_factory.mktemp("text") / "in.txt"
    path.write_text("".join(line + "\n" for line in content), encoding="utf-8")
    read = [
        line
        for index in range(parallelism)
        for line in text_file_split(path, Subtask(index, parallelism))
    ]
    assert read == content


@given(st.integers(-50, 50), st.integers(0, 200), st.integers(1, 12))
def test_range_splits_cover_the_range_once(start, length, parallelism):
    spec = op("range", start=str(start), end=str(start + length))
    numbers = [n for i in range(parallelism) for n in open_source(spec, Subtask(i, parallelism))]
    assert numbers == list(range(start, start + length))


def test_modules_off_the_allow_list_are_refused_with_the_reason():
    with pytest.raises(OperatorError, match="not on the runner's allow-list"):
        FunctionLoader().load("os:system")
    with pytest.raises(OperatorError, match="module:function"):
        FunctionLoader().load("nocolon")
    assert FunctionLoader(frozenset({"string"})).load("string:capwords")("a b") == "A B"
    assert FunctionLoader().load(f"{functions.__name__}:words") is functions.words


def test_a_missing_function_of_an_allowed_module_is_refused():
    with pytest.raises(OperatorError, match="cannot load"):
        FunctionLoader(frozenset({"string"})).load("string:no_such_thing")


@pytest.mark.parametrize(
    ("chain", "has_inputs", "reason"),
    [
        ([op("teleport")], True, "unknown operator 'teleport'"),
        ([op("map")], True, "needs config 'function'"),
        ([op("map", function="os:system")], True, "allow-list"),
        ([op("count")], False, "must start with a source"),
        ([op("text_file", path="x")], True, "must be first in a vertex without inputs"),
        ([op("range", start="0", end="9"), op("range", start="0", end="9")], False, "first"),
    ],
)
def test_bad_chains_are_refused_before_anything_runs(chain, has_inputs, reason):
    with pytest.raises(OperatorError, match=reason):
        check_chain(chain, has_inputs, FunctionLoader())


def test_a_chain_is_cut_at_its_source_and_its_keyed_aggregation():
    chain = [op("text_file", path="p"), op("flat_map", function="m:f"), op("key_by"),
             op("count"), op("file", path="out")]  # fmt: skip
    parts = split_chain(chain)
    assert parts.source == chain[0]
    assert [s.name for s in parts.before] == ["flat_map", "key_by"]
    assert parts.aggregation == chain[3] and parts.after == [chain[4]]


def test_transforms_then_count_give_word_counts():
    loader = FunctionLoader()
    chain = [op("flat_map", function=f"{functions.__name__}:words"), op("key_by")]
    stream = run_transforms(chain, ["The cat", "the dog, don't"], loader, sink=None)
    assert aggregate("count", stream) == {"the": 2, "cat": 1, "dog": 1, "don't": 1}
    assert aggregate("sum", [Keyed("a", 2), Keyed("a", 3), Keyed("b", 1)]) == {"a": 5, "b": 1}
    with pytest.raises(OperatorError, match="keyed input"):
        aggregate("count", ["not keyed"])


def test_a_sink_consumes_the_stream_and_ends_the_chain():
    seen = []
    out = run_transforms([op("file", path="x"), op("map", function="never:used")], [1, 2],
                         FunctionLoader(), sink=lambda spec, s: seen.extend(s))  # fmt: skip
    assert seen == [1, 2] and list(out) == []


def test_the_file_sink_replaces_a_part_whole(tmp_path):
    write_file_sink(tmp_path, 3, [Keyed("a", 1), "x"])
    write_file_sink(tmp_path, 3, [Keyed("b", 2)])
    part = tmp_path / "part-00003"
    assert [json.loads(line) for line in part.read_text().splitlines()] == [["b", 2]]
    assert [p.name for p in tmp_path.iterdir()] == ["part-00003"]
