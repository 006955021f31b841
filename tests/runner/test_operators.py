"""The runner's operators without Spark: splits, the allow-list, the data roots, chain checks,
aggregation."""

from __future__ import annotations

import json
import os
from pathlib import Path

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
    confined_path,
    open_source,
    run_transforms,
    split_chain,
    text_file_split,
    write_file_sink,
)

PREFIX = "jobledger."


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
    with pytest.raises(OperatorError, match=r"'no_such_thing' is not in string\.__all__"):
        FunctionLoader(frozenset({"string"})).load("string:no_such_thing")
    with pytest.raises(OperatorError, match="cannot load"):
        FunctionLoader(frozenset({"no_such_module"})).load("no_such_module:f")


FIXTURE_OPS = "tests.support.runner_fixture_ops"


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("__setattr__", "names starting with '_' are never loaded"),
        ("__init__", "names starting with '_' are never loaded"),
        ("__delattr__", "names starting with '_' are never loaded"),
        ("_private", "names starting with '_' are never loaded"),
        ("double.__globals__", "dotted names are never loaded"),
        ("dumped", "it is imported from json, not defined there"),
        ("x", "it is a builtin, not a plain function"),
        ("Listed", "it is a class, not a plain function"),
        ("unlisted", r"'unlisted' is not in tests\.support\.runner_fixture_ops\.__all__"),
        ("no such", "is not a name"),
    ],
)
def test_only_exported_functions_of_an_allowed_module_load(name, reason):
    loader = FunctionLoader(frozenset({FIXTURE_OPS}))
    with pytest.raises(OperatorError) as refused:
        loader.load(f"{FIXTURE_OPS}:{name}")
    message = str(refused.value)
    assert message.startswith(f"`{FIXTURE_OPS}:{name}` is not an exported function of "
                              f"{FIXTURE_OPS}: "), message  # fmt: skip
    assert refused.match(reason)


def test_an_exported_function_loads():
    double = FunctionLoader(frozenset({FIXTURE_OPS})).load(f"{FIXTURE_OPS}:double")
    assert double(21) == 42


def test_a_module_without_all_exports_nothing():
    with pytest.raises(OperatorError, match="no `__all__`"):
        FunctionLoader(frozenset({"bisect"})).load("bisect:insort")


def test_no_job_can_delete_or_reach_past_the_builtin_functions():
    loader = FunctionLoader()
    for name in ("__delattr__", "__setattr__", "__dict__", "_WORD", "re", "Iterator"):
        with pytest.raises(OperatorError, match="is not an exported function"):
            loader.load(f"{functions.__name__}:{name}")
    loaded = [loader.load(f"{functions.__name__}:{n}") for n in functions.__all__]
    assert loaded == [functions.identity, functions.non_empty, functions.words]
    assert list(functions.words("still here")) == ["still", "here"]


# -- data roots ----------------------------------------------------------------------------


@pytest.fixture
def root(tmp_path) -> Path:
    """A data root, with a secret file beside it (outside) and a readable file inside."""
    (tmp_path / "secret.txt").write_text("secret\n")
    inside = tmp_path / "root"
    inside.mkdir()
    (inside / "in.txt").write_text("a\nb\n")
    return inside.resolve()


def escapes(root: Path) -> list[str]:
    (root / "link").symlink_to(root.parent / "secret.txt")
    (root / "linked-dir").symlink_to(root.parent, target_is_directory=True)
    return ["/etc/passwd", str(root / ".." / "secret.txt"), str(root / "link"),
            str(root / "linked-dir" / "secret.txt"), str(root / "linked-dir" / "out"),
            str(root) + "-sibling/x", "secret.txt"]  # fmt: skip


def test_file_sources_outside_the_data_roots_are_refused(root):
    for path in escapes(root):
        spec = op("text_file", path=path)
        with pytest.raises(OperatorError, match="is not under a data root of this runner"):
            list(open_source(spec, Subtask(0, 1), (root,)))
        with pytest.raises(OperatorError, match="is not under a data root of this runner"):
            check_chain([spec], False, FunctionLoader(), PREFIX, (root,))


def test_file_sinks_outside_the_data_roots_are_refused(root):
    for path in escapes(root):
        chain = [op("range", start="0", end="3"), op("file", path=path)]
        with pytest.raises(OperatorError, match="is not under a data root of this runner"):
            check_chain(chain, False, FunctionLoader(), PREFIX, (root,))
        with pytest.raises(OperatorError, match="is not under a data root of this runner"):
            confined_path(chain[1], (root,))


def test_files_under_a_data_root_are_read_and_written(root, tmp_path):
    elsewhere = (tmp_path / "other").resolve()
    roots = (elsewhere, root)
    source = op("text_file", path=str(root / "sub" / ".." / "in.txt"))
    sink = op("file", path=str(root / "out" / "counts"))
    check_chain([source, sink], False, FunctionLoader(), PREFIX, roots)
    assert list(open_source(source, Subtask(0, 1), roots)) == ["a", "b"]
    assert confined_path(sink, roots) == root / "out" / "counts"
    (root / "inner-link").symlink_to(root / "in.txt")  # a symlink that stays inside is fine
    inner = op("text_file", path=str(root / "inner-link"))
    assert confined_path(inner, roots) == root / "in.txt"


def test_with_no_data_root_no_file_is_read_or_written(root):
    for spec in (op("text_file", path=str(root / "in.txt")), op("file", path=str(root))):
        with pytest.raises(OperatorError, match="--data-root DIR"):
            confined_path(spec, ())
        with pytest.raises(OperatorError, match="--data-root DIR"):
            check_chain([spec], spec.name == "file", FunctionLoader(), PREFIX)
    with pytest.raises(OperatorError, match="--data-root DIR"):
        list(open_source(op("text_file", path=str(root / "in.txt")), Subtask(0, 1)))


def test_the_runner_resolves_its_data_roots_at_startup(root, tmp_path):
    pytest.importorskip("pyspark")
    import argparse

    from jobledger.cli.runner import add_runner_arguments
    from jobledger.services.runner.runner import RunnerConfig

    parser = argparse.ArgumentParser()
    add_runner_arguments(parser, None)
    (tmp_path / "alias").symlink_to(root, target_is_directory=True)
    relative = os.path.relpath(root / "sub", Path.cwd())
    args = parser.parse_args(["--data-root", str(tmp_path / "alias"), "--data-root", relative])
    assert parser.parse_args([]).data_root == []
    config = RunnerConfig("b:9092", "p.", tmp_path / "ckpt", data_roots=tuple(args.data_root))
    assert config.data_roots == (root, root / "sub")


@pytest.mark.parametrize(
    ("chain", "has_inputs", "reason"),
    [
        ([op("teleport")], True, "unknown operator 'teleport'"),
        ([op("map")], True, "needs config 'function'"),
        ([op("map", function="os:system")], True, "allow-list"),
        ([op("count")], False, "must start with a source"),
        ([op("text_file", path="x")], True, "must be first in a vertex without inputs"),
        ([op("range", start="0", end="9"), op("range", start="0", end="9")], False, "first"),
        (
            [op("topic", topic="jobledger.job")],
            True,
            "'jobledger.job' is one of jobledger's own topics",
        ),
        ([op("topic", topic="jobledger.anything")], True, "jobledger's own topics"),
        ([op("topic", topic="__consumer_offsets")], True, "Kafka's internal topics"),
    ],
)
def test_bad_chains_are_refused_before_anything_runs(chain, has_inputs, reason):
    with pytest.raises(OperatorError, match=reason):
        check_chain(chain, has_inputs, FunctionLoader(), PREFIX)


def test_a_topic_sink_writes_any_topic_but_jobledger_s_own_under_any_prefix():
    check_chain([op("topic", topic="wordcounts")], True, FunctionLoader(), PREFIX)
    for own in ("deadletter", "result.job-1.a.b", "snapshot"):
        with pytest.raises(OperatorError, match="jobledger's own topics"):
            check_chain([op("topic", topic=own)], True, FunctionLoader(), "")
    check_chain([op("topic", topic="jobs-out")], True, FunctionLoader(), "")


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
