"""FailoverStrategy: pipelined regions and the vertices a failure restarts, after Flink's
RestartPipelinedRegionFailoverStrategyTest and PipelinedRegionComputeUtilTest topologies."""

from __future__ import annotations

import pytest

from jobledger.schemas.jobs import JobSubmitted
from jobledger.schemas.types import ExecutionState
from jobledger.services.control.execution_graph import ExecutionGraph
from jobledger.services.control.failover_strategy import (
    FailoverStrategyName,
    pipelined_regions,
    tasks_needing_restart,
)

from ..support.jobs import vertex


def graph(*vertices, state=ExecutionState.FINISHED) -> ExecutionGraph:
    job = JobSubmitted(event_id="j", event_time=0, producer="test", job_id="job",
                       job_name="job", vertices=list(vertices))  # fmt: skip
    g = ExecutionGraph.build(job, lambda v, i, n: f"{v}{i}-{n}")
    for ev in g.execution_vertices():
        ev.current.state = state
    return g


def names(vertices) -> list[str]:
    return [f"{ev.job_vertex_id}{ev.subtask_index}" for ev in vertices]


def regions(g: ExecutionGraph) -> list[list[str]]:
    by_region: dict[int, list[str]] = {}
    for (vid, index), region in pipelined_regions(g).items():
        by_region.setdefault(region, []).append(f"{vid}{index}")
    return list(by_region.values())


def restart(g: ExecutionGraph, failed: str, strategy=FailoverStrategyName.REGION) -> list[str]:
    ev = next(ev for ev in g.execution_vertices() if names([ev]) == [failed])
    ev.current.state = ExecutionState.FAILED
    return names(tasks_needing_restart(strategy, g, ev))


BLOCKING = [
    vertex("a", 2), vertex("c", 1),
    vertex("b", 2, ("a", "ALL_TO_ALL", "BLOCKING")),
    vertex("d", 1, ("c", "POINTWISE", "BLOCKING")),
]  # fmt: skip
"""testRegionFailoverForRegionInternalErrors: every subtask a region of its own."""


def test_blocking_results_leave_every_subtask_a_region_of_its_own():
    assert regions(graph(*BLOCKING)) == [["a0"], ["a1"], ["c0"], ["b0"], ["b1"], ["d0"]]


@pytest.mark.parametrize(("failed", "restarted"), [
    ("a0", ["a0", "b0", "b1"]), ("a1", ["a1", "b0", "b1"]), ("c0", ["c0", "d0"]),
    ("b0", ["b0"]), ("b1", ["b1"]), ("d0", ["d0"]),
])  # fmt: skip
def test_a_region_restarts_with_every_region_consuming_its_results(failed, restarted):
    assert restart(graph(*BLOCKING), failed) == restarted


def test_a_consumer_whose_input_is_no_longer_available_restarts_its_producer_too():
    """testRegionFailoverForDataConsumptionErrors: a0's result went with its cancelled
    attempt, so b0 failing restarts a0, and with it every consumer of a0."""
    g = graph(*BLOCKING)
    g.vertices["a"].subtasks[0].current.state = ExecutionState.CANCELED
    assert restart(g, "b0") == ["a0", "b0", "b1"]


def test_pipelined_pointwise_edges_make_one_region_per_pipeline():
    g = graph(vertex("a", 2), vertex("b", 2, ("a", "POINTWISE", "PIPELINED")),
              state=ExecutionState.RUNNING)  # fmt: skip
    assert regions(g) == [["a0", "b0"], ["a1", "b1"]]
    assert restart(g, "b1") == ["a1", "b1"]


def test_pointwise_edges_between_parallelisms_join_each_consumer_with_what_it_reads():
    """4 -> 2: each consumer reads two producers; 2 -> 4: each producer feeds two consumers.
    A BLOCKING all-to-all edge behind them restarts every consumer of a restarted region."""
    down = graph(vertex("a", 4), vertex("b", 2, ("a", "POINTWISE", "PIPELINED")),
                 state=ExecutionState.RUNNING)  # fmt: skip
    assert regions(down) == [["a0", "a1", "b0"], ["a2", "a3", "b1"]]
    up = graph(
        vertex("a", 2), vertex("b", 4, ("a", "POINTWISE", "PIPELINED")),
        vertex("c", 2, ("b", "ALL_TO_ALL", "BLOCKING")), state=ExecutionState.RUNNING,
    )  # fmt: skip
    assert regions(up) == [["a0", "b0", "b1"], ["a1", "b2", "b3"], ["c0"], ["c1"]]
    assert restart(up, "b3") == ["a1", "b2", "b3", "c0", "c1"]


def test_a_pipelined_all_to_all_edge_makes_one_region():
    g = graph(vertex("a", 2), vertex("b", 3, ("a", "ALL_TO_ALL", "PIPELINED")))
    assert regions(g) == [["a0", "a1", "b0", "b1", "b2"]]


def test_regions_depending_on_each_other_through_blocking_results_are_merged():
    """FLINK-17330: a0 and b0 are pipelined; c reads a0 blocking and feeds b0 blocking, so
    {a0, b0} and {c0} each need the other: one region."""
    g = graph(
        vertex("a", 1),
        vertex("c", 1, ("a", "POINTWISE", "BLOCKING")),
        vertex("b", 1, ("a", "POINTWISE", "PIPELINED"), ("c", "POINTWISE", "BLOCKING")),
    )
    assert regions(g) == [["a0", "c0", "b0"]]


def test_full_restarts_every_vertex():
    assert restart(graph(*BLOCKING), "d0", FailoverStrategyName.FULL) == [
        "a0", "a1", "c0", "b0", "b1", "d0",
    ]  # fmt: skip


def test_the_option_takes_full_or_region_and_refuses_anything_else():
    assert FailoverStrategyName.from_option(" Region ") is FailoverStrategyName.REGION
    assert FailoverStrategyName.from_option("full") is FailoverStrategyName.FULL
    with pytest.raises(ValueError, match="Unknown failover strategy: 'restart-all'"):
        FailoverStrategyName.from_option("restart-all")
