"""SlotPool: the slots one job holds, as Flink's SlotPoolImpl (<= 1.10, seed 002) keeps them.

Invariants:
- an AllocationID is held by at most one slot, and that slot is either *available* or
  *allocated* to exactly one request, never both;
- a request is *stashed* (no ResourceManager yet, no AllocationID), *pending* at the
  ResourceManager under one AllocationID, or fulfilled by one allocated slot;
- only slots of registered TaskManagers enter the pool; a slot is identified by its SlotID
  (ResourceID, slot index);
- the AllocationIDs of pending requests are distinct (each is derived from its request's id
  and the input that sent it), so a slot offered under one completes at most one request;
- nothing happens without a JobMaster leader: a pool that is not started refuses everything
  but leadership.

Its user (the job's Scheduler) calls it through a method API in Flink's names and hears
what became of each request as its SlotRequestListener (slot_request_listener.py); the log
drives it with input events, whose handlers are thin wrappers over the same methods. Every
decision is a derived event (design rules D-2 and D-3); time is the event time of the input,
timeouts fire on TimerFired.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, ClassVar

from jobledger.schemas.cluster import (
    JobManagerDisconnected,
    JobMasterHeartbeat,
    JobMasterRegistrationAccepted,
    JobMasterRegistrationDeclined,
    JobMasterRegistrationRequested,
    ResourceManagerConnected,
    ResourceManagerDisconnected,
    TaskManagerDisconnected,
)
from jobledger.schemas.jobs import (
    JobMasterLeadershipGranted,
    JobMasterLeadershipRevoked,
    JobMasterStopped,
)
from jobledger.schemas.slots import (
    AllocationFailed,
    AvailableSlotAllocationRequested,
    BatchSlotRequestTimeoutCheckDisabled,
    IdleSlotTimedOut,
    LastSlotOfTaskManagerFreed,
    NewAllocatedSlotRequested,
    SlotFreeRequested,
    SlotOfferAccepted,
    SlotOffered,
    SlotOfferRejected,
    SlotRequestCancelled,
    SlotRequested,
    SlotRequestFailed,
    SlotRequestFulfilled,
    SlotRequestRefused,
    SlotRequestReleased,
    SlotRequestTimedOut,
)
from jobledger.schemas.timers import TimerFired
from jobledger.schemas.types import AllocatedSlotInfo, OwnerKind, ResourceProfile

from .decisions import Decisions, E
from .event_time import between, later
from .queries import PendingRequestInfo, SlotInfo, query
from .reducer import Reducer, derived, handles
from .resource_profile import is_matching
from .slot_request_listener import Completion, SlotRequestListener, completes_requests

PRODUCER = "slotpool"
_SHARED = "released by a job of a named tenant: the ResourceManager shares it (tenants)"

MAX_BLOCKED_TASK_MANAGERS = 64
"""TaskManagers a pool avoids at once; past this many the one blocked first is forgotten, so
every slot request names a bounded list."""


@dataclass(frozen=True)
class SlotPoolConfig:
    """Flink's `slot.idle.timeout` and `slot.request.timeout` (for batch requests), and how
    many requests a job keeps at the ResourceManager at once
    (`jobledger.slot-pool.max-pending-requests`)."""

    idle_slot_timeout_ms: int = 50_000
    batch_slot_timeout_ms: int = 300_000
    max_pending_requests: int = 100
    """Requests beyond this many at the ResourceManager wait in the pool, in order, and go
    as earlier ones are answered. The ResourceManager's partition (and each TaskExecutor's)
    serves records in log order for every job: 20,000 requests of one giant job sent at once
    put a small job's request behind all of them, and its allocations and offers behind
    theirs (seconds per hop). A bounded window keeps what one job has queued there bounded,
    as Flink's declarative slot pool declares its requirements and lets the slot manager
    serve them as it can (FLINK-10404) instead of one RPC per slot. 0: no bound. 100, not
    more: a small job's hops wait behind what the window lets queue, and with bench/stall.py
    at P=2,000 it took 4.7-5.6 s over its quiet time beside the giant at 1,000, 1.4-1.7 s at
    200, 0.7-1.1 s at 100, while the giant took 9.6-12 s, 11-12 s and 14-15 s to deploy."""
    heartbeat_interval_ms: int = 10_000
    """Flink's `heartbeat.interval`: how often the JobMaster heartbeats each registered
    TaskManager with its AllocatedSlotReport (0: on every TimerFired, as every log written
    before this option was, and replays with it). On every tick of the services' clock (1 s)
    a giant job put one record per TaskManager on the log each second: 5,000 a second at
    P=10,000, more than a services instance serves, and the TaskExecutor partitions fell
    behind without bound."""


@dataclass
class PendingRequest:
    slot_request_id: str
    resource_profile: ResourceProfile
    batch: bool
    deadline: int | None
    allocation_id: str | None = None
    unfulfillable_since: int | None = None


@dataclass
class AllocatedSlot:
    allocation_id: str
    resource_id: str
    slot_index: int
    resource_profile: ResourceProfile

    @property
    def slot_id(self) -> tuple[str, int]:
        return self.resource_id, self.slot_index


@dataclass
class SlotPool(Reducer):
    """One job's pool. `apply` takes an input event and returns the derived events."""

    job_id: str
    config: SlotPoolConfig = field(default_factory=SlotPoolConfig)
    job_master_id: str | None = None
    resource_manager_id: str | None = None
    batch_timeout_check_enabled: bool = True
    registered_task_managers: dict[str, None] = field(default_factory=dict)
    last_heartbeat: int | None = None
    """Event time of the TimerFired that last heartbeat the registered TaskManagers."""
    waiting_for_resource_manager: OrderedDict[str, PendingRequest] = field(
        default_factory=OrderedDict
    )
    """Requests not sent to a ResourceManager yet: none is connected, or the job has
    `max_pending_requests` there already (sent in this order as answers free the window)."""
    pending_requests: OrderedDict[str, PendingRequest] = field(default_factory=OrderedDict)
    """OrderedDicts, because requests are served from the front and each new slot looks for
    the first matching one: a dict keeps the slot of every key taken out and walks it on
    every scan (a cancel handing a slot through 100,000 waiting requests would spend over a
    second in it)."""
    allocated_slots: dict[str, AllocatedSlot] = field(default_factory=dict)
    request_of_allocation: dict[str, str] = field(default_factory=dict)
    available_slots: dict[str, tuple[AllocatedSlot, int]] = field(default_factory=dict)
    blocked_task_managers: dict[str, None] = field(default_factory=dict)
    """TaskManagers the job takes no more slots of, oldest first: a deployment there was not
    acknowledged in time (Flink's blocklist, per JobMaster)."""
    principal: str | None = None
    """The job's tenant, as its JobSubmitted names it: every request carries it to the
    ResourceManager, which shares slots between tenants (`tenants`)."""
    listener: SlotRequestListener | None = derived(default=None)
    """Set by the Scheduler that owns the pool."""
    completed: list[Completion] = derived(default_factory=list)
    """Requests completed within the input being reduced, until the listener heard of them."""
    told: int = derived(default=0)
    """How many of `completed` the listener has heard of."""
    pending_of_allocation: dict[str, str] = derived(default_factory=dict)
    """The pending request waiting on each AllocationID: every offer looks its AllocationID
    up, and a scan of the pending requests per offer made a job's slots cost quadratic time
    (at parallelism 4000, a third of scheduling it)."""
    available_on: dict[str, dict[str, AllocatedSlot]] = derived(default_factory=dict)
    """`available_slots` by TaskManager, each in the pool's order (by AllocationID)."""
    allocated_on: dict[str, dict[str, AllocatedSlot]] = derived(default_factory=dict)
    """`allocated_slots` by TaskManager, each in the pool's order (by SlotRequestId): with
    `available_on`, a TaskManager's slots without a scan of every slot the job holds, which
    every offer made (a re-allocated SlotID supersedes the old allocation) and every
    heartbeat makes per TaskManager."""

    producer: ClassVar[str] = PRODUCER

    def __post_init__(self) -> None:
        for request in self.pending_requests.values():
            self.pending_of_allocation.setdefault(request.allocation_id, request.slot_request_id)
        for slot, _ in self.available_slots.values():
            self.available_on.setdefault(slot.resource_id, {})[slot.allocation_id] = slot
        for request_id, slot in self.allocated_slots.items():
            self.allocated_on.setdefault(slot.resource_id, {})[request_id] = slot

    # -- the held slots and pending requests, with their indexes ------------------------
    # Every change of `pending_requests`, `available_slots` and `allocated_slots` goes
    # through these, so the indexes above stay true.

    def _add_pending(self, request: PendingRequest) -> None:
        self.pending_requests[request.slot_request_id] = request
        self.pending_of_allocation.setdefault(request.allocation_id, request.slot_request_id)

    def _remove_waiting(self, waiting: dict[str, PendingRequest], request_id: str) -> None:
        """Take a request out of `waiting` (the pending requests or the stashed ones)."""
        request = waiting.pop(request_id)
        if self.pending_of_allocation.get(request.allocation_id) == request_id:
            del self.pending_of_allocation[request.allocation_id]

    def _pending_with(self, allocation_id: str) -> PendingRequest | None:
        """The pending request sent to the ResourceManager under `allocation_id`."""
        request_id = self.pending_of_allocation.get(allocation_id)
        return None if request_id is None else self.pending_requests[request_id]

    def _add_available(self, slot: AllocatedSlot, since: int) -> None:
        self.available_slots[slot.allocation_id] = (slot, since)
        self.available_on.setdefault(slot.resource_id, {})[slot.allocation_id] = slot

    def _take_available(self, allocation_id: str) -> tuple[AllocatedSlot, int] | None:
        entry = self.available_slots.pop(allocation_id, None)
        if entry is not None:
            _drop(self.available_on, entry[0].resource_id, allocation_id)
        return entry

    def _add_allocated(self, request_id: str, slot: AllocatedSlot) -> None:
        self.allocated_slots[request_id] = slot
        self.request_of_allocation[slot.allocation_id] = request_id
        self.allocated_on.setdefault(slot.resource_id, {})[request_id] = slot

    def _take_allocated(self, request_id: str) -> AllocatedSlot:
        slot = self.allocated_slots.pop(request_id)
        del self.request_of_allocation[slot.allocation_id]
        _drop(self.allocated_on, slot.resource_id, request_id)
        return slot

    # -- queries -------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self.job_master_id is not None

    def holds(self, allocation_id: str) -> AllocatedSlot | None:
        if allocation_id in self.available_slots:
            return self.available_slots[allocation_id][0]
        request = self.request_of_allocation.get(allocation_id)
        return self.allocated_slots[request] if request is not None else None

    def pending(self, slot_request_id: str) -> bool:
        """Whether the request still waits for a slot: stashed, or sent to the RM."""
        return (
            slot_request_id in self.pending_requests
            or slot_request_id in self.waiting_for_resource_manager
        )

    def available_slot_for(self, resource_profile: ResourceProfile) -> str | None:
        """The AllocationID of the first available slot matching `resource_profile`."""
        return next(
            (a for a, (slot, _) in self.available_slots.items()
             if is_matching(slot.resource_profile, resource_profile)),
            None,
        )  # fmt: skip

    def slots_of(self, resource_id: str) -> list[AllocatedSlot]:
        """The TaskManager's held slots: available ones, then allocated ones."""
        return [
            *self.available_on.get(resource_id, {}).values(),
            *self.allocated_on.get(resource_id, {}).values(),
        ]

    def create_allocated_slot_report(self, resource_id: str) -> list[tuple[int, str]]:
        """(slot index, AllocationID) of every slot of the TaskManager in the pool (SP-35)."""
        return [(s.slot_index, s.allocation_id) for s in self.slots_of(resource_id)]

    def available_slots_information(self) -> list[dict[str, Any]]:
        """Available slots with their TaskManager's utilization, allocated / all (SP-36)."""
        info = []
        for slot, since in self.available_slots.values():
            available = len(self.available_on[slot.resource_id])
            allocated = len(self.allocated_on.get(slot.resource_id, {}))
            info.append(
                {
                    "allocation_id": slot.allocation_id,
                    "resource_id": slot.resource_id,
                    "slot_index": slot.slot_index,
                    "available_since": since,
                    "task_executor_utilization": allocated / (allocated + available),
                }
            )
        return info

    def to_dict(self) -> dict[str, Any]:
        """The whole state as plain data (for replay output and tests)."""
        return {
            "job_id": self.job_id,
            "job_master_id": self.job_master_id,
            "resource_manager_id": self.resource_manager_id,
            "batch_timeout_check_enabled": self.batch_timeout_check_enabled,
            "registered_task_managers": list(self.registered_task_managers),
            "waiting_for_resource_manager": [
                _plain(r) for r in self.waiting_for_resource_manager.values()
            ],
            "pending_requests": [_plain(r) for r in self.pending_requests.values()],
            "allocated_slots": {req: _plain(s) for req, s in self.allocated_slots.items()},
            "available_slots": {
                a: {**_plain(s), "since": t} for a, (s, t) in self.available_slots.items()
            },
        }

    # -- lifecycle -----------------------------------------------------------------------

    def _emit(self, out: Decisions, cls: type[E], **fields: Any) -> E:
        """A decision of the pool, in its own name whoever hosts it (the JobMaster's
        decisions and the pool's are told apart by their producer)."""
        return out.emit(cls, PRODUCER, **fields)

    def _reject(self, out: Decisions, reason: str) -> None:
        out.reject(OwnerKind.JOB, self.job_id, reason, PRODUCER)

    def _refuse_unless_started(self, out: Decisions) -> bool:
        if self.started:
            return False
        self._reject(out, f"job {self.job_id} has no started SlotPool (no JobMaster leader)")
        return True

    def start(self, job_master_id: str, out: Decisions) -> None:
        """start(jobMasterId): the same id again is a no-op; a new id suspends the old one."""
        if job_master_id == self.job_master_id:
            return
        if self.started:
            self.suspend(f"leadership passed to {job_master_id}", out)
        self.job_master_id = job_master_id

    @handles(JobMasterLeadershipGranted)
    def on_leadership_granted(self, event: JobMasterLeadershipGranted, out: Decisions) -> None:
        self.start(event.job_master_id, out)

    @handles(JobMasterLeadershipRevoked)
    def on_leadership_revoked(self, event: JobMasterLeadershipRevoked, out: Decisions) -> None:
        if event.job_master_id != self.job_master_id:
            self._reject(out, f"JobMasterId {event.job_master_id} is not the leader's")
            return
        self.suspend("leadership revoked", out)

    def suspend(self, cause: str, out: Decisions) -> None:
        """Cancel pending requests at the RM, forget every slot without freeing it (SP-34)."""
        self._cancel_pending_at_resource_manager(out, cause)
        for resource_id in self.registered_task_managers:
            self._emit(
                out,
                JobManagerDisconnected,
                job_id=self.job_id,
                job_master_id=self.job_master_id,
                resource_id=resource_id,
                cause=cause,
            )
        self._clear()

    @completes_requests
    def close(self, cause: str, out: Decisions) -> None:
        """Cancel pending requests, release every TaskManager (SP-33)."""
        if self._refuse_unless_started(out):
            return
        self._cancel_pending_at_resource_manager(out, cause)
        for resource_id in list(self.registered_task_managers):
            self._release_task_manager(resource_id, f"SlotPool stopped: {cause}", out)
        self._clear()

    @handles(JobMasterStopped)
    def on_stopped(self, event: JobMasterStopped, out: Decisions) -> None:
        self.close(event.cause, out)

    def _cancel_pending_at_resource_manager(self, out: Decisions, cause: str) -> None:
        for request in self.pending_requests.values():
            self._cancel_at_resource_manager(request, cause, out)

    def _clear(self) -> None:
        self.job_master_id = None
        self.resource_manager_id = None
        self.registered_task_managers.clear()
        self.last_heartbeat = None
        self.waiting_for_resource_manager.clear()
        self.pending_requests.clear()
        self.allocated_slots.clear()
        self.request_of_allocation.clear()
        self.available_slots.clear()
        self.pending_of_allocation.clear()
        self.available_on.clear()
        self.allocated_on.clear()
        self.blocked_task_managers.clear()

    # -- ResourceManager connection ------------------------------------------------------

    @handles(ResourceManagerConnected)
    def on_resource_manager_connected(
        self, event: ResourceManagerConnected, out: Decisions
    ) -> None:
        """Send the stashed requests in stash order, each under a fresh AllocationID (SP-24)."""
        if self._refuse_unless_started(out):
            return
        self.resource_manager_id = event.resource_manager_id
        self.send_held_requests(out)

    def send_held_requests(self, out: Decisions) -> None:
        """Send the stashed requests, oldest first, while the window has room."""
        waiting = self.waiting_for_resource_manager
        if self.resource_manager_id is None:
            return
        while waiting and not self._window_full():
            _, request = waiting.popitem(last=False)
            self._request_from_resource_manager(request, out)

    @handles(ResourceManagerDisconnected)
    def on_resource_manager_disconnected(
        self, event: ResourceManagerDisconnected, out: Decisions
    ) -> None:
        """Only the connection goes; requests already sent stay pending (SP-26)."""
        if self._refuse_unless_started(out):
            return
        self.resource_manager_id = None

    def _request_from_resource_manager(self, request: PendingRequest, out: Decisions) -> None:
        request.allocation_id = out.derive(f"alloc/{request.slot_request_id}")
        self._add_pending(request)
        self._emit(
            out,
            SlotRequested,
            job_id=self.job_id,
            job_master_id=self.job_master_id,
            slot_request_id=request.slot_request_id,
            allocation_id=request.allocation_id,
            resource_profile=request.resource_profile,
            batch_request=request.batch,
            timeout_ms=between(out.cause.event_time, request.deadline)
            if request.deadline is not None
            else 0,
            blocked_resource_ids=list(self.blocked_task_managers),
            principal=self.principal,
        )

    # -- requests from the scheduler -----------------------------------------------------

    def request_new_allocated_slot(
        self, slot_request_id: str, resource_profile: ResourceProfile, timeout_ms: int,
        out: Decisions,
    ) -> None:  # fmt: skip
        """A new slot from the RM, failing once `timeout_ms` passed without one (SP-1, SP-22)."""
        deadline = later(out.cause.event_time, timeout_ms)
        self._request_new(PendingRequest(slot_request_id, resource_profile, False, deadline), out)

    def request_new_allocated_batch_slot(
        self, slot_request_id: str, resource_profile: ResourceProfile, out: Decisions
    ) -> None:
        """A new slot from the RM that times out only while no held slot could serve it and
        ignores ordinary allocation failures (SP-38..SP-42)."""
        self._request_new(PendingRequest(slot_request_id, resource_profile, True, None), out)

    @handles(NewAllocatedSlotRequested)
    def on_new_slot_requested(self, event: NewAllocatedSlotRequested, out: Decisions) -> None:
        if event.batch_request:
            self.request_new_allocated_batch_slot(
                event.slot_request_id, event.resource_profile, out
            )
        else:
            self.request_new_allocated_slot(
                event.slot_request_id, event.resource_profile, event.timeout_ms, out
            )

    def _request_new(self, request: PendingRequest, out: Decisions) -> None:
        """Stash the request until an RM is connected, else send it there."""
        if self._refuse_unless_started(out):
            return
        if self._knows_request(request.slot_request_id):
            self._reject(out, f"slot request {request.slot_request_id} already exists")
            return
        if (
            self.resource_manager_id is None
            or self.waiting_for_resource_manager
            or self._window_full()
        ):
            self.waiting_for_resource_manager[request.slot_request_id] = request
        else:
            self._request_from_resource_manager(request, out)

    def _window_full(self) -> bool:
        limit = self.config.max_pending_requests
        return bool(limit) and len(self.pending_requests) >= limit

    def _knows_request(self, slot_request_id: str) -> bool:
        return self.pending(slot_request_id) or slot_request_id in self.allocated_slots

    @completes_requests
    def allocate_available_slot(
        self, slot_request_id: str, allocation_id: str, out: Decisions
    ) -> None:
        """Move an available slot to the request (SP-28)."""
        if self._refuse_unless_started(out):
            return
        if self._knows_request(slot_request_id):
            self._reject(out, f"slot request {slot_request_id} already exists")
            return
        entry = self._take_available(allocation_id)
        if entry is None:
            self._reject(out, f"allocation {allocation_id} is not an available slot")
            return
        self._allocate_to(slot_request_id, entry[0], out)

    @handles(AvailableSlotAllocationRequested)
    def on_allocate_available(
        self, event: AvailableSlotAllocationRequested, out: Decisions
    ) -> None:
        self.allocate_available_slot(event.slot_request_id, event.allocation_id, out)

    def _allocate(self, request: PendingRequest, slot: AllocatedSlot, out: Decisions) -> None:
        """Complete a waiting request with `slot`; a request the ResourceManager was asked to
        serve under another AllocationID has that allocation cancelled there, so none stays
        open for a request already served (the completion of requestSlotFromResourceManager,
        FLINK-8089, `testFulfillingSlotRequestsWithUnusedOfferedSlots`)."""
        self._allocate_to(request.slot_request_id, slot, out)
        if request.allocation_id not in (None, slot.allocation_id):
            cause = (
                f"slot request {request.slot_request_id} fulfilled by allocation "
                f"{slot.allocation_id}"
            )
            self._cancel_at_resource_manager(request, cause, out)

    def _allocate_to(self, slot_request_id: str, slot: AllocatedSlot, out: Decisions) -> None:
        self._add_allocated(slot_request_id, slot)
        self._complete(
            out,
            SlotRequestFulfilled,
            job_id=self.job_id,
            slot_request_id=slot_request_id,
            allocation_id=slot.allocation_id,
            resource_id=slot.resource_id,
            slot_index=slot.slot_index,
        )

    def _complete(self, out: Decisions, cls: type[Completion], **fields: Any) -> None:
        """Derive the decision that completes a request; the listener hears of it once the
        operation is done (`completes_requests`)."""
        self.completed.append(self._emit(out, cls, **fields))

    def tell(self, completion: Completion, out: Decisions) -> None:
        """Tell the listener, if any, of one completed request."""
        if self.listener is None:
            return
        if isinstance(completion, SlotRequestFulfilled):
            self.listener.on_slot_request_fulfilled(completion, out)
        elif isinstance(completion, SlotRequestTimedOut):
            self.listener.on_slot_request_timed_out(completion, out)
        else:
            self.listener.on_slot_request_failed(completion, out)

    @completes_requests
    def release_slot(self, slot_request_id: str, out: Decisions) -> None:
        """Cancel a waiting request (SP-11) or return its slot to the pool (SP-10). A job of a
        named tenant (`principal`) keeps no slot it does not use: the slot goes back to the
        ResourceManager, which gives it to the neediest tenant waiting (`tenants`), this job
        again if none is needier. Kept, it would serve this job's next request first, and a
        job wider than the cluster would hold every slot to its last subtask while other
        tenants waited. Jobs naming no principal keep Flink's reuse, so logs written before
        tenants replay alike."""
        if self._refuse_unless_started(out):
            return
        if self.pending(slot_request_id):
            reason = f"Pending slot request with SlotRequestId {slot_request_id} has been released."
            self._fail_request(slot_request_id, reason, out)
        elif slot_request_id in self.allocated_slots:
            slot = self._take_allocated(slot_request_id)
            if self.principal is None:
                self._fulfill_or_make_available(slot, out)
            else:
                self._free_on_task_executor(slot, _SHARED, out)
        else:
            self._reject(out, f"slot request {slot_request_id} is unknown to the pool")

    @handles(SlotRequestReleased)
    def on_request_released(self, event: SlotRequestReleased, out: Decisions) -> None:
        self.release_slot(event.slot_request_id, out)

    @handles(SlotRequestRefused)
    @completes_requests
    def on_request_refused(self, event: SlotRequestRefused, out: Decisions) -> None:
        """The ResourceManager refused the request (its tenant is over a limit): it fails
        with that reason, and there is nothing to cancel there."""
        slot_request_id = self.pending_of_allocation.get(event.allocation_id)
        if slot_request_id is None:
            self._reject(out, f"allocation {event.allocation_id} is no pending request")
            return
        self._fail_request(slot_request_id, event.cause, out, at_resource_manager=False)

    def _fail_request(
        self, slot_request_id: str, cause: str, out: Decisions, at_resource_manager: bool = True
    ) -> None:
        """Fail a waiting request; one sent to the RM is cancelled there too, unless the RM
        refused it (`at_resource_manager` False)."""
        request = self.waiting_for_resource_manager.pop(slot_request_id, None)
        if request is None:
            request = self.pending_requests[slot_request_id]
            self._remove_waiting(self.pending_requests, slot_request_id)
        self._complete(
            out,
            SlotRequestFailed,
            job_id=self.job_id,
            slot_request_id=slot_request_id,
            allocation_id=request.allocation_id,
            cause=cause,
        )
        if at_resource_manager:
            self._cancel_at_resource_manager(request, cause, out)

    def _cancel_at_resource_manager(
        self, request: PendingRequest, cause: str, out: Decisions
    ) -> None:
        """Withdraw a request the ResourceManager has (while one is connected)."""
        if request.allocation_id is not None and self.resource_manager_id is not None:
            self._emit(
                out,
                SlotRequestCancelled,
                job_id=self.job_id,
                slot_request_id=request.slot_request_id,
                allocation_id=request.allocation_id,
                cause=cause,
            )

    @handles(BatchSlotRequestTimeoutCheckDisabled)
    def on_batch_check_disabled(
        self, event: BatchSlotRequestTimeoutCheckDisabled, out: Decisions
    ) -> None:
        """disableBatchSlotRequestTimeoutCheck (SP-43)."""
        if self._refuse_unless_started(out):
            return
        self.batch_timeout_check_enabled = False

    # -- TaskManagers and their slots ----------------------------------------------------

    @handles(JobMasterRegistrationRequested)
    def on_registration_requested(
        self, event: JobMasterRegistrationRequested, out: Decisions
    ) -> None:
        """registerTaskManager: set semantics, a repeat is acknowledged again (SP-29, JM-2)."""
        reason = None
        if not self.started:
            reason = f"job {self.job_id} has no JobMaster leader"
        elif event.job_master_id not in (None, self.job_master_id):
            reason = f"JobMasterId {event.job_master_id} is not the leader's"
        if reason is not None:
            self._emit(
                out,
                JobMasterRegistrationDeclined,
                job_id=self.job_id,
                resource_id=event.resource_id,
                reason=reason,
            )
            return
        self.registered_task_managers[event.resource_id] = None
        self._emit(
            out,
            JobMasterRegistrationAccepted,
            job_id=self.job_id,
            job_master_id=self.job_master_id,
            resource_id=event.resource_id,
        )

    @handles(TaskManagerDisconnected)
    @completes_requests
    def on_task_manager_disconnected(self, event: TaskManagerDisconnected, out: Decisions) -> None:
        """releaseTaskManager: its slots are freed, their requests fail; pending stay (SP-30)."""
        if self._refuse_unless_started(out):
            return
        if event.resource_id not in self.registered_task_managers:
            self._reject(out, f"TaskManager {event.resource_id} is not registered")
            return
        self._release_task_manager(event.resource_id, event.cause, out)

    @completes_requests
    def release_task_manager(self, resource_id: str, cause: str, out: Decisions) -> None:
        """releaseTaskManager, for the JobMaster letting go of a TaskManager (JM-4)."""
        self._release_task_manager(resource_id, cause, out)

    def _release_task_manager(self, resource_id: str, cause: str, out: Decisions) -> None:
        self.registered_task_managers.pop(resource_id, None)
        for slot in self.slots_of(resource_id):
            self._drop_slot(slot, cause, out)

    def block_task_manager(self, resource_id: str, cause: str, out: Decisions) -> None:
        """Take no more slots of the TaskManager (BlocklistDeclarativeSlotPool): its free
        slots are freed now, a slot of it released later is freed instead of reused, and
        later requests ask the ResourceManager for slots elsewhere. Requests already sent
        may still be served there; slots in use stay."""
        self.blocked_task_managers.pop(resource_id, None)
        self.blocked_task_managers[resource_id] = None
        if len(self.blocked_task_managers) > MAX_BLOCKED_TASK_MANAGERS:
            del self.blocked_task_managers[next(iter(self.blocked_task_managers))]
        for slot in list(self.available_on.get(resource_id, {}).values()):
            self._drop_slot(slot, cause, out)

    def _drop_slot(self, slot: AllocatedSlot, cause: str, out: Decisions) -> None:
        """Remove a held slot, free it on its TaskExecutor and fail the request using it."""
        self._remove_held(slot, cause, out)
        self._free_on_task_executor(slot, cause, out)

    def _free_on_task_executor(self, slot: AllocatedSlot, cause: str, out: Decisions) -> None:
        self._emit(
            out,
            SlotFreeRequested,
            job_id=self.job_id,
            resource_id=slot.resource_id,
            allocation_id=slot.allocation_id,
            cause=cause,
        )

    def _remove_held(self, slot: AllocatedSlot, cause: str, out: Decisions) -> None:
        """Forget a held slot; the request it was allocated to fails with `cause`."""
        if self._take_available(slot.allocation_id) is not None:
            return
        request_id = self.request_of_allocation[slot.allocation_id]
        self._take_allocated(request_id)
        self._complete(
            out,
            SlotRequestFailed,
            job_id=self.job_id,
            slot_request_id=request_id,
            allocation_id=slot.allocation_id,
            cause=cause,
        )

    @handles(SlotOffered)
    @completes_requests
    def on_slot_offered(self, event: SlotOffered, out: Decisions) -> None:
        """offerSlot, exactly as seed 002: registered TM, repeated offer, AllocationID clash,
        the request waiting on the AllocationID, the first matching request, else available."""
        reason = self._offer_refusal(event)
        if reason is not None:
            self._answer_offer(event, out, reason)
            return
        existing = self.holds(event.allocation_id)
        if existing is not None:
            if existing.slot_id == (event.resource_id, event.slot_index):
                self._answer_offer(event, out, None)
            else:
                self._answer_offer(
                    event,
                    out,
                    f"allocation {event.allocation_id} is already held by slot "
                    f"{existing.slot_index} of {existing.resource_id}",
                )
            return
        slot = AllocatedSlot(
            event.allocation_id, event.resource_id, event.slot_index, event.resource_profile
        )
        self._answer_offer(event, out, None)
        self._forget_superseded(slot, out)
        waiting = self._pending_with(slot.allocation_id)
        if waiting is not None:
            self._remove_waiting(self.pending_requests, waiting.slot_request_id)
            self._allocate(waiting, slot, out)
        else:
            self._fulfill_or_make_available(slot, out)

    def _forget_superseded(self, slot: AllocatedSlot, out: Decisions) -> None:
        """The TaskExecutor re-allocated this SlotID, so an older allocation the pool still
        holds for it is gone: its request fails (a slot serves one allocation at a time)."""
        for old in self.slots_of(slot.resource_id):
            if old.slot_index == slot.slot_index:
                cause = (
                    f"slot {slot.slot_index} of {slot.resource_id} now holds allocation "
                    f"{slot.allocation_id}"
                )
                self._remove_held(old, cause, out)

    def _offer_refusal(self, event: SlotOffered) -> str | None:
        if not self.started:
            return f"job {self.job_id} has no JobMaster leader"
        if event.job_master_id not in (None, self.job_master_id):
            return f"JobMasterId {event.job_master_id} is not the leader's"
        if event.resource_id not in self.registered_task_managers:
            return f"TaskManager {event.resource_id} is not registered at the job"
        return None

    def _answer_offer(self, event: SlotOffered, out: Decisions, reason: str | None) -> None:
        """Accepted by the leader; refused in the name of the JobMaster the TaskExecutor
        offered to, as the RPC to a former leader fails in Flink: the TaskExecutor takes that
        answer from its connection and frees the slot (TE-7), where a refusal in the new
        leader's name would be ignored as stale (TE-11) and leave the slot waiting for good."""
        common = dict(
            job_id=self.job_id,
            job_master_id=self.job_master_id if reason is None else event.job_master_id,
            resource_id=event.resource_id,
            slot_index=event.slot_index,
            allocation_id=event.allocation_id,
        )
        if reason is None:
            self._emit(out, SlotOfferAccepted, **common)
        else:
            self._emit(out, SlotOfferRejected, **common, reason=reason)

    def _fulfill_or_make_available(self, slot: AllocatedSlot, out: Decisions) -> None:
        """tryFulfillSlotRequestOrMakeAvailable: sent requests first, then stashed (SP-37);
        a slot of a blocked TaskManager is freed instead."""
        if slot.resource_id in self.blocked_task_managers:
            self._free_on_task_executor(slot, f"TaskManager {slot.resource_id} is blocked", out)
            return
        for waiting in (self.pending_requests, self.waiting_for_resource_manager):
            for request in waiting.values():
                if is_matching(slot.resource_profile, request.resource_profile):
                    self._remove_waiting(waiting, request.slot_request_id)
                    self._allocate(request, slot, out)
                    return
        self._add_available(slot, out.cause.event_time)

    @handles(AllocationFailed)
    @completes_requests
    def on_allocation_failed(self, event: AllocationFailed, out: Decisions) -> None:
        """failAllocation: a pending request fails (a batch one ignores ordinary failures), a
        held slot is freed and its TaskManager reported once the pool holds none of its slots."""
        if self._refuse_unless_started(out):
            return
        if event.resource_id is not None and event.resource_id not in self.registered_task_managers:
            self._reject(
                out, f"failSlot from unknown TaskManager {event.resource_id} ignored (JM-4)"
            )
            return
        pending = self._pending_with(event.allocation_id)
        if pending is not None:
            if not (pending.batch and not event.unfulfillable):
                self._fail_request(pending.slot_request_id, event.cause, out)
            return
        slot = self.holds(event.allocation_id)
        if slot is None:
            self._reject(out, f"allocation {event.allocation_id} is unknown to the pool")
            return
        self._drop_slot(slot, event.cause, out)
        if not self.slots_of(slot.resource_id):
            self._emit(
                out, LastSlotOfTaskManagerFreed, job_id=self.job_id, resource_id=slot.resource_id
            )

    # -- time ----------------------------------------------------------------------------

    @handles(TimerFired)
    @completes_requests
    def on_timer(self, event: TimerFired, out: Decisions) -> None:
        """Fire every due timeout, then, once per heartbeat interval, heartbeat each
        registered TaskManager with the slots the pool holds there (TE-15's
        AllocatedSlotReport)."""
        if not self.started:
            return
        now = event.event_time
        self._time_out_requests(now, out)
        self._release_idle_slots(now, out)
        if self.batch_timeout_check_enabled:
            self._check_batch_requests(now, out)
        if not self.registered_task_managers or now < self._next_heartbeat():
            return
        self.last_heartbeat = now
        for resource_id in self.registered_task_managers:
            self._emit(
                out,
                JobMasterHeartbeat,
                job_id=self.job_id,
                job_master_id=self.job_master_id,
                resource_id=resource_id,
                allocated_slots=[
                    AllocatedSlotInfo(slot_index=index, allocation_id=allocation_id)
                    for index, allocation_id in self.create_allocated_slot_report(resource_id)
                ],
            )

    def next_timer(self) -> int | None:
        """The earliest event time at which a TimerFired changes anything here (None: never,
        0: every tick, for the batch check)."""
        if not self.started:
            return None
        waiting = [*self.waiting_for_resource_manager.values(), *self.pending_requests.values()]
        if self.batch_timeout_check_enabled and any(r.batch for r in waiting):
            return 0
        times = [r.deadline for r in waiting if r.deadline is not None]
        if self.registered_task_managers:
            times.append(self._next_heartbeat())
        times += [
            since + self.config.idle_slot_timeout_ms + 1
            for _, since in self.available_slots.values()
        ]
        return min(times, default=None)

    def _next_heartbeat(self) -> int:
        """When the registered TaskManagers are heartbeat next (0: at the next TimerFired)."""
        interval = self.config.heartbeat_interval_ms
        if not interval or self.last_heartbeat is None:
            return 0
        return self.last_heartbeat + interval

    def _time_out_requests(self, now: int, out: Decisions) -> None:
        """A streaming request fails once its timeout passed (SP-21, SP-22)."""
        for waiting in (self.waiting_for_resource_manager, self.pending_requests):
            for request in [r for r in waiting.values() if r.deadline is not None]:
                if request.deadline <= now:
                    self._time_out(request, waiting, out)

    def _time_out(
        self, request: PendingRequest, waiting: dict[str, PendingRequest], out: Decisions
    ) -> None:
        self._remove_waiting(waiting, request.slot_request_id)
        self._complete(
            out,
            SlotRequestTimedOut,
            job_id=self.job_id,
            slot_request_id=request.slot_request_id,
            allocation_id=request.allocation_id,
        )
        self._cancel_at_resource_manager(request, "slot request timed out", out)

    def _release_idle_slots(self, now: int, out: Decisions) -> None:
        """Available slots idle for more than the idle timeout go back (strict >, SP-31/32)."""
        idle = [
            slot
            for slot, since in self.available_slots.values()
            if now - since > self.config.idle_slot_timeout_ms
        ]
        for slot in idle:
            self._take_available(slot.allocation_id)
            self._emit(
                out,
                IdleSlotTimedOut,
                job_id=self.job_id,
                resource_id=slot.resource_id,
                allocation_id=slot.allocation_id,
            )
            self._emit(
                out,
                SlotFreeRequested,
                job_id=self.job_id,
                resource_id=slot.resource_id,
                allocation_id=slot.allocation_id,
                cause="slot idle for too long",
            )

    def _check_batch_requests(self, now: int, out: Decisions) -> None:
        """A batch request times out once no held slot could serve it for the batch timeout
        (SP-38, SP-39, SP-42)."""
        held = [s.resource_profile for s, _ in self.available_slots.values()]
        held += [s.resource_profile for s in self.allocated_slots.values()]
        for waiting in (self.pending_requests, self.waiting_for_resource_manager):
            for request in [r for r in waiting.values() if r.batch]:
                if any(is_matching(profile, request.resource_profile) for profile in held):
                    request.unfulfillable_since = None
                elif request.unfulfillable_since is None:
                    request.unfulfillable_since = now
                if (
                    request.unfulfillable_since is not None
                    and request.unfulfillable_since + self.config.batch_slot_timeout_ms <= now
                ):
                    self._time_out(request, waiting, out)

    # -- the query surface (queries.py) ---------------------------------------------------

    @query
    def slots(self) -> list[SlotInfo]:
        """Every slot the pool holds: the allocated ones in the pool's order (by SlotRequestId
        as they were allocated), then the available ones (by AllocationID, as offered)."""
        allocated = [
            SlotInfo(s.allocation_id, s.resource_id, s.slot_index, s.resource_profile, r, None)
            for r, s in self.allocated_slots.items()
        ]
        return allocated + [
            SlotInfo(s.allocation_id, s.resource_id, s.slot_index, s.resource_profile, None, t)
            for s, t in self.available_slots.values()
        ]

    @query
    def pending_slot_requests(self) -> list[PendingRequestInfo]:
        """Every request waiting for a slot: the stashed ones (no ResourceManager yet), then
        the ones sent to the ResourceManager, each in the order it was made."""
        return [
            PendingRequestInfo(r.slot_request_id, r.allocation_id, r.resource_profile, at_rm)
            for waiting, at_rm in (
                (self.waiting_for_resource_manager, False), (self.pending_requests, True),
            )
            for r in waiting.values()
        ]  # fmt: skip

    @query
    def is_connected_to_resource_manager(self) -> bool:
        """Whether the pool has a ResourceManager to send requests to (SP-24, SP-26)."""
        return self.resource_manager_id is not None


def _drop(index: dict[str, dict[str, AllocatedSlot]], resource_id: str, key: str) -> None:
    """Remove one slot from a by-TaskManager index, and the TaskManager once it has none."""
    slots = index[resource_id]
    del slots[key]
    if not slots:
        del index[resource_id]


def _plain(value: Any) -> dict[str, Any]:
    data = dict(vars(value))
    if "resource_profile" in data:
        data["resource_profile"] = data["resource_profile"].model_dump(mode="json")
    return data
