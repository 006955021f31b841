"""Runs the reducers the way the topics partition them, in one process and without a broker.

Every event goes to the owner of its (topic, key): the job's JobMaster (with its SlotPool),
the ResourceManager or the TaskExecutor. A reducer never consumes its own decisions (they
land on its inbox as a record, not as input). Used by tests and offline replay; the service
runtime feeds the same `process` from Kafka.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jobledger.schemas import Event
from jobledger.schemas.cluster import TaskManagerRegistrationAccepted
from jobledger.schemas.jobs import JobMasterLeadershipGranted, JobSubmitted
from jobledger.schemas.rejections import EventRejected
from jobledger.schemas.timers import CLOCK, TimerFired
from jobledger.schemas.topics import TopicRole

from . import authorizer
from .job_master import JobMaster, JobMasterConfig
from .reducer import Reducer, derived
from .resource_manager import ResourceManager
from .slot_pool import SlotPool
from .task_executor import TaskExecutor, TaskExecutorConfig
from .timer_index import TimerIndex

DEDUP_WINDOW = 100_000
"""How many input ids each partition remembers, by default (`jobledger.dedup-window`). The
window drops a redelivered record; it is no defence against an old record re-sent on
purpose, since a writer can push any id out of it: that is for the reducers, which refuse
whatever addresses an instance, attempt or leader older than the current one."""

OWN_PRODUCERS = {
    TopicRole.JOB: frozenset({JobMaster.producer, SlotPool.producer}),
    TopicRole.RESOURCE_MANAGER: frozenset({ResourceManager.producer}),
    TopicRole.TASK_EXECUTOR: frozenset({TaskExecutor.producer}),
}
"""Whose decisions an owner of each topic reads back as records of its own, not inputs: the
JobMaster's, and those of the SlotPool it holds, which decides in its own name."""
DECIDING_PRODUCERS = frozenset().union(*OWN_PRODUCERS.values())
"""The reducers' names: their decisions, and nothing else, name a cause."""


def same_decision(derived: Event, recorded: Event) -> bool:
    """Whether `recorded` is the decision `derived`: equal, or equal but for the name a log
    written before the SlotPool decided in its own name gives it. Until then the pool's
    decisions carried its owner's name, `jobmaster`: the same decision of the same owner,
    read as an old record upcast (such logs are read, never rewritten)."""
    if derived == recorded:
        return True
    return (
        derived.producer == SlotPool.producer
        and recorded.producer == JobMaster.producer
        and derived == recorded.model_copy(update={"producer": SlotPool.producer})
    )


def _owner_name(role: TopicRole, key: str) -> str:
    if role is TopicRole.JOB:
        return f"the JobMaster of job {key!r}"
    if role is TopicRole.TASK_EXECUTOR:
        return f"TaskExecutor {key!r}"
    return "the ResourceManager"


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
    leaks an aborted transaction); at most `dedup_window` long. An OrderedDict because dropping
    the oldest id of a plain dict rescans the deleted slots at its front every time."""
    rejected: OrderedDict[str, int] = field(default_factory=OrderedDict)
    """How often each recent input id was reduced and only rejected: a later input with that
    id is reduced again, and its decisions take ids of their own (at most `dedup_window`)."""
    awaiting: dict[str, Event] = field(default_factory=dict)
    """Decisions an owner derived for itself, until their record comes back on its topic: a
    record that claims to be an owner's decision is one of these, or it is forged."""
    dedup_window: int = DEDUP_WINDOW
    """How many ids `recent` and `rejected` hold at most."""
    timers: dict[TopicRole, TimerIndex] = derived(
        default_factory=lambda: {TopicRole.JOB: TimerIndex(), TopicRole.TASK_EXECUTOR: TimerIndex()}
    )
    """The next timers of the JobMasters and TaskExecutors, for the clock (`timer_index.py`)."""
    submitters: dict[str, str] = field(default_factory=dict)
    """Who submitted each job of this partition (on a cluster whose records are signed): the
    principal that alone, with an admin, may cancel, rescale or lead it (`authorizer`)."""

    def fresh(self) -> ReducerDriver:
        """Empty reducers under this driver's configuration: a replay of the same log as
        this one (a failover's own pass, say) decides as it did."""
        return ReducerDriver(
            job_master_config=self.job_master_config,
            task_executor_config=self.task_executor_config,
            resource_manager=ResourceManager(self.resource_manager.config),
            dedup_window=self.dedup_window,
        )

    @property
    def pools(self) -> dict[str, SlotPool]:
        return {job: jm.pool for job, jm in self.job_masters.items()}

    def owner(self, event: Event, role: TopicRole, key: str) -> Reducer | None:
        """The reducer owning `event`'s partition key (`role`, `key`: its route). Keys that
        own nothing yet get a throwaway reducer, so their events are answered (rejected)
        without growing state."""
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

    def due_timers(self, role: TopicRole, now: int) -> list[str]:
        """The owners on `role`'s topic that a TimerFired at event time `now` would change:
        the clock writes timers for these only, never one per owner per tick (a few hundred
        bad records once made it write for every owner they created, without end)."""
        if role is TopicRole.JOB:
            return self.timers[role].due(self.job_masters, now)
        if role is TopicRole.TASK_EXECUTOR:
            return self.timers[role].due(self.task_executors, now)
        due = self.resource_manager.next_timer()
        rm = self.resource_manager.config.resource_manager_id
        return [rm] if due is not None and due <= now else []

    def to_dict(self) -> dict[str, Any]:
        """Every reducer's state as plain data."""
        return {
            "resource_manager": self.resource_manager.to_dict(),
            "job_masters": {job: jm.to_dict() for job, jm in sorted(self.job_masters.items())},
            "task_executors": {
                rid: te.to_dict() for rid, te in sorted(self.task_executors.items())
            },
        }

    def refusal(self, event: Event) -> str | None:
        """Why no reducer may see `event`, or None. A decision names its reducer as producer
        and its cause, an input neither; and a record in an owner's name must be one that
        owner derived (its own decisions come back on its topic): anything else is a forgery
        that, believed, would be ignored live and taken for a lost decision by replay."""
        if isinstance(event, TimerFired) and event.producer != CLOCK:
            return (
                f"TimerFired is the services' clock's to write (producer {CLOCK!r}), not "
                f"{event.producer!r}'s: nothing else may move time"
            )
        deciding = event.producer in DECIDING_PRODUCERS
        if deciding != (event.cause_event_id is not None):
            return (
                f"producer {event.producer!r} is a reducer's name, but the event names no cause"
                if deciding
                else f"the event names cause {event.cause_event_id!r}, but producer "
                f"{event.producer!r} is no reducer: only decisions name a cause"
            )
        role, key = event.route()
        if event.producer not in OWN_PRODUCERS.get(role, ()) or event.event_id in self.recent:
            return None
        derived = self.awaiting.get(event.event_id)
        if derived is None:
            return (
                f"{event.type_name()} claims to be a decision of {_owner_name(role, key)}, "
                f"which derived no event {event.event_id!r}"
            )
        if not same_decision(derived, event):
            return (
                f"{event.type_name()} {event.event_id!r} differs from the decision of that id "
                f"{_owner_name(role, key)} derived"
            )
        return None

    def awaited(self, event: Event) -> bool:
        """Whether `event` is a decision this partition's owner derived and awaits back: its
        own record, which it knows better than any signature could tell."""
        derived = self.awaiting.get(event.event_id)
        return derived is not None and same_decision(derived, event)

    def admit(
        self, event: Event, principal: str, role: str,
        owners: Mapping[str, str] = authorizer.NO_OWNERS,
    ) -> str | None:  # fmt: skip
        """Why `principal` (whose signature the record carries, of `role`) may not write
        `event`, or None: who may write it first (the reason names the writer), then what
        `refusal` asks of anyone's. `owners`: each TaskExecutor's runner principal, as the
        keyring states it. A job submitted is bound to its submitter from then on."""
        deciding = event.producer in DECIDING_PRODUCERS
        reason = authorizer.refusal(event, principal, role, self, deciding, owners) or self.refusal(
            event
        )
        if reason is None and isinstance(event, JobSubmitted):
            self.submitters.setdefault(event.job_id, principal)
        return reason

    # -- what the authorizer asks (authorizer.JobView) -----------------------------------

    def submitter_of(self, job_id: str) -> str | None:
        return self.submitters.get(job_id)

    def has_leader(self, job_id: str) -> bool:
        master = self.job_masters.get(job_id)
        return master is not None and master.job_master_id is not None

    def attempt_location(self, job_id: str, attempt_id: str) -> str | None:
        master = self.job_masters.get(job_id)
        found = master.graph.find(attempt_id) if master and master.graph else None
        return found.current.resource_id if found else None

    def job_locations(self, job_id: str) -> set[str]:
        master = self.job_masters.get(job_id)
        if master is None or master.graph is None:
            return set()
        return {
            vertex.current.resource_id
            for vertex in master.graph.execution_vertices()
            if vertex.current.resource_id is not None
        }

    def process(self, event: Event) -> list[Event]:
        """Reduce one event at its owner; its own decisions coming back are records only, and
        an input seen within the dedup window is dropped (design rule D-5).

        An input that was only rejected changed nothing, so its id is not remembered as seen:
        a later event with that id (the real request, after copies that came before its job's
        leader) is reduced, not dropped as a duplicate without a trace, and its decisions get
        ids of their own. The runtime asks `refusal` first; replay skips what it refused."""
        role, key = event.route()
        event_id = event.event_id
        own = event.producer in OWN_PRODUCERS.get(role, ())
        if own:
            self.awaiting.pop(event_id, None)  # before the duplicate check: no leak
        if event_id in self.recent:
            return []
        reducer = None if own else self.owner(event, role, key)
        if reducer is None:  # the owner's own decision read back: a record only
            self._remember(event_id)
            return []
        decisions = reducer.apply(event, self.rejected.get(event_id, 0))
        if role is not TopicRole.RESOURCE_MANAGER:
            self.timers[role].changed.add(key)
        if not decisions:  # most inputs: nothing to await, nothing rejected
            self._remember(event_id)
            return decisions
        owners = OWN_PRODUCERS[role]
        for decision in decisions:
            if decision.producer in owners and _same_partition(decision, role, key):
                self.awaiting[decision.event_id] = decision
        if _only_rejected(event_id, decisions):
            _keep_recent(
                self.rejected, event_id, self.rejected.get(event_id, 0) + 1, self.dedup_window
            )
        else:
            self._remember(event_id)
        return decisions

    def _remember(self, event_id: str) -> None:
        """Add an id `process` found not in the window (so it goes last as it is added)."""
        recent = self.recent
        recent[event_id] = None
        if len(recent) > self.dedup_window:
            recent.popitem(last=False)

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


def _keep_recent(window: OrderedDict[str, Any], key: str, value: Any, limit: int) -> None:
    """Put `key` last in `window`, dropping the oldest entry beyond `limit`."""
    window[key] = value
    window.move_to_end(key)
    if len(window) > limit:
        window.popitem(last=False)


def _same_partition(decision: Event, cause_role: TopicRole, cause_key: str) -> bool:
    """Whether `decision` lands on the partition its cause was read from (the cause's route):
    the same topic and key, or the ResourceManager's topic, which has one partition whatever
    the key."""
    role, key = decision.route()
    return role is cause_role and (role is TopicRole.RESOURCE_MANAGER or key == cause_key)


def _only_rejected(event_id: str, decisions: list[Event]) -> bool:
    """Whether every one of `decisions` (never empty) rejects the input `event_id`: a loop, not
    `all()` over a generator, which cost a twentieth of a replay for lists of one or two."""
    for decision in decisions:
        if not isinstance(decision, EventRejected) or decision.rejected_event_id != event_id:
            return False
    return True


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

    def driver_of(self, role: TopicRole, partition: int) -> ReducerDriver:
        """The reducers of one input partition, made on its first record."""
        driver = self.drivers.get((role, partition))
        if driver is None:
            driver = self.drivers[(role, partition)] = self.factory()
        return driver

    def process(self, role: TopicRole, partition: int, event: Event) -> list[Event]:
        return self.driver_of(role, partition).process(event)

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
