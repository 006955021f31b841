"""SchedulingStrategy: what each schedule mode schedules and deploys, asked of the strategy
alone over a graph (after Flink's EagerSchedulingStrategyTest and
LazyFromSourcesSchedulingStrategyTest)."""

from __future__ import annotations

import pytest

from jobledger.schemas.jobs import JobSubmitted
from jobledger.schemas.types import ExecutionState, ScheduleMode
from jobledger.services.control.execution_graph import ExecutionGraph
from jobledger.services.control.scheduling_strategy import (
    EagerSchedulingStrategy,
    LazyFromSourcesSchedulingStrategy,
    LazyFromSourcesWithBatchSlotRequestSchedulingStrategy,
    scheduling_strategy_for,
)

from ..support.jobs import vertex

EAGER = EagerSchedulingStrategy()
LAZY = LazyFromSourcesSchedulingStrategy()

PIPELINED = [vertex("a", 2), vertex("b", 2, ("a", "POINTWISE", "PIPELINED"))]
BLOCKING = [vertex("a", 2), vertex("b", 1, ("a", "ALL_TO_ALL", "BLOCKING"))]


def graph(*vertices) -> ExecutionGraph:
    job = JobSubmitted(event_id="j", event_time=0, producer="test", job_id="job",
                       job_name="job", vertices=list(vertices))  # fmt: skip
    return ExecutionGraph.build(job, lambda v, i, n: f"{v}{i}-{n}")


def names(vertices) -> list[str]:
    return [f"{ev.job_vertex_id}{ev.subtask_index}" for ev in vertices]


def at(g: ExecutionGraph, name: str):
    return g.vertices[name[0]].subtasks[int(name[1:])]


def move(g: ExecutionGraph, state: ExecutionState, *which: str) -> None:
    for name in which:
        at(g, name).current.state = state


@pytest.mark.parametrize(
    ("mode", "strategy"),
    [
        (ScheduleMode.EAGER, EagerSchedulingStrategy),
        (ScheduleMode.LAZY_FROM_SOURCES, LazyFromSourcesSchedulingStrategy),
        (
            ScheduleMode.LAZY_FROM_SOURCES_WITH_BATCH_SLOT_REQUEST,
            LazyFromSourcesWithBatchSlotRequestSchedulingStrategy,
        ),
        (ScheduleMode.UNKNOWN, EagerSchedulingStrategy),
    ],
)
def test_each_schedule_mode_has_its_strategy(mode, strategy):
    assert type(scheduling_strategy_for(mode)) is strategy


def test_only_batch_slot_request_mode_requests_batch_slots():
    assert [
        scheduling_strategy_for(mode).batch_slot_requests
        for mode in (ScheduleMode.EAGER, ScheduleMode.LAZY_FROM_SOURCES,
                     ScheduleMode.LAZY_FROM_SOURCES_WITH_BATCH_SLOT_REQUEST)
    ] == [False, False, True]  # fmt: skip


def test_eager_schedules_every_created_vertex_at_the_start_and_nothing_on_progress():
    g = graph(*BLOCKING)
    move(g, ExecutionState.SCHEDULED, "a1")
    assert names(EAGER.start_scheduling(g)) == ["a0", "b0"]
    move(g, ExecutionState.FINISHED, "a0", "a1")
    assert names(EAGER.on_execution_state_change(g, at(g, "a0"))) == []


def test_eager_deploys_all_once_every_scheduled_vertex_holds_a_slot():
    g = graph(*PIPELINED)
    move(g, ExecutionState.SCHEDULED, "a0", "a1", "b0", "b1")
    for name in ("a0", "a1", "b0"):
        at(g, name).current.allocation_id = f"slot-{name}"
    assert EAGER.on_slot_fulfilled(g, at(g, "b0")) == []
    at(g, "b1").current.allocation_id = "slot-b1"
    assert names(EAGER.on_slot_fulfilled(g, at(g, "b1"))) == ["a0", "a1", "b0", "b1"]


def test_lazy_starts_from_the_sources():
    assert names(LAZY.start_scheduling(graph(*PIPELINED))) == ["a0", "a1"]


def test_lazy_schedules_a_pipelined_pointwise_consumer_once_its_own_producer_runs():
    g = graph(*PIPELINED)
    move(g, ExecutionState.DEPLOYING, "a0", "a1")
    assert names(LAZY.on_execution_state_change(g, at(g, "a1"))) == []
    move(g, ExecutionState.RUNNING, "a1")
    assert names(LAZY.on_execution_state_change(g, at(g, "a1"))) == ["b1"]


def test_lazy_schedules_a_blocking_consumer_once_every_producer_finished():
    g = graph(*BLOCKING)
    move(g, ExecutionState.FINISHED, "a0")
    move(g, ExecutionState.RUNNING, "a1")
    assert names(LAZY.on_execution_state_change(g, at(g, "a0"))) == []
    move(g, ExecutionState.FINISHED, "a1")
    assert names(LAZY.on_execution_state_change(g, at(g, "a1"))) == ["b0"]


def test_lazy_restarts_what_is_created_again_as_at_the_start():
    g = graph(*BLOCKING)
    move(g, ExecutionState.FINISHED, "a0", "a1")
    assert names(LAZY.restart_tasks(g)) == ["b0"]


def test_lazy_deploys_each_vertex_as_its_slot_arrives():
    g = graph(*PIPELINED)
    assert LAZY.on_slot_fulfilled(g, at(g, "a1")) == [at(g, "a1")]


def test_the_strategy_looks_at_each_vertex_only_once_the_one_before_was_scheduled():
    """A vertex that stops being CREATED while an earlier one is scheduled is not named."""
    g = graph(vertex("a", 3))
    named = []
    for ev in EAGER.start_scheduling(g):
        named.append(ev)
        move(g, ExecutionState.CANCELED, "a2")
    assert names(named) == ["a0", "a1"]
