"""The runner's TaskExecutors as the ResourceManager knows them (Flink's TaskExecutor and its
ResourceManager connection): each registration is a new instance with a fresh InstanceID,
live once its acceptance is read, heartbeating as its current instance, and registered again
as a new instance when the ResourceManager closes its connection. What an earlier instance
was given is the JobMasters' to fail; only the current instance's acceptances run. A
TaskExecutor's instances are ordered by the event times of their registrations (the
ResourceManager refuses one not newer than the last), so this runner dates each
registration after the one before. An instance replaced by one this runner did not make
means another process holds the TaskExecutor: the runner stops (docs/operations/faults.md:
"the one whose instance is replaced stops with exit code 1")."""

from __future__ import annotations

import socket
import threading
import uuid

from jobledger.schemas.cluster import (
    TaskManagerConnectionClosed,
    TaskManagerHeartbeatsReported,
    TaskManagerLost,
    TaskManagerRegistered,
    TaskManagerRegistrationAccepted,
)
from jobledger.schemas.types import ResourceProfile, ResourceProfileKind

from ..control.decisions import derived_id
from .heartbeats import heartbeats_reported

PROFILE = ResourceProfile(
    kind=ResourceProfileKind.SPECIFIED, cpu_cores=1.0, task_heap_memory_mb=1024
)


class TaskExecutorInstances:
    """The runner's TaskExecutors and their current instances; safe to use from the query's
    thread and the heartbeat thread at once."""

    def __init__(self, runner_id: str, count: int, slots: int, producer: str) -> None:
        self.runner_id = runner_id
        self.resource_ids = [f"{runner_id}-{i}" for i in range(count)]
        self.slots = slots
        self.producer = producer
        self._lock = threading.Lock()
        self._current: dict[str, str] = {}
        self._registered_at: dict[str, int] = {}
        self._earlier: set[str] = set()
        self._live: set[str] = set()

    def register(self, resource_ids: list[str] | None, now_ms: int) -> list[TaskManagerRegistered]:
        """New instances of the TaskExecutors (all, or those named), not live until their
        acceptances are read; their registrations hold no slot (an empty slot report)."""
        registrations = []
        for rid in resource_ids or self.resource_ids:
            with self._lock:
                if rid in self._current:
                    self._earlier.add(self._current[rid])
                instance = self._current[rid] = uuid.uuid4().hex
                at = self._registered_at[rid] = max(now_ms, self._registered_at.get(rid, -1) + 1)
                self._live.discard(rid)
            registrations.append(TaskManagerRegistered(
                event_id=derived_id(f"{rid}@{instance}", "registered"), event_time=at,
                producer=self.producer, resource_id=rid, address=socket.gethostname(),
                number_of_slots=self.slots, resource_profile=PROFILE, instance_id=instance,
            ))  # fmt: skip
        return registrations

    def accepted(self, event: TaskManagerRegistrationAccepted) -> str | None:
        """Our current instance is registered: its acceptances run from here on. Another
        instance accepted after ours, that this runner never made, is another process
        registered under our TaskExecutor's id: returns why this runner must stop (two
        processes must not share one; the one that registered last holds the slots)."""
        rid = event.resource_id
        with self._lock:
            if event.instance_id == self._current.get(rid):
                self._live.add(rid)
                return None
            if rid not in self._live or event.instance_id in self._earlier:
                return None
            return (
                f"another process registered TaskExecutor {rid} (instance {event.instance_id}); "
                f"stopping this runner (instance {self._current[rid]}): give each runner its "
                "own --runner-id"
            )

    def replaced(self, event: TaskManagerConnectionClosed) -> str | None:
        """Why this runner must stop, if the ResourceManager closed our current instance's
        connection because an instance this runner never made was registered in its place
        (None: lost, replaced by our own, or old news)."""
        rid, successor = event.resource_id, event.replaced_by_instance_id
        with self._lock:
            current = self._current.get(rid)
            if successor is None or event.instance_id != current:
                return None
            if successor == current or successor in self._earlier:
                return None
            self._live.discard(rid)
            return (
                f"another process registered TaskExecutor {rid} (instance {successor}), "
                f"replacing this runner's instance {current}; stopping this runner: give each "
                "runner its own --runner-id"
            )

    def closed(self, event: TaskManagerConnectionClosed) -> bool:
        """Whether the ResourceManager closed our current instance's connection (a close for
        an earlier instance is old news); the TaskExecutor is no longer live."""
        rid = event.resource_id
        with self._lock:
            if event.instance_id not in (None, self._current.get(rid)):
                return False
            self._live.discard(rid)
            return True

    def is_live(self, resource_id: str) -> bool:
        with self._lock:
            return resource_id in self._live

    def all_live(self) -> bool:
        with self._lock:
            return self._live == set(self.resource_ids)

    def current(self) -> dict[str, str]:
        """Each TaskExecutor's current InstanceID."""
        with self._lock:
            return dict(self._current)

    def heartbeats(self, now_ms: int) -> list[TaskManagerHeartbeatsReported]:
        """A beat of each current instance, batched per record (`heartbeats.py`): what keeps
        them alive at the ResourceManager."""
        return heartbeats_reported(self.runner_id, self.current(), self.producer, now_ms)

    def shutdowns(self, now_ms: int) -> list[TaskManagerLost]:
        """What the TaskExecutors tell the ResourceManager as the runner stops (Flink's
        disconnectTaskManager from TaskExecutor.onStop): each current instance is gone, so no
        job is placed there and what it ran fails over at once, not after the heartbeat
        timeout. Named by instance, so a later instance under the same id outlives it."""
        return [
            TaskManagerLost(
                event_id=derived_id(f"{rid}@{instance}", "shut down"),
                event_time=now_ms,
                producer=self.producer,
                resource_id=rid,
                cause=shutdown_cause(rid),
                instance_id=instance,
            )
            for rid, instance in self.current().items()
        ]


def shutdown_cause(resource_id: str) -> str:
    """Why a TaskExecutor of this runner is gone, and why its tasks failed."""
    return f"TaskExecutor {resource_id} is shutting down."
