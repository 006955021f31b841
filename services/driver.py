"""Runs the reducers the way the topics partition them, in one process and without a broker.

Every event goes to the owner of its (topic, key): the job's JobMaster (with its SlotPool),
the ResourceManager or the TaskExecutor. A reducer never consumes its own decisions (they
land on its inbox as a record, not as input). Used by tests and offline replay; the service
runtime feeds the same `process` from Kafka.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from jobledger.schemas import Event
from jobledger.schemas.cluster import TaskManagerRegistrationAccepted
from jobledger.schemas.jobs import JobMasterLeadershipGranted, JobSubmitted
from jobledger.schemas.rejections import EventRejected
from jobledger.schemas.topics import TopicRole

from .job_master import JobMaster, JobMasterConfig
from .reducer import Reducer
from .resource_manager import ResourceManager, ResourceManagerConfig
from .slot_pool import SlotPool
from .task_executor import TaskExecutor, TaskExecutorConfig

DEDUP_WINDOW = 100_000


@dataclass
class ReducerDriver:
    """Owners of every partition key, created when their first state-creating event arrives."""

    job_master_config: JobMasterConfig = field(default_factory=JobMasterConfig)
    task_executor_config: TaskExecutorConfig = field(default_factory=TaskExecutorConfig)
    resource_manager: ResourceManager = field(default_factory=ResourceManager)
    job_masters: dict[str, JobMaster] = field(default_factory=dict)
    task_executors: dict[str, TaskExecutor] = field(default_factory=dict)
    recent: OrderedDict[str, None] = field(default_factory=OrderedDict)
    """Ids of the latest inputs, to drop a redelivered one (a Spark retry, a broker that
    leaks an aborted transaction); at most DEDUP_WINDOW long. An OrderedDict because dropping
    the oldest id of a plain dict rescans the deleted slots at its front every time."""

    @property
    def pools(self) -> dict[str, SlotPool]:
        return {job: jm.pool for job, jm in self.job_masters.items()}

    @classmethod
    def with_resource_manager(cls, config: ResourceManagerConfig, **kwargs) -> ReducerDriver:
        return cls(resource_manager=ResourceManager(config), **kwargs)

    def owner(self, event: Event) -> Reducer | None:
        """The reducer owning `event`'s partition key. Keys that own nothing yet get a
        throwaway reducer, so their events are answered (rejected) without growing state."""
        role, key = event.route()
        if role is TopicRole.RESOURCE_MANAGER:
            return self.resource_manager
        if role is TopicRole.JOB:
            if key not in self.job_masters and isinstance(
                event, JobMasterLeadershipGranted | JobSubmitted
            ):
                self.job_masters[key] = JobMaster(key, self.job_master_config)
            return self.job_masters.get(key) or JobMaster(key, self.job_master_config)
        if role is TopicRole.TASK_EXECUTOR:
            if key not in self.task_executors and isinstance(
                event, TaskManagerRegistrationAccepted
            ):
                self.task_executors[key] = TaskExecutor(key, self.task_executor_config)
            return self.task_executors.get(key) or TaskExecutor(key, self.task_executor_config)
        return None

    def to_dict(self) -> dict[str, Any]:
        """Every reducer's state as plain data."""
        return {
            "resource_manager": self.resource_manager.to_dict(),
            "job_masters": {job: jm.to_dict() for job, jm in sorted(self.job_masters.items())},
            "task_executors": {
                rid: te.to_dict() for rid, te in sorted(self.task_executors.items())
            },
        }

    def process(self, event: Event) -> list[Event]:
        """Reduce one event at its owner; its own decisions coming back are records only, and
        an input seen within the dedup window is dropped (DESIGN.md rule 5).

        An input that was only rejected changed nothing, so its id is not remembered: a later
        event with that id (the real request, after copies that came before its job's leader)
        is reduced, not dropped as a duplicate without a trace. A redelivered copy of a
        rejected input is rejected again, under the same derived id."""
        if event.event_id in self.recent:
            return []
        reducer = self.owner(event)
        if reducer is None or event.producer == reducer.producer:
            self._remember(event.event_id)
            return []
        decisions = reducer.apply(event)
        if not _only_rejected(event, decisions):
            self._remember(event.event_id)
        return decisions

    def _remember(self, event_id: str) -> None:
        self.recent[event_id] = None
        if len(self.recent) > DEDUP_WINDOW:
            self.recent.popitem(last=False)

    def run(self, events: Iterable[Event]) -> list[Event]:
        """Process inputs and everything they lead to until nothing is left; returns the whole
        log in the order it was processed."""
        queue = deque(events)
        log: list[Event] = []
        while queue:
            event = queue.popleft()
            log.append(event)
            queue.extend(self.process(event))
        return log


def _only_rejected(event: Event, decisions: list[Event]) -> bool:
    return bool(decisions) and all(
        isinstance(d, EventRejected) and d.rejected_event_id == event.event_id for d in decisions
    )


@dataclass
class PartitionedDriver:
    """One ReducerDriver per input partition, the way the service runtime hosts them.

    Replay goes through this so that it agrees with the services on everything a partition
    decides alone: which ids are duplicates (each partition's own window), and which owner an
    event reaches. `merged()` is the cluster-wide view: the ResourceManager of its one
    partition, every JobMaster and TaskExecutor of the partitions that own them.
    """

    factory: Callable[[], ReducerDriver] = ReducerDriver
    drivers: dict[tuple[TopicRole, int], ReducerDriver] = field(default_factory=dict)

    def process(self, role: TopicRole, partition: int, event: Event) -> list[Event]:
        driver = self.drivers.get((role, partition))
        if driver is None:
            driver = self.drivers[(role, partition)] = self.factory()
        return driver.process(event)

    def merged(self) -> ReducerDriver:
        view = self.factory()
        for (role, _), driver in sorted(self.drivers.items()):
            if role is TopicRole.RESOURCE_MANAGER:
                view.resource_manager = driver.resource_manager
            elif role is TopicRole.JOB:
                view.job_masters.update(driver.job_masters)
            elif role is TopicRole.TASK_EXECUTOR:
                view.task_executors.update(driver.task_executors)
        return view
