"""ExecutionFailureHandler: what a task failure or a global failure calls for, decided apart
from doing it (Flink's ExecutionFailureHandler returning a FailureHandlingResult, FLIP-1).

The handler only reads: the ExecutionGraph, the failover strategy's name and the restart
strategy's counted failures. It changes none of them and derives no decision; the Scheduler
applies the result (counts the failure, marks and cancels the vertices, schedules the
restart or fails the job). So a failure's consequences can be asked, and tested, on their own.

Rules (docs/reference/flink-rules.md): a failure that suppresses restarts (KV-3) or carries an
unrecoverable error in its cause chain (RS-4) is not counted and restarts nothing; any other
is counted, and restarts what the failover strategy names (every vertex for a global
failure, RS-5) if the restart strategy still allows it (RS-1..RS-3), after its delay.
"""

from __future__ import annotations

from dataclasses import dataclass

from .execution_graph import ExecutionGraph, ExecutionVertex
from .failover_strategy import Key, tasks_needing_restart
from .restart_strategy import RestartBackoff
from .throwable_classifier import is_unrecoverable_error


@dataclass(frozen=True)
class FailureHandlingResult:
    """What one failure calls for. The vertices are keys, (job vertex id, subtask index), in
    topological order, so that a result compares whole and says which subtasks it means."""

    cause: str
    """The job's failure cause: the failed attempt's id and the failure's cause."""
    can_restart: bool
    """Whether the job restarts; if not, every vertex is cancelled and the job fails."""
    vertices_to_restart: tuple[Key, ...]
    """What the failover strategy restarts (empty when the job cannot restart)."""
    restart_delay_ms: int | None
    """The restart strategy's backoff before the restart (None when it cannot restart)."""
    global_failure: bool
    """A global failure restarts every vertex whatever the failover strategy (RS-5)."""
    counted: bool
    """Whether the restart strategy counts the failure (not if suppressed or unrecoverable)."""


@dataclass(frozen=True)
class ExecutionFailureHandler:
    """The handler of one job, over its current graph and restart strategy."""

    graph: ExecutionGraph
    failover_strategy: str
    """A FailoverStrategyName value: `jobmanager.execution.failover-strategy`."""
    backoff: RestartBackoff

    def get_failure_handling_result(
        self, failed: ExecutionVertex, cause: str, now: int, suppress_restarts: bool
    ) -> FailureHandlingResult:
        """getFailureHandlingResult: a task of `failed` failed at `now` with `cause`."""
        return self._handle_failure(failed, cause, now, suppress_restarts, global_failure=False)

    def get_global_failure_handling_result(
        self, failed: ExecutionVertex, cause: str, now: int
    ) -> FailureHandlingResult:
        """getGlobalFailureHandlingResult: a failure of the whole job, as the report of
        `failed` revealed it; every vertex restarts if any may."""
        return self._handle_failure(failed, cause, now, False, global_failure=True)

    def _handle_failure(
        self, failed: ExecutionVertex, cause: str, now: int, suppress_restarts: bool,
        global_failure: bool,
    ) -> FailureHandlingResult:  # fmt: skip
        """handleFailure: unrecoverable (not counted), suppressed by the restart strategy
        (counted), or restartable (counted) with the vertices and the delay."""
        counted = not (suppress_restarts or is_unrecoverable_error(cause))
        can_restart = counted and self.backoff.after_failure(now).can_restart(now)
        vertices: tuple[Key, ...] = ()
        if can_restart:
            restarted = (
                self.graph.execution_vertices()
                if global_failure
                else tasks_needing_restart(self.failover_strategy, self.graph, failed)
            )
            vertices = tuple((ev.job_vertex_id, ev.subtask_index) for ev in restarted)
        return FailureHandlingResult(
            cause=f"{failed.current.attempt_id}: {cause}",
            can_restart=can_restart,
            vertices_to_restart=vertices,
            restart_delay_ms=self.backoff.backoff_ms if can_restart else None,
            global_failure=global_failure,
            counted=counted,
        )
