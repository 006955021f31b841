"""The operators a vertex's chain is made of, and the allow-list that guards user code.

A chain is a list of `OperatorSpec`s (name + string config) from the JobGraph. Built-ins:
- sources (first in the chain of a vertex without inputs): `text_file` (config `path`: this
  subtask's byte split of the file, line-aligned like Hadoop's TextInputFormat) and `range`
  (config `start`, `end`: this subtask's contiguous share of the numbers);
- `map`, `flat_map`, `filter`, `key_by` (config `function`: `module:function`);
- keyed aggregations over the subtask's key groups: `count`, `sum` (config `queryable`: the
  registration name under which the result is published as queryable state);
- sinks: `file` (config `path`: one `part-<subtask>` file of JSON lines, replaced atomically
  when the attempt finishes) and `topic` (config `topic`: JSON values keyed by the key).

Producing an event must never mean running arbitrary code, or reading and writing whatever the
runner's hosts hold:
- a `module:function` is loaded only if its module is `jobledger.services.runner.functions` or
  on the allow-list of whoever runs the runner (`--allow-module`), AND the module exports the
  function by name in its `__all__`, AND it is a plain Python function defined in that very
  module: never a name starting with `_` (dunders such as `__setattr__` included), never a
  dotted name, never a name the module merely imported (`from os import system as x`), a
  class or a builtin, even if listed. A module meant for the runner lists what jobs may call
  in `__all__`; the rest of it stays out of reach.
- a `topic` sink never writes one of jobledger's own topics (`confined_topic`).
- `text_file` sources and `file` sinks accept a path only if, once resolved (`..` and symlinks
  followed, on the host that opens it), it lies under one of the data roots the runner's
  operator configured (`--data-root DIR`, repeatable); with none, they are refused.
Anything else fails the task (and so the job) with the reason.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobledger.schemas.topics import TopicRole, topic_name
from jobledger.schemas.types import OperatorSpec

BUILTIN_FUNCTIONS = "jobledger.services.runner.functions"
SOURCES = frozenset({"text_file", "range"})
KEYED = frozenset({"count", "sum"})
SINKS = frozenset({"file", "topic"})
TRANSFORMS = frozenset({"map", "flat_map", "filter", "key_by"})
BUILTINS = SOURCES | KEYED | SINKS | TRANSFORMS
FILE_OPERATORS = frozenset({"text_file", "file"})
"""Operators with a `path`: confined to the runner's data roots."""


class OperatorError(ValueError):
    """A chain that cannot run: unknown operator, missing config, code not allowed."""


@dataclass(frozen=True)
class Keyed:
    """A record routed by key: what `key_by` emits and keyed operators consume."""

    key: Any
    value: Any


@dataclass(frozen=True)
class Subtask:
    """Which share of the work this attempt does."""

    index: int
    parallelism: int


@dataclass
class FunctionLoader:
    """Loads `module:function` references: allowed modules, exported functions only."""

    allowed_modules: frozenset[str] = frozenset()
    cache: dict[str, Callable[..., Any]] = field(default_factory=dict)

    def load(self, reference: str) -> Callable[..., Any]:
        if reference in self.cache:
            return self.cache[reference]
        module_name, sep, name = reference.partition(":")
        if not sep or not module_name or not name:
            raise OperatorError(f"{reference!r} is not a `module:function` reference")
        if module_name != BUILTIN_FUNCTIONS and module_name not in self.allowed_modules:
            raise OperatorError(
                f"module {module_name!r} is not on the runner's allow-list "
                f"(allowed: {sorted(self.allowed_modules) or 'none'})"
            )

        def refuse(why: str) -> OperatorError:
            return OperatorError(
                f"`{reference}` is not an exported function of {module_name}: {why}"
            )

        if "." in name:
            raise refuse("dotted names are never loaded")
        if name.startswith("_"):
            raise refuse("names starting with '_' are never loaded")
        if not name.isidentifier():
            raise refuse(f"{name!r} is not a name")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise OperatorError(f"cannot load {reference!r}: {exc}") from exc
        exported = getattr(module, "__all__", None)
        if not isinstance(exported, list | tuple):
            raise refuse("the module has no `__all__` listing the functions it exports")
        if name not in exported:
            raise refuse(f"{name!r} is not in {module_name}.__all__")
        function = getattr(module, name, None)
        if not inspect.isfunction(function):
            raise refuse(f"it is {_kind(function)}, not a plain function")
        if function.__module__ != module.__name__:
            raise refuse(f"it is imported from {function.__module__}, not defined there")
        self.cache[reference] = function
        return function


def _kind(value: object) -> str:
    if value is None:
        return "missing"
    if inspect.isclass(value):
        return "a class"
    if inspect.isbuiltin(value):
        return "a builtin"
    return f"a {type(value).__name__}"


def confined_path(spec: OperatorSpec, data_roots: tuple[Path, ...]) -> Path:
    """The `path` of a file source or sink, resolved (`..` and symlinks followed on this host),
    if it lies under one of the runner's data roots (resolved when the runner started)."""
    raw = _config(spec, "path")
    if not data_roots:
        raise OperatorError(
            f"{spec.name}: this runner reads and writes no files (no data root configured; "
            "its operator allows a directory with `jobledger runner --data-root DIR`)"
        )
    path = Path(raw).resolve()
    if not any(path.is_relative_to(root) for root in data_roots):
        raise OperatorError(
            f"{spec.name}: {raw} (resolved: {path}) is not under a data root of this runner "
            f"({', '.join(str(root) for root in data_roots)})"
        )
    return path


def _config(spec: OperatorSpec, key: str) -> str:
    if key not in spec.config:
        raise OperatorError(f"operator {spec.name!r} needs config {key!r}")
    return spec.config[key]


def _int_config(spec: OperatorSpec, key: str) -> int:
    try:
        return int(_config(spec, key))
    except ValueError as exc:
        raise OperatorError(f"operator {spec.name!r}: {key} is not an integer") from exc


REQUIRED = {
    "text_file": ("path",), "range": ("start", "end"), "map": ("function",),
    "flat_map": ("function",), "filter": ("function",), "file": ("path",), "topic": ("topic",),
}  # fmt: skip
"""The config each operator cannot run without."""


def confined_topic(spec: OperatorSpec, prefix: str) -> str:
    """The `topic` of a topic sink, if it is not one of jobledger's own: a job that wrote
    into the log it is run by (its inputs, dead letters, snapshots, queryable state, result
    partitions) could forge anything, as whoever runs it. Under a prefix, every topic named
    with it is jobledger's. Which other topics the job may write is for Kafka's ACLs to say:
    on a secured cluster, the runner's principal writes only where an ACL lets it."""
    topic = _config(spec, "topic")
    own = {topic_name(role, prefix) for role in TopicRole}
    if (
        topic in own
        or topic.startswith(f"{prefix}result.")
        or (prefix and topic.startswith(prefix))
    ):
        raise OperatorError(
            f"topic: {topic!r} is one of jobledger's own topics (prefix {prefix!r}): a job "
            "writes only topics of its own, never the log it runs by"
        )
    if topic.startswith("__"):
        raise OperatorError(f"topic: {topic!r} is one of Kafka's internal topics")
    return topic


def check_shape(chain: list[OperatorSpec], has_inputs: bool, prefix: str) -> None:
    """Refuse what no runner could run, whatever its host: unknown names (with the nearest
    built-in), missing or malformed config, a source out of place, a function reference
    that is no `module:function`, a topic sink into jobledger's own topics (`prefix`). What
    `job submit` checks before anything is written."""
    for position, spec in enumerate(chain):
        if spec.name not in BUILTINS:
            near = difflib.get_close_matches(spec.name, sorted(BUILTINS), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise OperatorError(
                f"unknown operator {spec.name!r}{hint}; built-ins: {', '.join(sorted(BUILTINS))}"
            )
        if spec.name in SOURCES and (position != 0 or has_inputs):
            raise OperatorError(f"source {spec.name!r} must be first in a vertex without inputs")
        for key in REQUIRED.get(spec.name, ()):
            _config(spec, key)
        if spec.name == "topic":
            confined_topic(spec, prefix)
        if spec.name == "range":
            _int_config(spec, "start")
            _int_config(spec, "end")
        reference = spec.config.get("function")
        if spec.name in TRANSFORMS and reference is not None:
            module_name, sep, name = reference.partition(":")
            if not (sep and module_name and name):
                raise OperatorError(f"{reference!r} is not a `module:function` reference")
    if chain and not has_inputs and chain[0].name not in SOURCES:
        raise OperatorError(
            f"a vertex without inputs must start with a source, not {chain[0].name!r}"
        )


def user_modules(chain: list[OperatorSpec]) -> set[str]:
    """The modules of the chain's functions other than the built-in ones: each must be on
    the runner's allow-list (`--allow-module`), which only the runner knows."""
    return {
        spec.config["function"].partition(":")[0]
        for spec in chain
        if spec.name in TRANSFORMS and "function" in spec.config
    } - {BUILTIN_FUNCTIONS}


def check_chain(
    chain: list[OperatorSpec],
    has_inputs: bool,
    loader: FunctionLoader,
    prefix: str,
    data_roots: tuple[Path, ...] = (),
) -> None:
    """Refuse a chain before anything runs: its shape (`check_shape`, for topic prefix
    `prefix`), then what this runner allows: its functions and its paths."""
    check_shape(chain, has_inputs, prefix)
    for spec in chain:
        if spec.name in TRANSFORMS and (spec.name != "key_by" or "function" in spec.config):
            loader.load(_config(spec, "function"))
        if spec.name in FILE_OPERATORS:
            confined_path(spec, data_roots)


# -- sources -------------------------------------------------------------------------------


def text_file_split(path: Path, subtask: Subtask) -> Iterator[str]:
    """The lines of this subtask's byte range: a line belongs to the split its first byte is
    in, so every line is read exactly once whatever the parallelism."""
    size = path.stat().st_size
    start = size * subtask.index // subtask.parallelism
    end = size * (subtask.index + 1) // subtask.parallelism
    with path.open("rb") as handle:
        if start > 0:
            handle.seek(start - 1)
            handle.readline()
        while handle.tell() < end:
            line = handle.readline()
            if not line:
                break
            yield line.decode("utf-8", errors="replace").rstrip("\r\n")


def open_source(
    spec: OperatorSpec, subtask: Subtask, data_roots: tuple[Path, ...] = ()
) -> Iterator[Any]:
    """This subtask's records of a source operator; a file only under a data root."""
    if spec.name == "text_file":
        path = confined_path(spec, data_roots)
        if not path.is_file():
            raise OperatorError(f"text_file: {path} is not a readable file")
        return text_file_split(path, subtask)
    start, end = _int_config(spec, "start"), _int_config(spec, "end")
    total = max(0, end - start)
    lo = start + total * subtask.index // subtask.parallelism
    hi = start + total * (subtask.index + 1) // subtask.parallelism
    return iter(range(lo, hi))


# -- transforms ----------------------------------------------------------------------------


def _transform(spec: OperatorSpec, stream: Iterable[Any], loader: FunctionLoader) -> Iterator[Any]:
    if spec.name == "key_by":
        key_of = loader.load(spec.config["function"]) if "function" in spec.config else None
        for value in stream:
            yield Keyed(key_of(value) if key_of else value, value)
        return
    function = loader.load(_config(spec, "function"))
    if spec.name == "map":
        for value in stream:
            yield function(value)
    elif spec.name == "flat_map":
        for value in stream:
            yield from function(value)
    else:
        for value in stream:
            if function(value):
                yield value


def aggregate(name: str, stream: Iterable[Any]) -> dict[Any, Any]:
    """`count` or `sum` per key over a keyed stream."""
    state: dict[Any, Any] = {}
    for record in stream:
        if not isinstance(record, Keyed):
            raise OperatorError(f"{name} needs keyed input (put key_by before the exchange)")
        if name == "count":
            state[record.key] = state.get(record.key, 0) + 1
        else:
            state[record.key] = state.get(record.key, 0) + record.value
    return state


# -- sinks ---------------------------------------------------------------------------------


def write_file_sink(directory: Path, subtask_index: int, values: Iterable[Any]) -> int:
    """Write JSON lines to `part-<subtask>` through a temporary file renamed at the end, so a
    failed attempt leaves the previous file and a finished one replaces it whole."""
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"part-{subtask_index:05d}"
    temporary = directory / f".part-{subtask_index:05d}.{os.getpid()}.tmp"
    count = 0
    with temporary.open("w", encoding="utf-8") as handle:
        for value in values:
            handle.write(json.dumps(to_json(value)) + "\n")
            count += 1
    temporary.replace(final)
    return count


def to_json(value: Any) -> Any:
    """A record as JSON data: keyed records become `[key, value]`."""
    if isinstance(value, Keyed):
        return [to_json(value.key), to_json(value.value)]
    if isinstance(value, tuple):
        return [to_json(v) for v in value]
    return value


@dataclass
class ChainParts:
    """A chain cut where the runner has to step in: the source, the transforms up to a keyed
    aggregation, the aggregation itself and what follows it."""

    source: OperatorSpec | None
    before: list[OperatorSpec]
    aggregation: OperatorSpec | None
    after: list[OperatorSpec]


def split_chain(chain: list[OperatorSpec]) -> ChainParts:
    source = chain[0] if chain and chain[0].name in SOURCES else None
    rest = chain[1:] if source else list(chain)
    for position, spec in enumerate(rest):
        if spec.name in KEYED:
            return ChainParts(source, rest[:position], spec, rest[position + 1 :])
    return ChainParts(source, rest, None, [])


def run_transforms(
    chain: list[OperatorSpec], stream: Iterable[Any], loader: FunctionLoader, sink: Callable
) -> Iterator[Any]:
    """Apply transforms in order; a sink operator consumes the stream (through `sink`) and
    ends the chain's output."""
    for spec in chain:
        if spec.name in SINKS:
            sink(spec, stream)
            return iter(())
        stream = _transform(spec, stream, loader)
    return iter(stream)
