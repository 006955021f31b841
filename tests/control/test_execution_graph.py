"""ExecutionGraph: subtasks per vertex, topological order, ALL_TO_ALL and POINTWISE inputs."""

from __future__ import annotations

import pytest

from jobledger.schemas.jobs import JobSubmitted
from jobledger.services.control.execution_graph import ExecutionGraph, InvalidJobGraph

from ..support.jobs import vertex


def build(*vertices) -> ExecutionGraph:
    job = JobSubmitted(event_id="e", event_time=0, producer="t", job_id="j", job_name="j",
                       vertices=list(vertices))  # fmt: skip
    return ExecutionGraph.build(job, lambda v, i, n: f"{v}/{i}/{n}")


def consumed(graph: ExecutionGraph, vid: str) -> list[list[int]]:
    return [list(graph.input_gates(ev)[0].consumed_subtasks)
            for ev in graph.vertices[vid].subtasks]  # fmt: skip


def test_vertices_come_in_topological_order_whatever_the_job_graph_order():
    graph = build(
        vertex("sink", 1, ("map", "ALL_TO_ALL", "PIPELINED")),
        vertex("map", 2, ("src", "POINTWISE", "PIPELINED")),
        vertex("src", 2),
    )
    assert list(graph.vertices) == ["src", "map", "sink"]
    assert [e.attempt_id for e in graph.executions()] == [
        "src/0/0", "src/1/0", "map/0/0", "map/1/0", "sink/0/0",
    ]  # fmt: skip


def test_a_layer_waits_for_its_last_input_and_keeps_the_job_graph_order():
    graph = build(
        vertex("late", 1, ("a", "POINTWISE", "PIPELINED"), ("b", "POINTWISE", "PIPELINED")),
        vertex("b", 1, ("a", "POINTWISE", "PIPELINED")),
        vertex("c", 1),
        vertex("a", 1),
    )
    assert list(graph.vertices) == ["c", "a", "b", "late"]


def test_a_chain_of_20_000_vertices_listed_backwards_is_ordered_in_one_pass():
    """Readiness scanned over every vertex per layer made this 20,000 scans of 20,000
    vertices (a chain of 3,000 took 2.7 s): a JobGraph within the subtask limit held its
    partition for minutes."""
    chain = [vertex(f"v{i}", 1, *([(f"v{i - 1}", "POINTWISE", "PIPELINED")] if i else []))
             for i in range(20_000)]  # fmt: skip
    graph = build(*reversed(chain))
    assert list(graph.vertices) == [v.vertex_id for v in chain]


def test_a_cycle_is_refused():
    with pytest.raises(InvalidJobGraph, match="the JobGraph has a cycle"):
        build(vertex("a", 1, ("b", "POINTWISE", "PIPELINED")),
              vertex("b", 1, ("a", "POINTWISE", "PIPELINED")), vertex("c", 1))  # fmt: skip


def test_all_to_all_reads_every_producer_subtask():
    graph = build(vertex("a", 3), vertex("b", 2, ("a", "ALL_TO_ALL", "BLOCKING")))
    assert consumed(graph, "b") == [[0, 1, 2], [0, 1, 2]]


@pytest.mark.parametrize(
    ("producers", "consumers", "expected"),
    [(2, 2, [[0], [1]]), (4, 2, [[0, 1], [2, 3]]), (2, 4, [[0], [0], [1], [1]]),
     (3, 2, [[0], [1, 2]])],
)  # fmt: skip
def test_pointwise_reads_its_slice_of_producers(producers, consumers, expected):
    graph = build(vertex("a", producers), vertex("b", consumers, ("a", "POINTWISE", "BLOCKING")))
    assert consumed(graph, "b") == expected


def test_default_and_configured_max_parallelism():
    graph = build(vertex("a", 172), vertex("b", 4, max_p=32768))
    assert graph.vertices["a"].max_parallelism == 512
    assert graph.vertices["b"].max_parallelism == 32768


def test_rescaling_overrides_parallelism_and_reset_makes_a_new_attempt():
    job = JobSubmitted(event_id="e", event_time=0, producer="t", job_id="j", job_name="j",
                       vertices=[vertex("a", 2)])  # fmt: skip
    graph = ExecutionGraph.build(job, lambda v, i, n: f"{v}/{i}/{n}", {"a": 5})
    assert graph.vertices["a"].parallelism == 5
    ev = graph.vertices["a"].subtasks[0]
    graph.reset(ev, lambda v, i, n: f"{v}/{i}/{n}")
    assert graph.find("a/0/1") is ev and graph.find("a/0/0") is None


def test_duplicate_vertex_ids_are_invalid():
    with pytest.raises(InvalidJobGraph, match="appears twice"):
        build(vertex("a", 1), vertex("a", 1))


def test_a_job_with_too_many_subtasks_is_refused():
    with pytest.raises(InvalidJobGraph, match=r"131072 subtasks exceed the limit of 50000 "
                       r"\(jobledger.job.max-subtasks\)"):  # fmt: skip
        build(*(vertex(f"v{i}", 32768) for i in range(4)))
