"""SchedulingStrategy: which execution vertices a job schedules and deploys when, one class per
ScheduleMode (Flink's EagerSchedulingStrategy and LazyFromSourcesSchedulingStrategy behind
DefaultScheduler), so the mode is asked in one place, not as a flag in each of the
scheduler's steps.

- EAGER: every vertex is scheduled at the start (and after a restart); the attempts scheduled
  together are deployed once all of them hold a slot (Flink's waitForAllSlotsAndDeploy).
- LAZY_FROM_SOURCES: a vertex is scheduled once its inputs are consumable (a BLOCKING result
  once every producer FINISHED, a PIPELINED one once the producers it reads are RUNNING), and
  deployed as soon as its own slot arrives (deployIndividually).
- LAZY_FROM_SOURCES_WITH_BATCH_SLOT_REQUEST: as LAZY_FROM_SOURCES, its slots requested as
  batch requests (no timeout while the pool could fulfil them, SP-2x).

A strategy only reads the ExecutionGraph; the Scheduler schedules and deploys what it names.
The vertices to schedule are yielded one at a time, each looked at after the one before was
scheduled, as Flink's strategy hands each to allocateSlotsAndDeploy in turn: scheduling can
fulfil a slot at once and, through it, fail or cancel other vertices.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from typing import ClassVar

from jobledger.schemas.types import (
    DistributionPattern,
    ExecutionState,
    JobEdge,
    ResultPartitionType,
    ScheduleMode,
)

from .execution_graph import ExecutionGraph, ExecutionJobVertex, ExecutionVertex

BULK = frozenset({ExecutionState.CREATED, ExecutionState.SCHEDULED})
"""EAGER deploys the attempts being scheduled together once all of them hold a slot."""

CONSUMABLE = (ExecutionState.RUNNING, ExecutionState.FINISHED)
"""A PIPELINED result is consumable once its producer is in one of these."""


class SchedulingStrategy(ABC):
    """What one schedule mode schedules and deploys; stateless, asked with the job's graph."""

    batch_slot_requests: ClassVar[bool] = False
    """Whether slots are requested as batch requests (requestNewAllocatedBatchSlot)."""

    @abstractmethod
    def start_scheduling(self, graph: ExecutionGraph) -> Iterator[ExecutionVertex]:
        """startScheduling: the CREATED vertices to schedule when the job starts running."""

    def restart_tasks(self, graph: ExecutionGraph) -> Iterator[ExecutionVertex]:
        """restartTasks: the CREATED vertices to schedule once a restart reset its vertices;
        those are asked as at the start, as are any left CREATED before it."""
        return self.start_scheduling(graph)

    @abstractmethod
    def on_execution_state_change(
        self, graph: ExecutionGraph, ev: ExecutionVertex, before: ExecutionState | None = None
    ) -> Iterator[ExecutionVertex]:
        """onExecutionStateChange: the CREATED vertices to schedule now that `ev`'s attempt
        moved to its current state from `before` (None: not known)."""

    @abstractmethod
    def on_slot_fulfilled(
        self, graph: ExecutionGraph, ev: ExecutionVertex
    ) -> list[ExecutionVertex]:
        """The vertices to deploy now that `ev`'s scheduled attempt holds its slot (the
        scheduler deploys only those scheduled, holding a slot and not modified)."""


class EagerSchedulingStrategy(SchedulingStrategy):
    """EAGER: everything at once, deployed together."""

    def start_scheduling(self, graph: ExecutionGraph) -> Iterator[ExecutionVertex]:
        for job_vertex in graph.vertices.values():
            for ev in job_vertex.subtasks:
                if ev.current.state is ExecutionState.CREATED:
                    yield ev

    def on_execution_state_change(
        self, graph: ExecutionGraph, ev: ExecutionVertex, before: ExecutionState | None = None
    ) -> Iterator[ExecutionVertex]:
        """Nothing: every vertex was scheduled when the job started or restarted."""
        return iter(())

    def on_slot_fulfilled(
        self, graph: ExecutionGraph, ev: ExecutionVertex
    ) -> list[ExecutionVertex]:
        """Every vertex once each one being scheduled holds a slot (the whole job or a
        restarted region), else none. Asked from the last: slots come in the order requested,
        so one still without a slot is met first, not after every one that has its slot (a
        scan per slot, per job)."""
        vertices = graph.execution_vertices()
        if all(other.current.has_slot for other in reversed(vertices)
               if other.current.state in BULK):  # fmt: skip
            return vertices
        return []


class LazyFromSourcesSchedulingStrategy(SchedulingStrategy):
    """LAZY_FROM_SOURCES: the sources first, each consumer once its inputs are consumable."""

    def start_scheduling(self, graph: ExecutionGraph) -> Iterator[ExecutionVertex]:
        return self._ready(graph, graph.vertices.values())

    def on_execution_state_change(
        self, graph: ExecutionGraph, ev: ExecutionVertex, before: ExecutionState | None = None
    ) -> Iterator[ExecutionVertex]:
        """A RUNNING or FINISHED attempt may make its results consumable: only the consumers
        of `ev`'s results can have become ready, and only through an input that `ev`'s move
        made consumable: a PIPELINED one as `ev` entered CONSUMABLE, a BLOCKING one as it
        entered FINISHED. Every other CREATED vertex was asked when it became CREATED or when
        one of its own producers last made an input consumable; asked again on each
        producer's RUNNING -> FINISHED, every consumer of a PIPELINED ALL_TO_ALL input scanned
        its P producers each time (P^2: 2.4 s at 4,000)."""
        state = ev.current.state
        if state not in CONSUMABLE:
            return iter(())
        entered_consumable = before is None or before not in CONSUMABLE
        entered_finished = state is ExecutionState.FINISHED and before is not state

        def moved(edge: JobEdge) -> bool:
            if edge.source_vertex_id != ev.job_vertex_id:
                return False
            if edge.result_partition_type is ResultPartitionType.BLOCKING:
                return entered_finished
            return entered_consumable

        consumers = [jv for jv in graph.consumers_of(ev.job_vertex_id)
                     if any(map(moved, jv.vertex.inputs))]  # fmt: skip
        return self._ready(graph, consumers)

    def on_slot_fulfilled(
        self, graph: ExecutionGraph, ev: ExecutionVertex
    ) -> list[ExecutionVertex]:
        """`ev` alone, at once (deployIndividually)."""
        return [ev]

    def _ready(
        self, graph: ExecutionGraph, job_vertices: Iterable[ExecutionJobVertex]
    ) -> Iterator[ExecutionVertex]:
        """Every CREATED vertex of `job_vertices` whose inputs are consumable, in topological
        order. Asked once per job vertex whether inputs read whole (ALL_TO_ALL, BLOCKING)
        allow its subtasks: asked per subtask, each of the P consumers of an ALL_TO_ALL input
        would scan its P producers on every producer's RUNNING, P^3 for a job (nearly a minute for
        two vertices of 1000). Scheduling moves no task to RUNNING or FINISHED, so the
        answer holds for the job vertex."""
        for job_vertex in job_vertices:
            inputs = job_vertex.vertex.inputs
            whole = all(
                not _read_in_slices(edge) and _producers_ready(graph, edge) for edge in inputs
            )
            if not whole and not any(map(_read_in_slices, inputs)):
                continue  # an input read whole is not consumable: no subtask may start
            for ev in job_vertex.subtasks:
                if ev.current.state is ExecutionState.CREATED and (
                    whole or _inputs_ready(graph, ev)
                ):
                    yield ev


class LazyFromSourcesWithBatchSlotRequestSchedulingStrategy(LazyFromSourcesSchedulingStrategy):
    """LAZY_FROM_SOURCES_WITH_BATCH_SLOT_REQUEST: lazy, with batch slot requests."""

    batch_slot_requests: ClassVar[bool] = True


def _read_in_slices(edge: JobEdge) -> bool:
    """Whether the consumer subtasks of `edge` are ready each at its own time: a PIPELINED
    POINTWISE input is consumable once the producers each subtask reads run."""
    return (
        edge.distribution_pattern is DistributionPattern.POINTWISE
        and edge.result_partition_type is not ResultPartitionType.BLOCKING
    )


def _producers_ready(graph: ExecutionGraph, edge: JobEdge) -> bool:
    """An input read whole: BLOCKING once every producer FINISHED, PIPELINED once every
    producer is at least RUNNING. Asked from the last producer: they were deployed, and run,
    in order, so one not yet running is met first, not after all that run (a scan per
    producer's RUNNING)."""
    producers = reversed(graph.vertices[edge.source_vertex_id].subtasks)
    if edge.result_partition_type is ResultPartitionType.BLOCKING:
        return all(p.current.state is ExecutionState.FINISHED for p in producers)
    return all(p.current.state in CONSUMABLE for p in producers)


def _inputs_ready(graph: ExecutionGraph, ev: ExecutionVertex) -> bool:
    """A BLOCKING result is consumable once every producer FINISHED; a PIPELINED one once each
    producer subtask `ev` reads is at least RUNNING."""
    for gate in graph.input_gates(ev):
        producers = graph.vertices[gate.source_vertex_id].subtasks
        if gate.result_partition_type is ResultPartitionType.BLOCKING:
            if any(p.current.state is not ExecutionState.FINISHED for p in producers):
                return False
        elif any(producers[i].current.state not in CONSUMABLE for i in gate.consumed_subtasks):
            return False
    return True


EAGER = EagerSchedulingStrategy()

SCHEDULING_STRATEGIES: dict[ScheduleMode, SchedulingStrategy] = {
    ScheduleMode.EAGER: EAGER,
    ScheduleMode.LAZY_FROM_SOURCES: LazyFromSourcesSchedulingStrategy(),
    ScheduleMode.LAZY_FROM_SOURCES_WITH_BATCH_SLOT_REQUEST: (
        LazyFromSourcesWithBatchSlotRequestSchedulingStrategy()
    ),
}


def scheduling_strategy_for(mode: ScheduleMode) -> SchedulingStrategy:
    """The strategy of `mode`; a mode this version does not know (UNKNOWN, read from a newer
    writer) schedules eagerly."""
    return SCHEDULING_STRATEGIES.get(mode, EAGER)
