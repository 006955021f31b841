"""The pure/I-O wall, held by a test instead of a convention (DESIGN.md rule 2: reducers know
nothing of Kafka, Spark or clocks). The imports of every module are read from its source, so
a reducer that starts to read the time, a socket or a random number fails here, as does an
event catalog that reaches up into the services or the projections."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PURE = [
    "decisions", "driver", "execution_graph", "execution_state", "job_master", "job_status",
    "key_groups", "kv_state_location_registry", "partitioning", "reducer", "resource_manager",
    "resource_profile", "restart_strategy", "scheduler", "slot_placement", "slot_pool",
    "slot_request_listener", "task_executor", "task_slot_table",
]  # fmt: skip
"""The reducers and what they are built from: `services/<name>.py`."""

PURE_STDLIB = frozenset({
    "__future__", "abc", "bisect", "collections", "collections.abc", "dataclasses", "enum",
    "functools", "hashlib", "heapq", "itertools", "json", "math", "operator", "re", "typing",
    "uuid",
})  # fmt: skip
"""Standard modules with no clock, I/O or randomness a reducer could reach (`uuid` for its
namespace constant only: calling uuid1/uuid4 is refused below)."""
IMPURE_CALLS = frozenset({"uuid1", "uuid4", "time", "monotonic", "random", "urandom"})


def _imports(path: Path) -> list[tuple[str, int]]:
    """(module, level) of every import: level > 0 for relative imports."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, 0) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is None:  # from . import x
            found += [(alias.name, node.level) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.module, node.level))
    return found


def _refusal(module: str, level: int) -> str | None:
    if level == 1:
        return None if module.split(".")[0] in PURE else f"sibling .{module} is not pure"
    if level > 1:
        return None if module.split(".")[0] == "schemas" else f"{'.' * level}{module}"
    if module == "jobledger.schemas" or module.startswith("jobledger.schemas."):
        return None
    return None if module in PURE_STDLIB else module


@pytest.mark.parametrize("name", PURE)
def test_a_reducer_imports_only_the_schemas_its_pure_siblings_and_pure_stdlib(name):
    path = ROOT / "services" / f"{name}.py"
    refused = [r for m, level in _imports(path) if (r := _refusal(m, level)) is not None]
    calls = {
        node.attr if isinstance(node, ast.Attribute) else node.id
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute | ast.Name)
    } & IMPURE_CALLS
    assert (refused, sorted(calls)) == ([], [])


@pytest.mark.parametrize("path", sorted((ROOT / "schemas").glob("*.py")), ids=lambda p: p.name)
def test_the_event_catalog_never_reaches_up_into_services_or_projections(path):
    upward = [
        f"{'.' * level}{module}"
        for module, level in _imports(path)
        if (level == 0 and module.startswith(("jobledger.services", "jobledger.projections")))
        or (level > 1 and module.split(".")[0] in ("services", "projections"))
    ]
    assert upward == []


def test_the_wall_is_checked_where_it_would_break():
    """The checks refuse what they are there to refuse."""
    assert _refusal("time", 0) == "time"
    assert _refusal("confluent_kafka", 0) == "confluent_kafka"
    assert _refusal("runtime", 1) == "sibling .runtime is not pure"
    assert _refusal("projections.replay", 2) == "..projections.replay"
    assert _refusal("jobledger.schemas.slots", 0) is None
    assert _refusal("slot_pool", 1) is None


def test_the_runners_command_line_does_not_import_the_main_one():
    """They imported each other (the runner reused a private helper of the main one): the
    options both need live in `services/cli_options.py`."""
    imported = _imports(ROOT / "services" / "runner" / "cli.py")
    assert ("cli", 2) not in imported and ("", 2) not in imported
    assert not any(module == "jobledger.services.cli" for module, _ in imported)
