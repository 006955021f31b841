"""SlotManager: the ResourceManager's registered slots matched with every job's slot requests
(Flink keeps the two apart the same way: its ResourceManager registers TaskExecutors and
watches them live, its SlotManager holds their slots and the jobs' requirements and matches
one to the other).

Invariants:
- a slot is FREE, PENDING for exactly one requested allocation (asked of its TaskExecutor,
  not yet confirmed), ALLOCATED to one allocation, or OCCUPIED by an allocation the
  ResourceManager did not make;
- a request is waiting or pending at exactly one slot, until its TaskExecutor confirms it;
- each request belongs to its job's tenant (`tenants`). A free slot goes to the tenant that
  holds the fewest slots among those whose requests wait (the oldest waiting request breaks
  a tie), and within a tenant requests are served in the order they arrived, each by the
  first slot that matches it (`slot_placement`); a request re-queued after a failure keeps
  its place. With one tenant (every log written before tenants) that is first come, first
  served;
- a new job of a tenant over its limits (jobs in flight, submissions per second) has its
  requests refused with the reason, never queued; a tenant holding its `max_slots` waits.

The SlotManager keeps no state a snapshot holds: the requests, the queue and the tenants'
rates are fields of its ResourceManager (`SlotLedger`), which the snapshot format has always
written there; the SlotManager holds only the indexes it rebuilds from them.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from jobledger.schemas.slots import (
    SlotAllocated,
    SlotAllocationFailed,
    SlotAllocationRequested,
    SlotFreed,
    SlotRequestCancelled,
    SlotRequested,
    SlotRequestRefused,
)
from jobledger.schemas.types import OwnerKind, ResourceProfile

from .decisions import Decisions
from .queries import PendingSlotRequestInfo
from .reducer import Reducer, handles
from .slot_placement import FreeSlotIndex, Placeable, SlotPlacement
from .slot_states import SlotState
from .tenants import TenantLimits, tenant_of

RATE_SWEEP = 64
"""How many tenants' submission rates are kept between sweeps of those at rest."""


@dataclass
class Slot:
    wire_namespace: ClassVar[str] = "jobledger.services.resource_manager"
    """Where snapshots have named it since before it moved here from `resource_manager`: a
    moved type keeps its wire name (services/host/snapshot_format.py `_namespace`)."""

    state: SlotState = SlotState.FREE
    allocation_id: str | None = None
    job_id: str | None = None


@dataclass
class SlotRequest:
    wire_namespace: ClassVar[str] = "jobledger.services.resource_manager"
    """Where snapshots have named it since before it moved here from `resource_manager`: a
    moved type keeps its wire name (services/host/snapshot_format.py `_namespace`)."""

    job_id: str
    slot_request_id: str
    allocation_id: str
    resource_profile: ResourceProfile
    job_master_id: str | None
    arrival: int
    assigned: tuple[str, int] | None = None
    blocked: list[str] = field(default_factory=list)
    """TaskExecutors the job takes no slot of: the request is served elsewhere."""
    tenant: str = tenant_of(None)
    """Its job's principal (`tenants`)."""


@dataclass
class TenantShare:
    """What one tenant has at the ResourceManager now: an index over `requests` and `queue`,
    rebuilt from them, so a snapshot holds none of it."""

    waiting: list[tuple[int, str]] = field(default_factory=list)
    """A heap of (arrival, AllocationID) over its queued requests, so serving the oldest does
    not sort thousands of waiting ones per freed slot; entries no longer in `queue` (or there
    under another arrival) are stale."""
    held: int = 0
    """Slots picked for its requests (pending at their TaskExecutor, or allocated)."""
    jobs: dict[str, int] = field(default_factory=dict)
    """Its jobs in flight, each with its number of open requests."""


class SlotTable(Placeable, Protocol):
    """What the SlotManager needs of a registered TaskExecutor: its slots, changed only
    through `place` (which keeps its free count true)."""

    slots: list[Slot]

    def place(self, index: int, slot: Slot) -> None: ...

    def first_free(self) -> int: ...


class SlotLedger(Protocol):
    """The ResourceManager's fields the SlotManager reads and writes. They stay the
    ResourceManager's so that its snapshot is written as it always was."""

    @property
    def task_executors(self) -> Mapping[str, SlotTable]: ...

    requests: dict[str, SlotRequest]
    """Open requests by AllocationID, until their slot is freed."""
    queue: dict[str, int]
    """The requests no slot has been picked for: AllocationID -> arrival number."""
    arrivals: int
    submission_rates: dict[str, int]
    """Each tenant's theoretical arrival time (`TenantLimits.next_arrival`), while ahead of
    `latest_request_time`."""
    latest_request_time: int | None
    """The latest event time of a slot request read: the tenants' rates are judged on it."""


class SlotManager(Reducer):
    """A component of the ResourceManager, reached through `handle` with its owner's
    `Decisions` (its decisions are the ResourceManager's). The ResourceManager tells it of
    TaskExecutors registered (`registered`) and lost (`lost`), and asks it to serve the
    waiting requests when slots may have come free (`serve_waiting`)."""

    def __init__(
        self,
        ledger: SlotLedger,
        resource_manager_id: str,
        placement: SlotPlacement,
        tenants: TenantLimits,
    ) -> None:
        self.ledger = ledger
        self.resource_manager_id = resource_manager_id
        self.tenants = tenants
        self.free_slot_index = FreeSlotIndex(placement)
        self.shares: dict[str, TenantShare] = {}
        """Each tenant with open requests, by principal."""
        for te in ledger.task_executors.values():
            self.free_slot_index.changed(te)
        for request in ledger.requests.values():
            share = self._share(request.tenant)
            share.jobs[request.job_id] = share.jobs.get(request.job_id, 0) + 1
            share.held += request.assigned is not None
        for allocation_id, arrival in ledger.queue.items():
            share = self.shares[ledger.requests[allocation_id].tenant]
            heapq.heappush(share.waiting, (arrival, allocation_id))

    def _share(self, tenant: str) -> TenantShare:
        share = self.shares.get(tenant)
        if share is None:
            share = self.shares[tenant] = TenantShare()
        return share

    def _reject(self, out: Decisions, reason: str) -> None:
        out.reject(OwnerKind.RESOURCE_MANAGER, self.resource_manager_id, reason)

    def _task_executor(self, resource_id: str, out: Decisions) -> SlotTable | None:
        te = self.ledger.task_executors.get(resource_id)
        if te is None:
            self._reject(out, f"TaskExecutor {resource_id} is not registered")
        return te

    # -- TaskExecutors, as the ResourceManager tells of them -----------------------------

    def registered(self, te: SlotTable) -> None:
        """`te` registered with its slots (as its slot report said)."""
        self.free_slot_index.changed(te)

    def lost(self, te: SlotTable) -> None:
        """`te` is gone: its requests in flight wait again, keeping their place, and the
        requests allocated there are closed."""
        self.free_slot_index.removed(te)
        for slot in te.slots:
            if slot.state is SlotState.PENDING:
                self._requeue_pending(slot)
            elif slot.state is SlotState.ALLOCATED:
                self._forget(slot.allocation_id)

    # -- slot requests -------------------------------------------------------------------

    @handles(SlotRequested)
    def on_slot_requested(self, event: SlotRequested, out: Decisions) -> None:
        ledger = self.ledger
        if event.allocation_id in ledger.requests:
            self._reject(out, f"allocation {event.allocation_id} was already requested")
            return
        tenant = tenant_of(event.principal)
        refusal = self._admission_refusal(tenant, event)
        if refusal is not None:
            out.emit(
                SlotRequestRefused,
                job_id=event.job_id,
                allocation_id=event.allocation_id,
                cause=refusal,
            )
            return
        ledger.arrivals += 1
        ledger.requests[event.allocation_id] = SlotRequest(
            event.job_id,
            event.slot_request_id,
            event.allocation_id,
            event.resource_profile,
            event.job_master_id,
            ledger.arrivals,
            blocked=list(event.blocked_resource_ids),
            tenant=tenant,
        )
        jobs = self._share(tenant).jobs
        jobs[event.job_id] = jobs.get(event.job_id, 0) + 1
        self._enqueue(event.allocation_id, ledger.arrivals)
        self.serve_waiting(out)

    def _admission_refusal(self, tenant: str, event: SlotRequested) -> str | None:
        """Why the request's job may not start (None: it may, or it is in flight already):
        its tenant's limits, judged at the latest request time read (`tenants`). A job let
        in counts against its tenant's rate."""
        ledger = self.ledger
        now = event.event_time
        if ledger.latest_request_time is not None:
            now = max(now, ledger.latest_request_time)
        ledger.latest_request_time = now
        share = self.shares.get(tenant)
        if share is not None and event.job_id in share.jobs:
            return None
        limits = self.tenants
        rate = ledger.submission_rates.get(tenant, 0)
        refusal = limits.admission_refusal(tenant, len(share.jobs) if share else 0, rate, now)
        if refusal is None and limits.max_submissions_per_second:
            if tenant not in ledger.submission_rates:
                self._forget_rested_rates(now)
            ledger.submission_rates[tenant] = limits.next_arrival(rate, now)
        return refusal

    def _forget_rested_rates(self, now: int) -> None:
        """Before a tenant's rate is added to every RATE_SWEEP already kept, drop those that
        have caught up with `now` (no different from none): bounded state, at a cost shared
        by the tenants that grew it, and a function of the state alone, as replay needs."""
        ledger = self.ledger
        if len(ledger.submission_rates) % RATE_SWEEP:
            return
        ledger.submission_rates = {
            tenant: at for tenant, at in ledger.submission_rates.items()
            if not self.tenants.rested(at, now)
        }  # fmt: skip

    @handles(SlotRequestCancelled)
    def on_request_cancelled(self, event: SlotRequestCancelled, out: Decisions) -> None:
        """A waiting or in-flight request is dropped (its slot is free again); a request whose
        slot the TaskExecutor already confirmed is not a request any more."""
        request = self.ledger.requests.get(event.allocation_id)
        if request is None:
            self._reject(out, f"allocation {event.allocation_id} has no open request")
            return
        if request.assigned is not None:
            resource_id, index = request.assigned
            te = self.ledger.task_executors[resource_id]
            if te.slots[index].state is SlotState.ALLOCATED:
                self._reject(out, f"allocation {event.allocation_id} is already fulfilled")
                return
            self._place(te, index, Slot())
        self._forget(event.allocation_id)
        self.serve_waiting(out)

    @handles(SlotAllocated)
    def on_slot_allocated(self, event: SlotAllocated, out: Decisions) -> None:
        """The TaskExecutor confirmed: the slot is the allocation's until it is freed. A request
        the slot was meanwhile picked for goes back to wait."""
        te = self._task_executor(event.resource_id, out)
        if te is None or not self._valid_index(te, event.slot_index, out):
            return
        self._requeue_pending(te.slots[event.slot_index], keep=event.allocation_id)
        request = self.ledger.requests.get(event.allocation_id)
        if request is not None:
            self._assign(request, (te.resource_id, event.slot_index))
            self.ledger.queue.pop(event.allocation_id, None)
        self._place(
            te, event.slot_index, Slot(SlotState.ALLOCATED, event.allocation_id, event.job_id)
        )
        self.serve_waiting(out)

    @handles(SlotAllocationFailed)
    def on_allocation_failed(self, event: SlotAllocationFailed, out: Decisions) -> None:
        """The TaskExecutor refused: the slot holds something we did not place there, and the
        request goes back to wait in its place."""
        te = self._task_executor(event.resource_id, out)
        if te is None or not self._valid_index(te, event.slot_index, out):
            return
        slot = te.slots[event.slot_index]
        if slot.state is SlotState.PENDING and slot.allocation_id == event.allocation_id:
            self._requeue_pending(slot)
            self._place(te, event.slot_index, Slot(SlotState.OCCUPIED))
        self.serve_waiting(out)

    @handles(SlotFreed)
    def on_slot_freed(self, event: SlotFreed, out: Decisions) -> None:
        te = self._task_executor(event.resource_id, out)
        if te is None or not self._valid_index(te, event.slot_index, out):
            return
        slot = te.slots[event.slot_index]
        if slot.state is SlotState.PENDING and slot.allocation_id != event.allocation_id:
            self._reject(
                out,
                f"slot {event.slot_index} of {te.resource_id} is being allocated "
                f"for {slot.allocation_id}, not {event.allocation_id}",
            )
            return
        self._forget(event.allocation_id)
        self._place(te, event.slot_index, Slot())
        self.serve_waiting(out)

    def _place(self, te: SlotTable, index: int, slot: Slot) -> None:
        te.place(index, slot)
        self.free_slot_index.changed(te)

    def _forget(self, allocation_id: str) -> None:
        request = self.ledger.requests.pop(allocation_id, None)
        self.ledger.queue.pop(allocation_id, None)
        if request is None:
            return
        share = self.shares[request.tenant]
        share.held -= request.assigned is not None
        left = share.jobs.pop(request.job_id) - 1
        if left:
            share.jobs[request.job_id] = left
        elif not share.jobs:
            del self.shares[request.tenant]

    def _assign(self, request: SlotRequest, slot: tuple[str, int] | None) -> None:
        """Every change of a request's slot goes through here, so its tenant's count holds."""
        self.shares[request.tenant].held += (slot is not None) - (request.assigned is not None)
        request.assigned = slot

    def _requeue_pending(self, slot: Slot, keep: str | None = None) -> None:
        """A request pending at `slot` (other than `keep`) waits again, keeping its place."""
        if slot.state is SlotState.PENDING and slot.allocation_id != keep:
            request = self.ledger.requests.get(slot.allocation_id)
            if request is not None:
                self._assign(request, None)
                self._enqueue(request.allocation_id, request.arrival)

    def _enqueue(self, allocation_id: str, arrival: int) -> None:
        self.ledger.queue[allocation_id] = arrival
        share = self.shares[self.ledger.requests[allocation_id].tenant]
        heapq.heappush(share.waiting, (arrival, allocation_id))

    def _valid_index(self, te: SlotTable, index: int, out: Decisions) -> bool:
        if 0 <= index < len(te.slots):
            return True
        self._reject(out, f"TaskExecutor {te.resource_id} has no slot {index}")
        return False

    def serve_waiting(self, out: Decisions) -> None:
        """Give free slots to waiting requests, one at a time to the tenant holding the fewest
        (`_next_tenant`), each its oldest request's first matching slot. A request no free
        slot matches waits on, and its tenant's next is tried."""
        ledger = self.ledger
        unserved: dict[str, list[tuple[int, str]]] = {}
        tenants = [tenant for tenant, share in self.shares.items() if share.waiting]
        while tenants and self.free_slot_index.free_total:
            tenant = self._next_tenant(tenants)
            if tenant is None:
                break
            arrival, allocation_id = heapq.heappop(self.shares[tenant].waiting)
            request = ledger.requests[allocation_id]
            te = self.free_slot_index.pick(
                request.resource_profile, ledger.task_executors, request.blocked
            )
            if te is None:
                unserved.setdefault(tenant, []).append((arrival, allocation_id))
                continue
            index = te.first_free()
            self._place(te, index, Slot(SlotState.PENDING, request.allocation_id, request.job_id))
            self._assign(request, (te.resource_id, index))
            del ledger.queue[request.allocation_id]
            out.emit(
                SlotAllocationRequested,
                resource_id=te.resource_id,
                slot_index=index,
                allocation_id=request.allocation_id,
                job_id=request.job_id,
                resource_profile=request.resource_profile,
                resource_manager_id=self.resource_manager_id,
                job_master_id=request.job_master_id,
            )
        for tenant, entries in unserved.items():
            for entry in entries:
                heapq.heappush(self.shares[tenant].waiting, entry)

    def _next_tenant(self, tenants: list[str]) -> str | None:
        """The tenant among `tenants` to serve next: the one holding the fewest slots, then
        the one whose oldest waiting request is oldest (Flink's and YARN's fair schedulers
        serve the neediest first, too). `tenants` loses those with nothing left to try (stale
        heap entries are dropped on the way) and those at their `max_slots`."""
        best: tuple[int, int, str] | None = None
        for tenant in list(tenants):
            share = self.shares[tenant]
            waiting = share.waiting
            while waiting and self.ledger.queue.get(waiting[0][1]) != waiting[0][0]:
                heapq.heappop(waiting)
            if not waiting or self.tenants.at_slot_limit(share.held):
                tenants.remove(tenant)
                continue
            rank = (share.held, waiting[0][0], tenant)
            if best is None or rank < best:
                best = rank
        return None if best is None else best[2]

    # -- what the ResourceManager's queries read -----------------------------------------

    def waiting(self) -> list[SlotRequest]:
        """Requests no slot has been picked for, in arrival order."""
        queue = self.ledger.queue
        return [self.ledger.requests[a] for a in sorted(queue, key=queue.__getitem__)]

    def slot_request(self, allocation_id: str) -> PendingSlotRequestInfo | None:
        """The open request for `allocation_id`; None if none is open."""
        r = self.ledger.requests.get(allocation_id)
        if r is None:
            return None
        return PendingSlotRequestInfo(r.job_id, r.slot_request_id, r.allocation_id, r.assigned)

    def requests_queued_before(self, allocation_id: str) -> int:
        """How many queued requests of its tenant arrived before the one for `allocation_id`
        (0 if that one is not queued)."""
        queue, requests = self.ledger.queue, self.ledger.requests
        mine = queue.get(allocation_id)
        if mine is None:
            return 0
        tenant = requests[allocation_id].tenant
        return sum(
            1 for other, order in queue.items()
            if order < mine and requests[other].tenant == tenant
        )  # fmt: skip
