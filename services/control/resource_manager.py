"""ResourceManager: registered TaskExecutors and whether they live (Flink's ResourceManager);
their slots and every job's slot requests are its SlotManager's (`slot_manager`).

Invariants:
- a TaskExecutor is registered as one instance (one run of its process) at a time; it lives
  while that instance heartbeats, and is lost after `heartbeat.timeout` of silence or when
  another instance registers under its ResourceID;
- instances of a TaskExecutor are ordered by the event time of their registrations (one
  writer, the runner that owns it, dates them): a registration not newer than the instance
  registered or lost last under its ResourceID is an old record re-sent, and is rejected
  however long after the dedup window; so is a registration of a lost instance, a loss of an
  instance that is not the registered one, and a beat older than the last (Flink fences the
  same with a connection per instance and its InstanceID). Lost instances are remembered, one
  per ResourceID, for the RETIRED_LIMIT ResourceIDs lost last. Losing it has one path (`_lose`): its
  requests in flight wait again, every job holding or awaiting a slot there is told
  (`TaskManagerDisconnected`, which fails the tasks on it), and its connection is closed;
- the SlotManager is told of every TaskExecutor registered and lost, and keeps the slot
  requests' invariants (`slot_manager`). Its state is fields of the ResourceManager
  (`requests`, `queue`, `arrivals`, the tenants' rates), which the snapshot holds here.

There is one ResourceManager; its inputs are the `resourcemanager` topic.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, ClassVar

from jobledger.schemas import Event
from jobledger.schemas.cluster import (
    MAX_BEATS_PER_RECORD,
    TaskManagerConnectionClosed,
    TaskManagerDisconnected,
    TaskManagerHeartbeat,
    TaskManagerHeartbeatsReported,
    TaskManagerLost,
    TaskManagerRegistered,
    TaskManagerRegistrationAccepted,
)
from jobledger.schemas.slots import (
    SlotAllocated,
    SlotAllocationFailed,
    SlotFreed,
    SlotRequestCancelled,
    SlotRequested,
)
from jobledger.schemas.timers import TimerFired
from jobledger.schemas.types import OwnerKind, ResourceProfile

from .decisions import Decisions
from .queries import PendingSlotRequestInfo, TaskManagerInfo, TaskManagerSlot, query
from .reducer import Reducer, derived, handles
from .slot_manager import Slot, SlotManager, SlotRequest, TenantShare
from .slot_placement import SlotPlacement
from .slot_states import SlotState
from .task_slot_table import slot_count_refusal
from .tenants import TenantLimits

PRODUCER = "resourcemanager"
RETIRED_LIMIT = 4096
"""How many lost TaskExecutors' last instances are remembered (oldest loss forgotten first),
so their registrations, re-sent, are refused. A TaskExecutor forgotten here could be
registered again by a re-sent registration of its last instance: a process that is not
running, lost after `heartbeat.timeout`. On a secured cluster the keyring states every
TaskExecutor a runner may register, and keyrings state fewer than this."""


@dataclass(frozen=True)
class ResourceManagerConfig:
    resource_manager_id: str = "resourcemanager"
    placement: SlotPlacement = SlotPlacement.SPREAD
    heartbeat_timeout_ms: int = 50_000
    tenants: TenantLimits = field(default_factory=TenantLimits)


@dataclass
class RegisteredTaskExecutor:
    resource_id: str
    address: str
    resource_profile: ResourceProfile
    slots: list[Slot]
    last_heartbeat: int
    """Event time of the instance's last beat (or of its registration)."""
    registration: int
    """Order of registration, the tie-breaker of placement."""
    free: int = 0
    instance_id: str | None = None
    """The registered run of the TaskExecutor's process (null: a writer older than instances)."""
    registered_at: int | None = None
    """Event time of the instance's registration: a registration of another instance must
    be newer (None: read from a snapshot written before it was kept; its last beat, which
    is no earlier, stands in)."""

    def __post_init__(self) -> None:
        self.free = sum(1 for s in self.slots if s.state is SlotState.FREE)

    def place(self, index: int, slot: Slot) -> None:
        """Every slot change goes through here, so the free count stays true."""
        self.free += (slot.state is SlotState.FREE) - (self.slots[index].state is SlotState.FREE)
        self.slots[index] = slot

    def registration_time(self) -> int:
        return self.last_heartbeat if self.registered_at is None else self.registered_at

    def utilization(self) -> float:
        return 1 - self.free / len(self.slots)

    def first_free(self) -> int:
        """The index of the first FREE slot of a TaskExecutor with one free (the placement
        index picked it). A loop, not `next()` over a generator made per placement: with the
        empty list `FreeSlotIndex.changed` made per change, 1% of a replay's instructions."""
        for index, slot in enumerate(self.slots):
            if slot.state is SlotState.FREE:
                return index
        raise ValueError(f"TaskExecutor {self.resource_id} has no free slot")


@dataclass
class RetiredInstance:
    """The last instance of a TaskExecutor that was lost, and when it registered."""

    instance_id: str | None
    registered_at: int


@dataclass
class ResourceManager(Reducer):
    config: ResourceManagerConfig = field(default_factory=ResourceManagerConfig)
    task_executors: dict[str, RegisteredTaskExecutor] = field(default_factory=dict)
    requests: dict[str, SlotRequest] = field(default_factory=dict)
    """Open requests by AllocationID, until their slot is freed."""
    queue: dict[str, int] = field(default_factory=dict)
    """The requests no slot has been picked for: AllocationID -> arrival number."""
    arrivals: int = 0
    registrations: int = 0
    task_managers_lost: int = 0
    """TaskExecutors lost so far (a heartbeat timed out, or an operator said so)."""
    retired: dict[str, RetiredInstance] = field(default_factory=dict)
    """The last instance of each TaskExecutor lost and not registered since, in the order
    they were lost; at most RETIRED_LIMIT."""
    submission_rates: dict[str, int] = field(default_factory=dict)
    """Each tenant's theoretical arrival time (`TenantLimits.next_arrival`), while ahead of
    `latest_request_time`."""
    latest_request_time: int | None = None
    """The latest event time of a slot request read: the tenants' rates are judged on it."""
    slot_manager: SlotManager = derived()
    beat_order: list[tuple[int, str]] = derived(default_factory=list)
    """A heap of (last beat, ResourceID): an entry per beat that moved a TaskExecutor's last
    beat on, those no longer true left to go stale. The clock asks `next_timer` every second,
    and a pass over every TaskExecutor to answer would grow with the cluster; the heap answers
    from its top, and is rebuilt when stale entries outnumber the true ones (a replay never
    asks)."""

    producer: ClassVar[str] = PRODUCER

    def __post_init__(self) -> None:
        config = self.config
        self.slot_manager = SlotManager(
            self, config.resource_manager_id, config.placement, config.tenants
        )
        self._order_beats()

    def _order_beats(self) -> None:
        self.beat_order = [(te.last_heartbeat, rid) for rid, te in self.task_executors.items()]
        heapq.heapify(self.beat_order)

    def _beaten(self, te: RegisteredTaskExecutor, at: int) -> None:
        """`te` was heard from at `at`: a beat older than its last moves nothing back."""
        if at > te.last_heartbeat:
            te.last_heartbeat = at
            heapq.heappush(self.beat_order, (at, te.resource_id))
            if len(self.beat_order) > 2 * len(self.task_executors) + 1024:
                self._order_beats()

    # -- queries -------------------------------------------------------------------------

    def waiting(self) -> list[SlotRequest]:
        """Requests no slot has been picked for, in arrival order."""
        return self.slot_manager.waiting()

    def free_slots(self) -> int:
        return self.slot_manager.free_slot_index.free_total

    @property
    def shares(self) -> dict[str, TenantShare]:
        """Each tenant with open requests, by principal (the SlotManager's index)."""
        return self.slot_manager.shares

    def to_dict(self) -> dict[str, Any]:
        return {
            "resource_manager_id": self.config.resource_manager_id,
            "task_executors": {
                rid: [
                    {"state": s.state.value, "allocation_id": s.allocation_id, "job_id": s.job_id}
                    for s in te.slots
                ]
                for rid, te in self.task_executors.items()
            },
            "requests": {
                a: {
                    "job_id": r.job_id,
                    "slot_request_id": r.slot_request_id,
                    "assigned": list(r.assigned) if r.assigned else None,
                }
                for a, r in self.requests.items()
            },
        }

    def _reject(self, out: Decisions, reason: str) -> None:
        out.reject(OwnerKind.RESOURCE_MANAGER, self.config.resource_manager_id, reason)

    def _task_executor(self, resource_id: str, out: Decisions) -> RegisteredTaskExecutor | None:
        te = self.task_executors.get(resource_id)
        if te is None:
            self._reject(out, f"TaskExecutor {resource_id} is not registered")
        return te

    # -- TaskExecutors -------------------------------------------------------------------

    @handles(TaskManagerRegistered)
    def on_registered(self, event: TaskManagerRegistered, out: Decisions) -> None:
        """registerTaskExecutor: a new TaskExecutor brings its slots, taken as its slot report
        says (after a crash: all free); the same instance registering again is acknowledged
        again; another instance under a registered ResourceID replaces it, so the old one is
        lost first, its tasks failed (Flink's "re-connected to the ResourceManager")."""
        refusal = (
            slot_count_refusal(event.number_of_slots)
            or _slot_report_refusal(event)
            or self._stale_registration(event)
        )
        if refusal is not None:
            self._reject(out, refusal)
            return
        old = self.task_executors.get(event.resource_id)
        if old is not None and old.instance_id != event.instance_id:
            cause = (
                f"TaskExecutor {event.resource_id} re-connected to the ResourceManager as "
                f"instance {event.instance_id}, replacing instance {old.instance_id}."
            )
            out.emit(TaskManagerLost, resource_id=event.resource_id, cause=cause)
            self._lose(event.resource_id, cause, out, replaced_by=event.instance_id)
        if event.resource_id not in self.task_executors:
            self.retired.pop(event.resource_id, None)
            self.registrations += 1
            slots = [Slot() for _ in range(event.number_of_slots)]
            for status in event.slot_report:
                if status.allocation_id is not None:
                    slots[status.slot_index] = Slot(
                        SlotState.OCCUPIED, status.allocation_id, status.job_id
                    )
            self.task_executors[event.resource_id] = RegisteredTaskExecutor(
                event.resource_id,
                event.address,
                event.resource_profile,
                slots,
                event.event_time,
                self.registrations,
                instance_id=event.instance_id,
                registered_at=event.event_time,
            )
            self.slot_manager.registered(self.task_executors[event.resource_id])
            heapq.heappush(self.beat_order, (event.event_time, event.resource_id))
        te = self.task_executors[event.resource_id]
        self._beaten(te, event.event_time)
        out.emit(
            TaskManagerRegistrationAccepted,
            resource_id=te.resource_id,
            resource_manager_id=self.config.resource_manager_id,
            number_of_slots=len(te.slots),
            resource_profile=te.resource_profile,
            instance_id=te.instance_id,
        )
        self.slot_manager.serve_waiting(out)

    def _stale_registration(self, event: TaskManagerRegistered) -> str | None:
        """Why `event` is an old registration re-sent (None: it is the registered instance's
        own, or newer than every instance known under its ResourceID). Its signature is no
        help: the record is as its runner signed it, only older."""
        resource_id, instance = event.resource_id, event.instance_id
        te = self.task_executors.get(resource_id)
        if te is not None:
            if instance == te.instance_id:
                return None  # acknowledged again
            known, at, how = te.instance_id, te.registration_time(), "registered"
        else:
            retired = self.retired.get(resource_id)
            if retired is None:
                return None
            if instance is not None and instance == retired.instance_id:
                return (
                    f"instance {instance} of TaskExecutor {resource_id} was lost: a lost "
                    "instance never registers again (its runner registers a new one)"
                )
            known, at, how = retired.instance_id, retired.registered_at, "lost since"
        if event.event_time > at:
            return None
        return (
            f"registration of instance {instance} of TaskExecutor {resource_id}, written at "
            f"{event.event_time}, is not newer than instance {known} ({how}), registered at "
            f"{at}: an old record, which never replaces a newer instance"
        )

    @handles(TaskManagerHeartbeat)
    def on_heartbeat(self, event: TaskManagerHeartbeat, out: Decisions) -> None:
        """One TaskExecutor's beat, as other language clients still write it (`_beat`)."""
        self._beat(event.resource_id, event.instance_id, event.event_time, out)

    @handles(TaskManagerHeartbeatsReported)
    def on_heartbeats(self, event: TaskManagerHeartbeatsReported, out: Decisions) -> None:
        """A runner's beats in one record: each decides exactly what a `TaskManagerHeartbeat`
        of that instance at the record's event time would (`_beat`), in the record's order, so
        every TaskExecutor's last beat, and so every loss the clock finds, is the same however
        the beats were carried. More beats than a record may carry are refused whole: the
        bound is what keeps one input's work small."""
        if len(event.beats) > MAX_BEATS_PER_RECORD:
            self._reject(
                out,
                f"{len(event.beats)} heartbeats in one record, more than the "
                f"{MAX_BEATS_PER_RECORD} one may carry",
            )
            return
        for beat in event.beats:
            self._beat(beat.resource_id, beat.instance_id, event.event_time, out)

    def _beat(self, resource_id: str, instance_id: str | None, at: int, out: Decisions) -> None:
        """The registered instance's beat keeps it alive. A beat from a TaskExecutor the
        ResourceManager does not know (lost, or never registered) closes that instance's
        connection, so that it registers again instead of beating into rejections forever; a
        beat from an instance another one replaced is refused and keeps nothing alive."""
        te = self._task_executor(resource_id, out)
        if te is None:
            self._close_connection(
                resource_id, f"TaskExecutor {resource_id} is not registered", out, instance_id
            )
        elif te.instance_id != instance_id:
            self._reject(
                out,
                f"heartbeat of instance {instance_id} of TaskExecutor {te.resource_id}, "
                f"which is registered as instance {te.instance_id}",
            )
        else:
            self._beaten(te, at)

    def _close_connection(
        self, resource_id: str, cause: str, out: Decisions, instance_id: str | None,
        replaced_by: str | None = None,
    ) -> None:  # fmt: skip
        out.emit(
            TaskManagerConnectionClosed,
            resource_id=resource_id,
            resource_manager_id=self.config.resource_manager_id,
            cause=cause,
            instance_id=instance_id,
            replaced_by_instance_id=replaced_by,
        )

    @handles(TaskManagerLost)
    def on_lost(self, event: TaskManagerLost, out: Decisions) -> None:
        """An operator's word, or a TaskExecutor's as it shuts down (closeTaskManagerConnection
        on its disconnectTaskManager): no job is placed there from now on, and the tasks it ran
        fail at once instead of after the heartbeat timeout. It names an instance, or (naming
        none) means the one registered before it was written; a loss of an earlier instance
        (an earlier run's, sent late or again) is old news."""
        te = self._task_executor(event.resource_id, out)
        if te is None:
            return
        if event.instance_id is not None and event.instance_id != te.instance_id:
            self._reject(
                out,
                f"TaskManagerLost of instance {event.instance_id} of TaskExecutor "
                f"{te.resource_id}, which is registered as instance {te.instance_id}: an "
                "earlier instance's loss changes nothing",
            )
        elif event.instance_id is None and event.event_time < te.registration_time():
            self._reject(
                out,
                f"TaskManagerLost of TaskExecutor {te.resource_id}, written at "
                f"{event.event_time}, is older than instance {te.instance_id}, registered at "
                f"{te.registration_time()}: an earlier instance's loss changes nothing",
            )
        else:
            self._lose(event.resource_id, event.cause, out)

    def _lose(
        self, resource_id: str, cause: str, out: Decisions, replaced_by: str | None = None
    ) -> None:
        """closeTaskManagerConnection: requests in flight to the lost TaskExecutor wait again
        for another slot; every job holding a slot there, or about to (its request in flight),
        is told it is gone, so its JobMaster fails the tasks on it; the instance's connection
        is closed."""
        te = self.task_executors.pop(resource_id)
        self._retire(te)
        self.task_managers_lost += 1
        self.slot_manager.lost(te)
        jobs: list[str] = []
        for slot in te.slots:
            if slot.job_id is not None and slot.job_id not in jobs:
                jobs.append(slot.job_id)
        for job_id in jobs:
            out.emit(TaskManagerDisconnected, job_id=job_id, resource_id=resource_id, cause=cause)
        self._close_connection(resource_id, cause, out, te.instance_id, replaced_by)
        self.slot_manager.serve_waiting(out)

    def _retire(self, te: RegisteredTaskExecutor) -> None:
        """Remember `te`'s instance as its ResourceID's last, forgetting the oldest beyond
        RETIRED_LIMIT (a dict keeps the order they were lost in)."""
        self.retired.pop(te.resource_id, None)
        self.retired[te.resource_id] = RetiredInstance(te.instance_id, te.registration_time())
        while len(self.retired) > RETIRED_LIMIT:
            del self.retired[next(iter(self.retired))]

    def next_timer(self) -> int | None:
        """The earliest event time at which a TimerFired finds a TaskExecutor silent for
        longer than the heartbeat timeout (None: none registered)."""
        order = self.beat_order
        while order:
            at, resource_id = order[0]
            te = self.task_executors.get(resource_id)
            if te is not None and te.last_heartbeat == at:
                return at + self.config.heartbeat_timeout_ms + 1
            heapq.heappop(order)  # stale: beaten since, or lost
        return None

    @handles(TimerFired)
    def on_timer(self, event: TimerFired, out: Decisions) -> None:
        """TaskExecutors silent for longer than the heartbeat timeout are lost."""
        timeout = self.config.heartbeat_timeout_ms
        silent = [
            te.resource_id
            for te in self.task_executors.values()
            if event.event_time - te.last_heartbeat > timeout
        ]
        for resource_id in silent:
            cause = f"The heartbeat of TaskManager with id {resource_id} timed out."
            out.emit(TaskManagerLost, resource_id=resource_id, cause=cause)
            self._lose(resource_id, cause, out)

    # -- slot requests: the SlotManager's ------------------------------------------------

    @handles(SlotRequested)
    @handles(SlotRequestCancelled)
    @handles(SlotAllocated)
    @handles(SlotAllocationFailed)
    @handles(SlotFreed)
    def on_slot_event(self, event: Event, out: Decisions) -> None:
        self.slot_manager.handle(event, out)

    # -- the query surface (queries.py) ---------------------------------------------------

    @query
    def task_managers(self) -> dict[str, TaskManagerInfo]:
        """Every registered TaskExecutor by ResourceID, in the order they registered."""
        return {rid: _task_manager_info(te) for rid, te in self.task_executors.items()}

    @query
    def task_manager(self, resource_id: str) -> TaskManagerInfo | None:
        """The registered TaskExecutor `resource_id`; None if it is not registered."""
        te = self.task_executors.get(resource_id)
        return None if te is None else _task_manager_info(te)

    @query
    def slot_request(self, allocation_id: str) -> PendingSlotRequestInfo | None:
        """The open request for `allocation_id`; None if none is open (not received yet, or
        its slot freed)."""
        return self.slot_manager.slot_request(allocation_id)

    @query
    def lost(self) -> int:
        """How many TaskExecutors were lost so far (heartbeat timeouts, operators)."""
        return self.task_managers_lost

    @query
    def queued_requests(self) -> int:
        """Slot requests waiting for a free slot (none picked for them yet)."""
        return len(self.queue)

    @query
    def requests_queued_before(self, allocation_id: str) -> int:
        """How many queued requests of its tenant arrived before the one for `allocation_id`
        and so are served first (0 if that one is not queued); other tenants' take turns."""
        return self.slot_manager.requests_queued_before(allocation_id)


def _task_manager_info(te: RegisteredTaskExecutor) -> TaskManagerInfo:
    """A copy of what the ResourceManager knows of `te`, which a read model keeps unchanged."""
    slots = tuple(TaskManagerSlot(s.state, s.allocation_id, s.job_id) for s in te.slots)
    return TaskManagerInfo(
        te.resource_id, te.address, te.resource_profile, te.last_heartbeat, slots
    )


def _slot_report_refusal(event: TaskManagerRegistered) -> str | None:
    """Why a registration's slot report cannot describe its slots (None: it can)."""
    indexes = [status.slot_index for status in event.slot_report]
    if any(not 0 <= index < event.number_of_slots for index in indexes):
        return f"the slot report names a slot outside 0..{event.number_of_slots - 1}"
    if len(set(indexes)) != len(indexes):
        return "the slot report names a slot twice"
    return None
