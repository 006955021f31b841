"""ExecutionGraph: the JobGraph expanded to one ExecutionVertex per subtask, each with its
current Execution attempt, in topological order (Flink's ExecutionGraph / ExecutionJobVertex).

Invariants:
- vertices are in topological order; every input names an earlier vertex; no cycles;
- 0 < parallelism <= max parallelism <= 32768 for every vertex;
- each ExecutionVertex has exactly one current attempt; earlier attempts are kept as history.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jobledger.schemas.construct import trusted
from jobledger.schemas.jobs import JobSubmitted
from jobledger.schemas.types import (
    ConsumedPartitionGroup,
    DistributionPattern,
    ExecutionState,
    InputGateDeploymentDescriptor,
    JobEdge,
    JobVertex,
    ResultPartitionDeploymentDescriptor,
)

from .key_groups import UPPER_BOUND_MAX_PARALLELISM, compute_default_max_parallelism
from .queries import (
    ArchivedExecution,
    ArchivedExecutionGraph,
    ArchivedExecutionJobVertex,
    ArchivedExecutionVertex,
)
from .reducer import columns, derived

MAX_SUBTASKS_PER_JOB = 100_000
"""The most subtasks any graph holds (a snapshot's bound): `JobLimits.max_subtasks` may be
set up to this."""

DEPLOYMENT_BYTES = 320
"""What one deployment costs the log besides its operators' text, its input gates and its
result partitions (measured: 226-300 bytes for a subtask of a 10,000 x 10,000 job)."""
DESCRIPTOR_BYTES = 64
"""What one input gate or result partition adds to a deployment, at most (ids of up to 32
characters, a ConsumedPartitionGroup: constant, whatever the parallelism)."""


@dataclass(frozen=True)
class JobLimits:
    """What one JobGraph may cost, so that none within them holds a services instance for
    more than seconds: its subtasks (`jobledger.job.max-subtasks`) and the bytes its
    deployments put on the log (`jobledger.job.max-deployment-bytes`). Checked by `job
    submit` and again by the JobMaster reducer, where a JobSubmitted written straight to
    Kafka is refused with the reason, before anything is derived from it."""

    max_subtasks: int = 50_000
    """10,000 x 10,000 is 20,000: 2.5x headroom; the reducers derive about 10,000 subtasks'
    scheduling per second on this project's 2-core machine."""
    max_deployment_bytes: int = 256 * 1024 * 1024

    def refusal(self, job: JobSubmitted, parallelism: dict[str, int] | None = None) -> str | None:
        """Why `job` (at the overriding `parallelism`) is beyond the limits; None if not."""
        sizes = {v.vertex_id: (parallelism or {}).get(v.vertex_id, v.parallelism)
                 for v in job.vertices}  # fmt: skip
        total = sum(sizes.values())
        limit = min(self.max_subtasks, MAX_SUBTASKS_PER_JOB)
        if total > limit:
            return (f"{total} subtasks exceed the limit of {limit} "
                    "(jobledger.job.max-subtasks)")  # fmt: skip
        cost = deployment_bytes(job, sizes)
        if cost > self.max_deployment_bytes:
            return (
                f"its deployments would put about {cost} bytes on the log, over the limit of "
                f"{self.max_deployment_bytes} (jobledger.job.max-deployment-bytes): each of "
                "a vertex's subtasks carries its operators and its inputs and outputs"
            )
        return None


def deployment_bytes(job: JobSubmitted, sizes: dict[str, int]) -> int:
    """An upper estimate of the bytes a run's deployments put on the log: per subtask, the
    fixed fields, its vertex's operator chain (names and configuration, as text) and one
    descriptor per input and per consumer of its results."""
    outputs: dict[str, int] = {}
    for vertex in job.vertices:
        for edge in vertex.inputs:
            outputs[edge.source_vertex_id] = outputs.get(edge.source_vertex_id, 0) + 1
    total = 0
    for vertex in job.vertices:
        operators = sum(
            len(op.name.encode()) + sum(len(k.encode()) + len(v.encode()) for k, v in
                                        op.config.items())
            for op in vertex.operators
        )  # fmt: skip
        descriptors = len(vertex.inputs) + outputs.get(vertex.vertex_id, 0)
        each = DEPLOYMENT_BYTES + len(vertex.invokable_class_name.encode()) + operators
        total += sizes.get(vertex.vertex_id, 0) * (each + DESCRIPTOR_BYTES * descriptors)
    return total


class InvalidJobGraph(ValueError):
    """A JobGraph that cannot become an ExecutionGraph; the message says why."""


@dataclass
class Execution:
    attempt_id: str
    attempt_number: int
    state: ExecutionState = ExecutionState.CREATED
    slot_request_id: str | None = None
    allocation_id: str | None = None
    resource_id: str | None = None
    slot_index: int | None = None
    required_version: int = 0
    """Its vertex's version when it was scheduled: a slot or a deployment for it is refused
    once the vertex was modified since (Flink's ExecutionVertexVersion, RS-8, ES-3)."""

    @property
    def has_slot(self) -> bool:
        return self.allocation_id is not None


@dataclass
class ExecutionVertex:
    job_vertex_id: str
    subtask_index: int
    current: Execution
    prior: list[Execution] = field(default_factory=list)
    version: int = 0
    """Bumped before the vertex is cancelled, failed over or restarted (Flink's
    ExecutionVertexVersioner.recordModification), so nothing scheduled before is deployed."""

    @property
    def modified(self) -> bool:
        """Whether the vertex changed since its current attempt was scheduled."""
        return self.version != self.current.required_version


@dataclass
class ExecutionJobVertex:
    vertex: JobVertex
    parallelism: int
    max_parallelism: int
    subtasks: list[ExecutionVertex] = columns(at_most=MAX_SUBTASKS_PER_JOB)

    @property
    def vertex_id(self) -> str:
        return self.vertex.vertex_id


def _archived_vertex(jv: ExecutionJobVertex) -> ArchivedExecutionJobVertex:
    subtasks = tuple(
        ArchivedExecutionVertex(
            ev.job_vertex_id, ev.subtask_index, tuple(map(_archived, (*ev.prior, ev.current)))
        )
        for ev in jv.subtasks
    )
    return ArchivedExecutionJobVertex(jv.vertex, jv.parallelism, jv.max_parallelism, subtasks)


def _archived(execution: Execution) -> ArchivedExecution:
    return ArchivedExecution(
        execution.attempt_id, execution.attempt_number, execution.state,
        execution.slot_request_id, execution.allocation_id, execution.resource_id,
        execution.slot_index,
    )  # fmt: skip


AttemptIds = Callable[[str, int, int], str]
"""(vertex id, subtask index, attempt number) -> ExecutionAttemptID."""


@dataclass
class ExecutionGraph:
    job_id: str
    vertices: dict[str, ExecutionJobVertex]
    attempts: dict[str, ExecutionVertex] = derived()
    """The vertex of every attempt ever made, by its ExecutionAttemptID."""
    flat: list[ExecutionVertex] = derived()
    """Every ExecutionVertex in topological order; the job's checks scan it per task update."""
    all_to_all_gates: dict[tuple[str, int], InputGateDeploymentDescriptor] = derived()
    """The input gate of each ALL_TO_ALL input (consumer vertex, input's position), made on
    its first deployment: it is the same for every consumer subtask (every producer), so
    one is shared by all of their deployments, as Flink's ConsumedPartitionGroup is
    (FLINK-21110)."""
    failover_topology: Any = derived(default=None)
    """The graph's shape as a failover reads it (`failover_strategy.RegionTopology`), made
    on the first failure: the shape never changes, only the attempts' states do."""

    def __post_init__(self) -> None:
        self.flat = [ev for jv in self.vertices.values() for ev in jv.subtasks]
        self.attempts = {
            execution.attempt_id: ev for ev in self.flat for execution in (*ev.prior, ev.current)
        }
        self.all_to_all_gates = {}
        self.failover_topology = None

    @classmethod
    def build(
        cls, job: JobSubmitted, attempt_ids: AttemptIds, parallelism: dict[str, int] | None = None,
        limits: JobLimits | None = None,
    ) -> ExecutionGraph:  # fmt: skip
        """Expand the JobGraph; `parallelism` overrides vertices' parallelism (rescaling).
        InvalidJobGraph if it cannot be expanded or is beyond `limits` (the defaults if
        None), checked before any subtask is made."""
        refusal = (limits or JobLimits()).refusal(job, parallelism)
        if refusal is not None:
            raise InvalidJobGraph(refusal)
        ordered = _topological_order(job.vertices)
        vertices: dict[str, ExecutionJobVertex] = {}
        for vertex in ordered:
            p = (parallelism or {}).get(vertex.vertex_id, vertex.parallelism)
            max_p = _max_parallelism(vertex, p)
            subtasks = [
                ExecutionVertex(
                    vertex.vertex_id, i, Execution(attempt_ids(vertex.vertex_id, i, 0), 0)
                )
                for i in range(p)
            ]
            vertices[vertex.vertex_id] = ExecutionJobVertex(vertex, p, max_p, subtasks)
        return cls(job.job_id, vertices)

    def execution_vertices(self) -> list[ExecutionVertex]:
        return self.flat

    def executions(self) -> list[Execution]:
        return [ev.current for ev in self.flat]

    def archive(self) -> ArchivedExecutionGraph:
        """A frozen copy of the graph as it is now, for read models: what they are handed
        cannot change the job, and outlives the next event."""
        return ArchivedExecutionGraph(
            self.job_id, tuple(_archived_vertex(jv) for jv in self.vertices.values())
        )

    def consumers_of(self, vertex_id: str) -> list[ExecutionJobVertex]:
        """The job vertices reading `vertex_id`'s results, in topological order."""
        return [
            jv
            for jv in self.vertices.values()
            if any(edge.source_vertex_id == vertex_id for edge in jv.vertex.inputs)
        ]

    def find(self, attempt_id: str) -> ExecutionVertex | None:
        """The vertex whose *current* attempt is `attempt_id` (older attempts are outdated)."""
        ev = self.attempts.get(attempt_id)
        return ev if ev is not None and ev.current.attempt_id == attempt_id else None

    def reset(self, ev: ExecutionVertex, attempt_ids: AttemptIds) -> None:
        """A new CREATED attempt for a restarted vertex (ES-9)."""
        number = ev.current.attempt_number + 1
        ev.prior.append(ev.current)
        ev.current = Execution(attempt_ids(ev.job_vertex_id, ev.subtask_index, number), number)
        self.attempts[ev.current.attempt_id] = ev

    def input_gates(self, ev: ExecutionVertex) -> list[InputGateDeploymentDescriptor]:
        """The producer subtasks each input of `ev` reads, as one ConsumedPartitionGroup: all
        of them for ALL_TO_ALL, the matching slice for POINTWISE. Built without validation
        (`construct.trusted`), as the output partitions and the deployment that carries them
        are: they are made from the graph, which was checked when it was built, and
        validating them again would cost 2 µs each, for nothing. An
        ALL_TO_ALL gate is made once per input and shared (`all_to_all_gates`): events are
        frozen, and nothing changes a record inside one."""
        job_vertex = self.vertices[ev.job_vertex_id]
        gates = []
        for position, edge in enumerate(job_vertex.vertex.inputs):
            producers = self.vertices[edge.source_vertex_id].parallelism
            if edge.distribution_pattern is DistributionPattern.POINTWISE:
                consumed = pointwise_producers(producers, job_vertex.parallelism, ev.subtask_index)
                gates.append(_gate(edge, consumed))
                continue
            gate = self.all_to_all_gates.get((ev.job_vertex_id, position))
            if gate is None:
                gate = _gate(edge, range(producers))
                self.all_to_all_gates[ev.job_vertex_id, position] = gate
            gates.append(gate)
        return gates

    def output_partitions(self, ev: ExecutionVertex) -> list[ResultPartitionDeploymentDescriptor]:
        """The result partitions `ev` produces, one per consuming vertex, in graph order."""
        return [
            trusted(
                ResultPartitionDeploymentDescriptor,
                dict(
                    consumer_vertex_id=jv.vertex_id,
                    distribution_pattern=edge.distribution_pattern,
                    result_partition_type=edge.result_partition_type,
                    number_of_consumer_subtasks=jv.parallelism,
                    consumer_max_parallelism=jv.max_parallelism,
                ),
            )
            for jv in self.vertices.values()
            for edge in jv.vertex.inputs
            if edge.source_vertex_id == ev.job_vertex_id
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            vid: {
                "name": jv.vertex.name, "parallelism": jv.parallelism,
                "max_parallelism": jv.max_parallelism,
                "subtasks": [
                    {"attempt_id": ev.current.attempt_id,
                     "attempt_number": ev.current.attempt_number,
                     "state": ev.current.state.value, "allocation_id": ev.current.allocation_id,
                     "resource_id": ev.current.resource_id, "slot_index": ev.current.slot_index,
                     "prior": [(e.attempt_id, e.state.value) for e in ev.prior]}
                    for ev in jv.subtasks
                ],
            }
            for vid, jv in self.vertices.items()
        }  # fmt: skip


def _gate(edge: JobEdge, consumed: range) -> InputGateDeploymentDescriptor:
    group = trusted(ConsumedPartitionGroup, dict(
        first_subtask_index=consumed.start, number_of_subtasks=len(consumed),
    ))  # fmt: skip
    return trusted(InputGateDeploymentDescriptor, dict(
        source_vertex_id=edge.source_vertex_id,
        distribution_pattern=edge.distribution_pattern,
        result_partition_type=edge.result_partition_type,
        consumed_partition_group=group,
    ))  # fmt: skip


def pointwise_producers(producers: int, consumers: int, index: int) -> range:
    """The producer subtasks a POINTWISE consumer subtask `index` reads from."""
    if producers >= consumers:
        return range(index * producers // consumers, (index + 1) * producers // consumers)
    first = index * producers // consumers
    return range(first, first + 1)


def _max_parallelism(vertex: JobVertex, parallelism: int) -> int:
    if not 0 < parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise InvalidJobGraph(
            f"vertex {vertex.vertex_id}: parallelism {parallelism} is not in "
            f"1..{UPPER_BOUND_MAX_PARALLELISM}"
        )
    if vertex.max_parallelism == -1:
        return compute_default_max_parallelism(parallelism)
    if not 0 < vertex.max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise InvalidJobGraph(
            f"vertex {vertex.vertex_id}: max parallelism {vertex.max_parallelism} is not in "
            f"1..{UPPER_BOUND_MAX_PARALLELISM}"
        )
    if vertex.max_parallelism < parallelism:
        raise InvalidJobGraph(
            f"vertex {vertex.vertex_id}: parallelism {parallelism} exceeds its max "
            f"parallelism {vertex.max_parallelism}"
        )
    return vertex.max_parallelism


def _topological_order(vertices: list[JobVertex]) -> list[JobVertex]:
    """Kahn's algorithm, keeping the JobGraph's order among ready vertices."""
    by_id: dict[str, JobVertex] = {}
    for vertex in vertices:
        if vertex.vertex_id in by_id:
            raise InvalidJobGraph(f"vertex id {vertex.vertex_id} appears twice")
        by_id[vertex.vertex_id] = vertex
    if not by_id:
        raise InvalidJobGraph("a JobGraph needs at least one vertex")
    for vertex in vertices:
        for edge in vertex.inputs:
            if edge.source_vertex_id not in by_id:
                raise InvalidJobGraph(
                    f"vertex {vertex.vertex_id} reads unknown vertex {edge.source_vertex_id}"
                )
    # layer by layer, each in the JobGraph's order: a layer's vertices are those whose last
    # input was placed in the layer before. Counting each vertex's unplaced inputs keeps this
    # linear in vertices and edges (scanning every vertex for readiness per layer was
    # quadratic: a chain of 3,000 vertices took 2.7 s, one of 50,000, within the subtask
    # limit, would hold its partition ~12 min; now 0.2 s).
    position = {v.vertex_id: i for i, v in enumerate(vertices)}
    unplaced = {v.vertex_id: len(v.inputs) for v in vertices}
    consumers: dict[str, list[JobVertex]] = {}
    for vertex in vertices:
        for edge in vertex.inputs:
            consumers.setdefault(edge.source_vertex_id, []).append(vertex)
    ordered: list[JobVertex] = []
    layer = [v for v in vertices if not v.inputs]
    while layer:
        ordered.extend(layer)
        ready: list[JobVertex] = []
        for vertex in layer:
            for consumer in consumers.get(vertex.vertex_id, ()):
                unplaced[consumer.vertex_id] -= 1
                if unplaced[consumer.vertex_id] == 0:
                    ready.append(consumer)
        layer = sorted(ready, key=lambda v: position[v.vertex_id])
    if len(ordered) < len(vertices):
        raise InvalidJobGraph("the JobGraph has a cycle")
    return ordered
