"""The pure/I-O wall, held by a test instead of a convention (DESIGN.md rule 2: reducers know
nothing of Kafka, Spark or clocks). The imports of every module are read from its source, so
a reducer that starts to read the time, a socket or a random number fails here, as does an
event catalog that reaches up into the services or the projections."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CONTROL = ROOT / "services" / "control"
PURE = sorted(p.stem for p in CONTROL.glob("*.py") if p.stem != "__init__")
"""The reducers and what they are built from: every module of `services/control/`, the
control plane's folder. A module is pure by where it lives, not by a list."""

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
    path = CONTROL / f"{name}.py"
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


LAYERS = ("schemas", "services", "projections", "cli")
"""From the bottom up: the event catalog, the engine (reducers, runtime, runner), the read
models, and the command line that wires them together. A module imports only its own layer
and the layers below it."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["jobledger", *parts])


def _type_checking_only(tree: ast.Module) -> set[ast.AST]:
    """Imports under `if TYPE_CHECKING:`: for annotations only, never run, so no circle."""
    return {
        node
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and getattr(block.test, "id", None) == "TYPE_CHECKING"
        for stmt in block.body
        for node in ast.walk(stmt)
    }


def _project_imports(path: Path) -> set[str]:
    """The project modules `path` imports at run time, as absolute names (`from . import x`
    resolved to the module x when it is one, else to the package)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    tree = ast.parse(path.read_text(), str(path))
    skipped = _type_checking_only(tree)
    for node in ast.walk(tree):
        if node in skipped:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            candidates = [f"{target}.{alias.name}" for alias in node.names] + [target]
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        for candidate in candidates:
            if candidate in MODULES and candidate != name:
                found.add(candidate)
                break
    return found


MODULES = {_module_name(path): path for layer in LAYERS for path in (ROOT / layer).rglob("*.py")}
GRAPH = {name: _project_imports(path) for name, path in MODULES.items()}


def _layer(module: str) -> int:
    return LAYERS.index(module.split(".")[1])


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_module_imports_only_its_own_layer_and_the_layers_below(module):
    upward = sorted(m for m in GRAPH[module] if _layer(m) > _layer(module))
    assert upward == []


SHARED = "services"
"""`services/kafka.py` (with `kafka_topics.py`, `kafka_reads.py`), `client_properties.py`,
`configuration.py` and `home.py`: what every room of the engine uses."""

ROOMS = {
    "services.control": set(),
    SHARED: {"services.control"},
    "services.host": {"services.control", SHARED},
    "services.runner": {"services.control", SHARED},
    "services.client": {"services.control", SHARED},
    "services.local": {SHARED},
    "projections": set(),
    "projections.log": {"services.control", "services.host", SHARED},
    "projections.debugging": {"services.control", SHARED, "projections.log"},
    "projections.rest": {
        "services.control", SHARED, "projections.log", "projections.debugging",
    },
}  # fmt: skip
"""The rooms of the engine and of the read models, each a folder, and the rooms each may
import besides its own and the event catalog: the control plane imports no other room; the
host, the runner and the client writers build on it and on the shared Kafka plumbing, never
on each other; the laptop launchers know no reducer; the read models read the log, then
debug it, then serve it."""


def _room(module: str) -> str:
    """The folder a module's file is in, dotted: `services.control`, `projections.log`."""
    return ".".join(MODULES[module].parent.relative_to(ROOT).parts)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _room(m) in ROOMS))
def test_a_room_imports_only_itself_the_catalog_and_the_rooms_it_builds_on(module):
    allowed = {_room(module), "schemas", *ROOMS[_room(module)]}
    assert sorted(m for m in GRAPH[module] if _room(m) not in allowed) == []


def test_every_module_of_the_engine_and_the_read_models_is_in_a_room():
    """A new file lands in a folder of its kind (or is shared on purpose), never loose."""
    loose = sorted(
        m
        for m in MODULES
        if m.split(".")[1] in ("services", "projections") and _room(m) not in ROOMS
    )
    assert loose == []
    assert sorted(m for m in MODULES if _room(m) == SHARED) == [
        "jobledger.services",
        "jobledger.services.client_properties",
        "jobledger.services.configuration",
        "jobledger.services.home",
        "jobledger.services.kafka",
        "jobledger.services.kafka_reads",
        "jobledger.services.kafka_topics",
    ]


def test_no_module_imports_itself_through_others():
    """No import circle: a depth-first search over the project's imports finds no back edge."""
    state: dict[str, str] = {}
    circles = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for imported in sorted(GRAPH[module]):
            if state.get(imported) == "open":
                circles.append([*path[path.index(imported) :], imported])
            elif imported not in state:
                visit(imported, [*path, imported])
        state[module] = "done"

    for module in sorted(GRAPH):
        if module not in state:
            visit(module, [module])
    assert circles == []


def test_the_runner_package_is_engine_only():
    """The Spark runner runs tasks; it starts no services runtime and no command line."""
    runner = [m for m in GRAPH if m.startswith("jobledger.services.runner")]
    reached = {i for m in runner for i in GRAPH[m]}
    assert sorted(r for r in reached if ".host." in r or r.startswith("jobledger.cli")) == []


def test_the_layer_checks_see_real_imports():
    """The graph is read, not assumed: known edges are in it."""
    assert "jobledger.services.kafka" in GRAPH["jobledger.projections.log.log_file"]
    assert "jobledger.cli.options" in GRAPH["jobledger.cli.runner"]
    assert _layer("jobledger.cli.main") > _layer("jobledger.projections.log.replay")


def test_the_engine_meets_the_wire_form_of_a_key_group_range_only_in_key_groups():
    """Two classes carry Flink's name KeyGroupRange: the range the engine computes with
    (`services/control/key_groups.py`) and the event catalog's record of it. Only key_groups.py
    converts between them, so no engine module can take one for the other."""
    importers = sorted(
        name
        for name, path in MODULES.items()
        if name.startswith("jobledger.services")
        and name != "jobledger.services.control.key_groups"
        and any(
            isinstance(node, ast.ImportFrom)
            and (node.module or "").endswith("schemas.types")
            and any(alias.name == "KeyGroupRange" for alias in node.names)
            for node in ast.walk(ast.parse(path.read_text()))
        )
    )
    assert importers == []
