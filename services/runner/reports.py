"""What the runner's driver writes itself: its TaskExecutors' registrations, heartbeats and
shutdowns, and the states of attempts that never reached (or never left) a Spark task. One
transactional producer under the runner's own id, so a restarted runner's producer fences
what this one left open; a lock, because the query's thread, the heartbeat thread and the
Spark jobs' threads all write through it."""

from __future__ import annotations

import logging
import threading
import time

from jobledger.schemas import Event, EventSerde
from jobledger.schemas.tasks import TaskDeploymentRequested
from jobledger.schemas.types import ExecutionState

from ..kafka import append_events
from . import task

log = logging.getLogger("jobledger.runner")


class DriverReports:
    """The driver's writes, each a transaction of its own (`append_events`)."""

    def __init__(self, bootstrap: str, prefix: str, transactional_id: str) -> None:
        self.prefix = prefix
        self.serde = EventSerde()
        self.producer = task.task_producer(bootstrap, transactional_id)
        self.lock = threading.Lock()

    def emit(self, events: list[Event]) -> None:
        with self.lock:
            append_events(self.producer, self.prefix, events, self.serde)

    def report(
        self, d: TaskDeploymentRequested, state: ExecutionState, error: str | None = None
    ) -> None:
        """An attempt's final state, as its task would have reported it; a failed write is
        logged (the JobMaster finds the TaskExecutor gone, or cancels again)."""
        try:
            self.emit([task.state_event(d, state, error), task.final_state_event(d, state)])
        except Exception:
            log.exception("could not report %s of %s", state.value, d.execution_attempt_id)

    def close(self) -> None:
        self.producer.close()


def now_ms() -> int:
    return int(time.time() * 1000)


def first_line(exc: BaseException) -> str:
    """An exception as the one line a log or a report carries."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:2000]
