"""ExecutionFailureHandler: the whole FailureHandlingResult of a failure, decided without
changing the graph or the restart strategy (after Flink's ExecutionFailureHandlerTest)."""

from __future__ import annotations

import copy

from jobledger.schemas.jobs import JobSubmitted
from jobledger.schemas.types import ExecutionState, RestartStrategy, RestartStrategyKind
from jobledger.services.control.execution_failure_handler import (
    ExecutionFailureHandler,
    FailureHandlingResult,
)
from jobledger.services.control.execution_graph import ExecutionGraph, ExecutionVertex
from jobledger.services.control.failover_strategy import FailoverStrategyName
from jobledger.services.control.restart_strategy import RestartBackoff

from ..support.jobs import fixed_delay, vertex

JOB = [
    vertex("a", 2),
    vertex("b", 2, ("a", "POINTWISE", "PIPELINED")),
    vertex("c", 1),
]
"""Three pipelined regions: a0-b0, a1-b1 and c0."""


def graph() -> ExecutionGraph:
    job = JobSubmitted(event_id="j", event_time=0, producer="test", job_id="job",
                       job_name="job", vertices=JOB)  # fmt: skip
    g = ExecutionGraph.build(job, lambda v, i, n: f"{v}{i}-{n}")
    for ev in g.execution_vertices():
        ev.current.state = ExecutionState.RUNNING
    return g


def failed(g: ExecutionGraph, vid: str, index: int) -> ExecutionVertex:
    ev = g.vertices[vid].subtasks[index]
    ev.current.state = ExecutionState.FAILED
    return ev


def handler(
    g: ExecutionGraph, backoff: RestartBackoff, strategy: str = FailoverStrategyName.REGION
) -> ExecutionFailureHandler:
    return ExecutionFailureHandler(g, strategy, backoff)


def test_a_restartable_failure_restarts_the_failover_strategys_vertices_after_the_delay():
    g = graph()
    backoff = RestartBackoff(fixed_delay(1, 250))
    result = handler(g, backoff).get_failure_handling_result(failed(g, "a", 1), "boom", 10, False)
    assert result == FailureHandlingResult(
        cause="a1-0: boom", can_restart=True, vertices_to_restart=(("a", 1), ("b", 1)),
        restart_delay_ms=250, global_failure=False, counted=True,
    )  # fmt: skip


def test_the_full_strategy_restarts_every_vertex():
    g = graph()
    result = handler(g, RestartBackoff(fixed_delay(1, 0)), FailoverStrategyName.FULL)
    assert result.get_failure_handling_result(failed(g, "c", 0), "boom", 10, False) == (
        FailureHandlingResult(
            cause="c0-0: boom", can_restart=True,
            vertices_to_restart=(("a", 0), ("a", 1), ("c", 0), ("b", 0), ("b", 1)),
            restart_delay_ms=0, global_failure=False, counted=True,
        )
    )  # fmt: skip


def test_a_global_failure_restarts_every_vertex_whatever_the_strategy():
    g = graph()
    backoff = RestartBackoff(fixed_delay(1, 5))
    result = handler(g, backoff).get_global_failure_handling_result(g.vertices["c"].subtasks[0],
                                                                    "bad report", 10)  # fmt: skip
    assert result == FailureHandlingResult(
        cause="c0-0: bad report", can_restart=True,
        vertices_to_restart=(("a", 0), ("a", 1), ("c", 0), ("b", 0), ("b", 1)),
        restart_delay_ms=5, global_failure=True, counted=True,
    )  # fmt: skip


def test_a_restart_strategy_that_is_exhausted_counts_the_failure_and_restarts_nothing():
    g = graph()
    backoff = RestartBackoff(fixed_delay(1, 250), failures=[3])
    result = handler(g, backoff).get_failure_handling_result(failed(g, "a", 0), "boom", 10, False)
    assert result == FailureHandlingResult(
        cause="a0-0: boom", can_restart=False, vertices_to_restart=(), restart_delay_ms=None,
        global_failure=False, counted=True,
    )  # fmt: skip


def test_failure_rate_refuses_the_max_th_failure_inside_the_interval():
    g = graph()
    rate = RestartStrategy(kind=RestartStrategyKind.FAILURE_RATE, max_failures_per_interval=2,
                           failure_rate_interval_ms=100, delay_ms=7)  # fmt: skip
    inside = handler(g, RestartBackoff(rate, failures=[50]))
    assert not inside.get_failure_handling_result(failed(g, "c", 0), "x", 120, False).can_restart
    outside = handler(g, RestartBackoff(rate, failures=[10]))
    assert outside.get_failure_handling_result(failed(g, "c", 0), "x", 120, False).can_restart


def test_an_unrecoverable_error_is_not_counted_and_restarts_nothing():
    g = graph()
    cause = "RuntimeException: x\nCaused by: org.apache.flink.SuppressRestartsException: stop"
    result = handler(g, RestartBackoff(fixed_delay(5, 0))).get_failure_handling_result(
        failed(g, "b", 0), cause, 10, False
    )
    assert result == FailureHandlingResult(
        cause=f"b0-0: {cause}", can_restart=False, vertices_to_restart=(),
        restart_delay_ms=None, global_failure=False, counted=False,
    )  # fmt: skip


def test_a_failure_that_suppresses_restarts_is_not_counted():
    g = graph()
    result = handler(g, RestartBackoff(fixed_delay(5, 0))).get_failure_handling_result(
        failed(g, "b", 0), "KvState clash", 10, True
    )
    assert (result.can_restart, result.counted) == (False, False)


def test_deciding_changes_nothing():
    g = graph()
    ev = failed(g, "a", 0)
    backoff = RestartBackoff(fixed_delay(1, 250), failures=[1])
    graph_before, backoff_before = g.to_dict(), copy.deepcopy(backoff)
    h = handler(g, backoff)
    h.get_failure_handling_result(ev, "boom", 10, False)
    h.get_global_failure_handling_result(ev, "boom", 10)
    assert (g.to_dict(), backoff) == (graph_before, backoff_before)
