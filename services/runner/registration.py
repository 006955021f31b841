"""The runner's side of its TaskExecutors' ResourceManager connections: registering them (each
time as a new instance), sending their heartbeats, reading the ResourceManager's answers
(accepted; connection closed because they were silent too long, or because another process
took them) and their last word at the runner's stop. Apart from the deployments' routing
because this is what keeps the TaskExecutors alive, whatever the query is doing; the
instances' bookkeeping itself is `instances.py`'s."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from jobledger.schemas.cluster import TaskManagerConnectionClosed, TaskManagerRegistrationAccepted

from .instances import TaskExecutorInstances
from .reports import DriverReports, first_line, now_ms

log = logging.getLogger("jobledger.runner")


class Registration:
    """Registers, heartbeats and shuts down the runner's TaskExecutors through `reports`.
    `fail` stops the runner with a reason (another process holds a TaskExecutor); `abandon`
    cancels what a TaskExecutor's current instance holds before it registers again."""

    def __init__(
        self,
        task_executors: TaskExecutorInstances,
        reports: DriverReports,
        fail: Callable[[str], None],
        abandon: Callable[[str], None],
        stopping: threading.Event,
    ) -> None:
        self.task_executors = task_executors
        self.reports = reports
        self.fail = fail
        self.abandon = abandon
        self.stopping = stopping

    def register(self, resource_ids: list[str] | None = None) -> None:
        """Register the runner's TaskExecutors (all, or those named) at the ResourceManager,
        each as a new instance holding no slot."""
        self.reports.emit(self.task_executors.register(resource_ids, now_ms()))

    def send_heartbeats(self) -> None:
        """One heartbeat per current instance: what the ResourceManager judges against its
        `heartbeat.timeout`. A broker hiccup is logged; the next interval tries again."""
        try:
            self.reports.emit(self.task_executors.heartbeats(now_ms()))
        except Exception:
            log.exception("heartbeat failed")

    def shut_down(self) -> None:
        """The TaskExecutors' last word, once the heartbeats stopped (a beat after it would
        only be refused): each current instance is gone. Written before the tasks are
        stopped, so their JobMasters fail them over at once; a broker that cannot take it
        leaves the heartbeat timeout to find them gone."""
        try:
            self.reports.emit(self.task_executors.shutdowns(now_ms()))
        except Exception as exc:
            log.error(
                "could not tell the ResourceManager that the TaskExecutors stop (%s); it "
                "finds them gone after its heartbeat timeout", first_line(exc),
            )  # fmt: skip

    def on_registration_accepted(self, event: TaskManagerRegistrationAccepted) -> None:
        refusal = self.task_executors.accepted(event)
        if refusal is not None:
            self.fail(refusal)

    def on_connection_closed(self, event: TaskManagerConnectionClosed) -> None:
        """The ResourceManager lost this instance (silent past its heartbeat timeout, e.g.
        paused): the JobMasters failed its tasks, so what it still runs is cancelled, and it
        registers again as a new instance, as Flink's TaskExecutor reconnects. Closed because
        another process's instance replaced it: this runner stops (exit code 1), so two
        runners never take one TaskExecutor from each other for ever."""
        refusal = self.task_executors.replaced(event)
        if refusal is not None:
            self.fail(refusal)
            return
        if self.stopping.is_set() or not self.task_executors.closed(event):
            return
        log.warning("the ResourceManager closed %s's connection (%s); cancelling its tasks and "
                    "registering again as a new instance", event.resource_id,
                    event.cause)  # fmt: skip
        self.start_over([event.resource_id])

    def start_over(self, resource_ids: list[str]) -> None:
        """The TaskExecutors start over as new instances: what their current instances hold
        (their tasks, which the JobMasters fail once the new ones register) is cancelled
        first, then they register again."""
        for rid in resource_ids:
            self.abandon(rid)
        self.register(resource_ids)
