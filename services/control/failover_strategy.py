"""FailoverStrategy: which execution vertices a task failure restarts (Flink's FLIP-1
strategies behind `jobmanager.execution.failover-strategy`).

- `full` (RestartAllFailoverStrategy): every vertex of the job.
- `region` (RestartPipelinedRegionFailoverStrategy, Flink's default since 1.10): the pipelined
  region of the failed vertex; the region producing any input it needs whose result is no
  longer available; and every region consuming a result of a region restarted, transitively.

A pipelined region is a set of execution vertices connected by PIPELINED results (Flink's
PipelinedRegionComputeUtil): the subtasks an ALL_TO_ALL edge connects all fall into one region,
a POINTWISE edge joins each consumer subtask with the producer subtasks it reads. Regions that
depend on each other in a cycle through BLOCKING results are merged into one, since neither
could be restarted without the other.

A BLOCKING result stays available while its producer's attempt was deployed and has not failed
or been cancelled (the JobMaster's partition tracker forgets it then); a global failure
restarts every vertex whatever the strategy (RS-5).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import StrEnum

from jobledger.schemas.types import DistributionPattern, ExecutionState, ResultPartitionType

from .execution_graph import ExecutionGraph, ExecutionVertex, pointwise_producers

FAILOVER_STRATEGY_OPTION = "jobmanager.execution.failover-strategy"

Key = tuple[str, int]
"""An execution vertex by (job vertex id, subtask index)."""
Node = tuple[str, int]
"""A node of the regions' dependency graph: a region by its first subtask's Key, or a block
by ("", -1 - its position)."""

PRODUCING = frozenset({
    ExecutionState.DEPLOYING, ExecutionState.INITIALIZING, ExecutionState.RUNNING,
    ExecutionState.FINISHED,
})  # fmt: skip
"""The states in which an attempt's result partitions are tracked (available)."""


class FailoverStrategyName(StrEnum):
    """The values of `jobmanager.execution.failover-strategy`."""

    FULL = "full"
    REGION = "region"

    @classmethod
    def from_option(cls, value: str) -> FailoverStrategyName:
        """Parse the option as Flink does (case-insensitive); anything else is refused."""
        try:
            return cls(value.strip().lower())
        except ValueError:
            raise ValueError(
                f"Unknown failover strategy: {value!r} ({FAILOVER_STRATEGY_OPTION} takes "
                "'full' or 'region')"
            ) from None


def _key(ev: ExecutionVertex) -> Key:
    return ev.job_vertex_id, ev.subtask_index


@dataclass(frozen=True)
class Block:
    """Subtasks of one JobEdge where every producer feeds every consumer: all of them for
    ALL_TO_ALL, one consumer and the producers it reads for POINTWISE. The graph is read in
    blocks, not subtask by subtask: an ALL_TO_ALL edge of parallelism P is P * P subtask
    connections but one block, so a failure costs what the job's edges do, not what its
    subtask connections do (ten times less at parallelism 32)."""

    producers: list[Key]
    consumers: list[Key]
    kind: ResultPartitionType


def _blocks(graph: ExecutionGraph) -> list[Block]:
    """Every connection of the graph, as blocks; together they make every (producer subtask,
    consumer subtask) pair exactly once."""
    blocks = []
    for job_vertex in graph.vertices.values():
        consumer_id = job_vertex.vertex_id
        for edge in job_vertex.vertex.inputs:
            source_id = edge.source_vertex_id
            producers = graph.vertices[source_id].parallelism
            kind = edge.result_partition_type
            if edge.distribution_pattern is not DistributionPattern.POINTWISE:
                blocks.append(Block(
                    [(source_id, i) for i in range(producers)],
                    [(consumer_id, j) for j in range(job_vertex.parallelism)], kind,
                ))  # fmt: skip
                continue
            for j in range(job_vertex.parallelism):
                read = pointwise_producers(producers, job_vertex.parallelism, j)
                blocks.append(Block([(source_id, i) for i in read], [(consumer_id, j)], kind))
    return blocks


def pipelined_regions(graph: ExecutionGraph) -> dict[Key, int]:
    """Each execution vertex's region, numbered in the topological order of their first
    vertices."""
    return topology(graph).region_of


@dataclass(frozen=True)
class RegionTopology:
    """What a failover reads of a graph's shape, computed once per ExecutionGraph (its
    `failover_topology`): the blocks, each subtask's region and the regions' members, and
    which blocks each subtask produces for and consumes from. Only the attempts' states
    change between two failures; recomputed per failure, this was O(subtasks) for each of
    them, and a TimerFired timing out N slot requests fails N subtasks in one input."""

    blocks: list[Block]
    region_of: dict[Key, int]
    members: dict[int, list[Key]]
    """Each region's subtasks, in topological order."""
    feeding: dict[Key, list[int]]
    """The blocks (by position) each subtask produces for."""
    fed: dict[Key, list[int]]
    """The blocks each subtask consumes from."""
    position: dict[Key, int]
    """Each subtask's place in the graph's topological order."""


def topology(graph: ExecutionGraph) -> RegionTopology:
    """The graph's RegionTopology, made on its first failure and kept with it (a rescale
    builds a new graph, and with it a new topology)."""
    cached = graph.failover_topology
    if isinstance(cached, RegionTopology):
        return cached
    blocks = _blocks(graph)
    region_of = _pipelined_regions(graph, blocks)
    members: dict[int, list[Key]] = {}
    for key, region in region_of.items():
        members.setdefault(region, []).append(key)
    feeding: dict[Key, list[int]] = {}
    fed: dict[Key, list[int]] = {}
    for n, block in enumerate(blocks):
        for key in block.producers:
            feeding.setdefault(key, []).append(n)
        for key in block.consumers:
            fed.setdefault(key, []).append(n)
    position = {_key(ev): n for n, ev in enumerate(graph.execution_vertices())}
    made = RegionTopology(blocks, region_of, members, feeding, fed, position)
    graph.failover_topology = made
    return made


def _pipelined_regions(graph: ExecutionGraph, blocks: list[Block]) -> dict[Key, int]:
    keys = [_key(ev) for ev in graph.execution_vertices()]
    order = {k: n for n, k in enumerate(keys)}
    parent = {k: k for k in keys}

    def find(k: Key) -> Key:
        """The set's first subtask in topological order (`union` keeps it the root)."""
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    def union(a: Key, b: Key) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb, key=order.get)] = min(ra, rb, key=order.get)

    for block in blocks:
        if block.kind is not ResultPartitionType.BLOCKING:
            first = block.producers[0]
            for member in (*block.producers[1:], *block.consumers):
                union(first, member)
    # the regions' dependencies pass through one node per block (its producers' regions ->
    # the block -> its consumers' regions): a path between two regions exists through it
    # exactly when an arc would, and a BLOCKING ALL_TO_ALL block of P x P single-subtask
    # regions makes 2P arcs instead of P^2
    arcs: set[tuple[Node, Node]] = set()
    for n, block in enumerate(blocks):
        hub: Node = ("", -1 - n)
        arcs |= {(find(p), hub) for p in block.producers}
        arcs |= {(hub, find(c)) for c in block.consumers}
    for cycle in _cycles(arcs):
        regions = [node for node in cycle if node[1] >= 0]
        for member in regions[1:]:
            union(regions[0], member)
    numbers: dict[Key, int] = {}
    return {k: numbers.setdefault(find(k), len(numbers)) for k in keys}


def _cycles(arcs: set[tuple[Node, Node]]) -> list[list[Node]]:
    """The strongly connected components of more than one node (Tarjan's algorithm,
    iterative so that a long chain of regions cannot exhaust the stack)."""
    successors: dict[Node, list[Node]] = {}
    for a, b in sorted(arcs):
        successors.setdefault(a, []).append(b)
        successors.setdefault(b, [])
    index: dict[Node, int] = {}
    low: dict[Node, int] = {}
    stack: list[Node] = []
    on_stack: set[Node] = set()
    found: list[list[Node]] = []
    for root in successors:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if i < len(successors[node]):
                work.append((node, i + 1))
                nxt = successors[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return found


def tasks_needing_restart(
    strategy: str, graph: ExecutionGraph, failed: ExecutionVertex
) -> list[ExecutionVertex]:
    """getTasksNeedingRestart under the named strategy (a FailoverStrategyName value): the
    vertices a failure of `failed` restarts, in topological order. Each block is read once
    per failure, however many of the regions visited touch it (read per region, a BLOCKING
    ALL_TO_ALL edge of P x P single-subtask regions was P^2), and only the regions restarted
    are listed, not the whole graph."""
    if strategy == FailoverStrategyName.FULL:
        return list(graph.execution_vertices())
    shape = topology(graph)
    start = shape.region_of[_key(failed)]
    visited = {start}
    queue = deque([start])
    read_as_consumer: set[int] = set()
    read_as_producer: set[int] = set()
    while queue:
        region = queue.popleft()
        involved: list[Key] = []
        for key in shape.members[region]:
            for n in shape.fed.get(key, ()):
                if n not in read_as_consumer:
                    read_as_consumer.add(n)
                    involved += [p for p in shape.blocks[n].producers
                                 if _vertex(graph, p).current.state not in PRODUCING]  # fmt: skip
            for n in shape.feeding.get(key, ()):
                if n not in read_as_producer:
                    read_as_producer.add(n)
                    involved += shape.blocks[n].consumers
        for key in involved:
            if shape.region_of[key] not in visited:
                visited.add(shape.region_of[key])
                queue.append(shape.region_of[key])
    restarted = sorted((k for r in visited for k in shape.members[r]), key=shape.position.get)
    return [_vertex(graph, key) for key in restarted]


def _vertex(graph: ExecutionGraph, key: Key) -> ExecutionVertex:
    return graph.vertices[key[0]].subtasks[key[1]]
