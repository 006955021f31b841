"""The pure/I-O wall, held by a test instead of a convention (design rule D-2: reducers know
nothing of Kafka, Spark or clocks). The imports of every module are read from its source, so
a reducer that starts to read the time, a socket or a random number fails here, as does an
event catalog that reaches up into the services or the projections."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

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


def _project_imports(path: Path) -> set[str]:
    """The project modules `path` imports, as absolute names (`from . import x` resolved to the
    module x when it is one, else to the package). Imports for type hints count too: a circle
    through a hint is still two modules that cannot be read or changed apart."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
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
`configuration.py`, `home.py`, `signing.py` and `transparency.py`: what every room of the
engine uses."""

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
        "jobledger.services.signing",
        "jobledger.services.transparency",
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


# -- the query rule, and why it has a type follower of its own ------------------------------
# The standard tools were weighed and do not serve. ruff's SLF001 flags only `_private`
# members, while the reducers' fields are public (the reducers read each other's, and replay
# and snapshots need them public). mypy and pyright check types, not who may read which
# attribute: holding a read model to `@query` methods would need a plugin or a stub per
# reducer hiding its fields, more code than the follower below and a second copy of every
# reducer's surface to keep in step. So the follower stays: it resolves a read's receiver to
# the reducer it reaches and allows only the members marked `@query`.

RULED = (
    "JobMaster", "SlotPool", "ResourceManager", "TaskExecutor", "Scheduler", "TaskSlotTable",
    "ExecutionGraph", "ExecutionJobVertex", "ExecutionVertex", "Execution",
)  # fmt: skip
"""The control plane's stateful objects: the reducers, the scheduler and slot table they
hold, and the live ExecutionGraph, which answers no queries at all (a read model reads the
JobMaster's `archived_graph()`, as Flink's REST handlers read an ArchivedExecutionGraph). A
read model asks them only what they answer as queries (services/control/queries.py)."""

CONFIGURATION = "config"
"""Every reducer's frozen configuration, given when it is made: no state, readable by all."""


def _classes(folders: tuple[Path, ...]) -> dict[str, ast.ClassDef]:
    return {
        node.name: node
        for folder in folders
        for path in sorted(folder.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
    }


def _functions(folders: tuple[Path, ...]) -> dict[str, ast.expr | None]:
    """The return annotation of every module-level function, by name."""
    return {
        node.name: node.returns
        for folder in folders
        for path in sorted(folder.rglob("*.py"))
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.FunctionDef)
    }


TYPED = (CONTROL, ROOT / "projections")
CLASSES = _classes(TYPED)
FUNCTIONS = _functions(TYPED)


def _decorators(node: ast.FunctionDef) -> set[str]:
    return {d.id for d in node.decorator_list if isinstance(d, ast.Name)}


def _members(name: str) -> dict[str, tuple[str, ast.expr | None]]:
    """attribute -> (kind, annotation) of a class: a field or property's type, or a method's
    return type (kind "method")."""
    members: dict[str, tuple[str, ast.expr | None]] = {}
    for stmt in CLASSES[name].body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            members[stmt.target.id] = ("value", stmt.annotation)
        elif isinstance(stmt, ast.FunctionDef):
            kind = "value" if "property" in _decorators(stmt) else "method"
            members[stmt.name] = (kind, stmt.returns)
    return members


def _surface(name: str) -> set[str]:
    """What a class answers to read models: its methods and properties marked `@query`."""
    return {CONFIGURATION} | {
        stmt.name
        for stmt in CLASSES[name].body
        if isinstance(stmt, ast.FunctionDef) and "query" in _decorators(stmt)
    }


MAPS = ("dict", "OrderedDict", "Mapping")
SEQUENCES = ("list", "tuple", "set", "frozenset", "Iterable", "Iterator", "Sequence")


def _resolve(annotation: ast.expr | None) -> object:
    """A type as the checker follows it: a class name, ("map", value), ("seq", item),
    ("pair", first, second), ("method", returns); None where it stops following."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return _resolve(ast.parse(annotation.value, mode="eval").body)
    if isinstance(annotation, ast.Name | ast.Attribute):
        name = annotation.id if isinstance(annotation, ast.Name) else annotation.attr
        return name if name in CLASSES else None
    if isinstance(annotation, ast.BinOp):  # X | None
        return _resolve(annotation.left) or _resolve(annotation.right)
    if isinstance(annotation, ast.Subscript):
        base = _resolve_name(annotation.value)
        args = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else []
        if base in MAPS and len(args) == 2:
            return ("map", _resolve(args[1]))
        if base in SEQUENCES:
            return ("seq", _resolve(args[0] if args else annotation.slice))
    return None


def _resolve_name(node: ast.expr) -> str | None:
    return node.id if isinstance(node, ast.Name) else getattr(node, "attr", None)


class _Types:
    """The types of one function's names, followed from annotations, assignments and loops
    through attributes, calls, subscripts and the dict and list methods read models use."""

    def __init__(self, scope: ast.AST) -> None:
        self.env: dict[str, object] = {}
        for _ in range(2):  # a name may be bound from one bound later in the source
            for node in ast.walk(scope):
                self._bind_from(node)

    def _bind_from(self, node: ast.AST) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]:
                self._bind(arg.arg, _resolve(arg.annotation))
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            self._bind_target(node.targets[0], self.of(node.value))
        elif isinstance(node, ast.AnnAssign):
            self._bind_target(node.target, _resolve(node.annotation) or self.of(node.value))
        elif isinstance(node, ast.NamedExpr):
            self._bind_target(node.target, self.of(node.value))
        elif isinstance(node, ast.For | ast.comprehension):
            iterated = self.of(node.iter)
            self._bind_target(node.target, iterated[1] if _is(iterated, "seq") else None)

    def _bind(self, name: str, value: object) -> None:
        if value is not None:
            self.env.setdefault(name, value)

    def _bind_target(self, target: ast.expr, value: object) -> None:
        if isinstance(target, ast.Name):
            self._bind(target.id, value)
        elif isinstance(target, ast.Tuple) and _is(value, "pair") and len(target.elts) == 2:
            self._bind_target(target.elts[0], value[1])
            self._bind_target(target.elts[1], value[2])

    def of(self, node: ast.expr | None) -> object:
        """The type of an expression, or None."""
        if isinstance(node, ast.Name):
            return self.env.get(node.id, node.id if node.id in CLASSES else None)
        if isinstance(node, ast.Attribute):
            owner = self.of(node.value)
            if isinstance(owner, str) and node.attr in _members(owner):
                kind, annotation = _members(owner)[node.attr]
                returns = _resolve(annotation)
                return ("method", returns) if kind == "method" else returns
            return None
        if isinstance(node, ast.Subscript):
            owner = self.of(node.value)
            return owner[1] if _is(owner, "map") or _is(owner, "seq") else None
        if isinstance(node, ast.IfExp):
            return self.of(node.body) or self.of(node.orelse)
        if isinstance(node, ast.BoolOp):
            return next((t for v in node.values if (t := self.of(v)) is not None), None)
        if isinstance(node, ast.Call):
            return self._call(node)
        return None

    def _call(self, node: ast.Call) -> object:
        func = node.func
        if isinstance(func, ast.Attribute):
            owner = self.of(func.value)
            if _is(owner, "map"):
                return {
                    "get": owner[1], "pop": owner[1], "setdefault": owner[1],
                    "values": ("seq", owner[1]), "items": ("seq", ("pair", None, owner[1])),
                }.get(func.attr)  # fmt: skip
        if isinstance(func, ast.Name) and node.args:
            if func.id in ("sorted", "list", "tuple", "reversed"):
                return self.of(node.args[0])
            if func.id == "enumerate":
                items = self.of(node.args[0])
                return ("seq", ("pair", None, items[1])) if _is(items, "seq") else None
        if isinstance(func, ast.Name) and func.id not in self.env:
            if func.id in CLASSES:
                return func.id
            return _resolve(FUNCTIONS.get(func.id))
        called = self.of(func)
        return called[1] if _is(called, "method") else None


def _is(value: object, kind: str) -> bool:
    return isinstance(value, tuple) and value[0] == kind


def _reaches(source: str, where: str) -> set[str]:
    """Every read in `source` of a control-plane object's attribute that is not among its
    queries, as "where:line Class.attribute"."""
    tree = ast.parse(source)
    scopes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef))]
    found = set()
    for scope in scopes:
        types = _Types(scope)
        for node in ast.walk(scope):
            if isinstance(node, ast.Attribute):
                owner = types.of(node.value)
                if owner in RULED and node.attr not in _surface(owner):
                    found.add(f"{where}:{node.lineno} {owner}.{node.attr}")
    return found


PROJECTIONS = sorted((ROOT / "projections").rglob("*.py"))


@pytest.mark.parametrize("path", PROJECTIONS, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_read_model_reads_a_reducer_only_through_its_queries(path):
    """A projection that read a reducer's fields broke with every rename or new index of
    them; it asks the reducer's `@query` methods, which answer in frozen records."""
    assert sorted(_reaches(path.read_text(), path.name)) == []


def test_the_query_rule_follows_reads_to_the_reducer_they_reach():
    """The rule is checked where it would break: reads of the old slot report (fields of the
    pool, the ResourceManager, the slot table and the scheduler, reached through the driver,
    its maps, loops, unpacked pairs and properties) and of the live ExecutionGraph are
    caught; queries, and the frozen graph they answer with, pass."""
    old = """
def report(driver: ReducerDriver, result: ReplayResult):
    for job_id, jm in sorted(driver.job_masters.items()):
        pool = jm.pool
        waiting = [(r, False) for r in pool.waiting_for_resource_manager.values()]
        slots = pool.slots()
    te = driver.resource_manager.task_executors.get("tm")
    own = result.driver.task_executors.get("tm")
    table = own.table if own is not None else None
    count = table.number_of_slots if table else 0
    jm = driver.job_masters["job"]
    restarts = jm.scheduler.pending_restarts
    info = jm.info()
    ev = jm.graph.attempts.get("a1") if jm.graph is not None else None
    for vertex in jm.graph.execution_vertices():
        state = vertex.current.state
    frozen = jm.archived_graph()
    states = [sub.current.state for sub in frozen.execution_vertices()]
"""
    assert sorted(r.split(" ")[1] for r in _reaches(old, "old")) == [
        "Execution.state",
        "ExecutionGraph.attempts",
        "ExecutionGraph.execution_vertices",
        "ExecutionVertex.current",
        "JobMaster.graph",
        "JobMaster.graph",
        "JobMaster.scheduler",
        "ResourceManager.task_executors",
        "Scheduler.pending_restarts",
        "SlotPool.waiting_for_resource_manager",
        "TaskExecutor.table",
        "TaskSlotTable.number_of_slots",
    ]
