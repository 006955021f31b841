"""TaskSlotTable: the slots of one TaskExecutor, as Flink's TaskSlotTableImpl keeps them.

Invariants:
- a TaskSlot exists only while it is allocated; its state is ALLOCATED, ACTIVE or RELEASING;
- an AllocationID names at most one slot, and a static index (0..n-1) holds at most one slot;
- a static slot always has the TaskExecutor's default slot profile; a dynamic slot (index < 0)
  keeps the profile it was requested with and must fit into what the static slots leave over;
- only ALLOCATED slots have a timeout; activating a slot cancels it, deactivating re-arms it;
- a slot with tasks is not freed at once: it is RELEASING until its last task is removed.

Pure data: times are event times handed in by the caller, nothing here reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from jobledger.schemas.types import ResourceProfile, ResourceProfileKind, SlotStatus

from .reducer import derived
from .resource_profile import fits_within, scale, subtract
from .slot_states import TaskSlotState

MAX_SLOTS_PER_TASK_EXECUTOR = 4096
"""A slot table larger than this is a mistake or an attack, not a TaskExecutor."""


def slot_count_refusal(number_of_slots: int) -> str | None:
    """Why a TaskExecutor cannot have `number_of_slots` slots, or None if it can."""
    if 1 <= number_of_slots <= MAX_SLOTS_PER_TASK_EXECUTOR:
        return None
    return f"a TaskExecutor has 1 to {MAX_SLOTS_PER_TASK_EXECUTOR} slots, not {number_of_slots}"


class AddTaskResult(StrEnum):
    """Outcome of `add_task` (TST-12); anything but ADDED is a refusal."""

    ADDED = "ADDED"
    UNKNOWN_ALLOCATION = "UNKNOWN_ALLOCATION"
    SLOT_NOT_ACTIVE = "SLOT_NOT_ACTIVE"
    DUPLICATE_ATTEMPT = "DUPLICATE_ATTEMPT"


@dataclass
class TaskSlot:
    index: int
    allocation_id: str
    job_id: str
    resource_profile: ResourceProfile
    state: TaskSlotState = TaskSlotState.ALLOCATED
    tasks: list[str] = field(default_factory=list)
    timeout_at: int | None = None

    @property
    def is_dynamic(self) -> bool:
        return self.index < 0


@dataclass(frozen=True)
class FreeSlotResult:
    """What `free_slot` did: `freed` is False while the slot still has tasks to fail first."""

    index: int
    freed: bool
    tasks_to_fail: tuple[str, ...] = ()


@dataclass
class TaskSlotTable:
    """The slot table of one TaskExecutor with `number_of_slots` static slots."""

    number_of_slots: int
    default_slot_profile: ResourceProfile
    slots: dict[str, TaskSlot] = field(default_factory=dict)
    """The allocated slots by AllocationID; the indexes below are derived from them."""
    total_budget: ResourceProfile = derived()
    _static: dict[int, str] = derived()
    """The AllocationID holding each static index."""
    _task_slot: dict[str, str] = derived()
    """The AllocationID of the slot each task runs in."""

    def __post_init__(self) -> None:
        self.total_budget = scale(self.default_slot_profile, self.number_of_slots)
        self._static = {s.index: a for a, s in self.slots.items() if s.index >= 0}
        self._task_slot = {task: a for a, s in self.slots.items() for task in s.tasks}

    def allocate_slot(
        self,
        index: int,
        job_id: str,
        allocation_id: str,
        requested: ResourceProfile,
        timeout_at: int | None,
    ) -> bool:
        """Allocate a slot; False if the AllocationID exists, the index is taken, or a dynamic
        slot does not fit (TST-3, TST-4, TST-7). An index past the table is a caller bug."""
        if index >= self.number_of_slots:
            raise ValueError(f"slot index {index} >= number of slots {self.number_of_slots}")
        if allocation_id in self.slots:
            return False
        if index >= 0:
            if index in self._static:
                return False
            profile = self.default_slot_profile
            self._static[index] = allocation_id
        else:
            profile = self._dynamic_profile(requested)
            if not fits_within(profile, self.remaining_budget()):
                return False
        self.slots[allocation_id] = TaskSlot(
            index, allocation_id, job_id, profile, timeout_at=timeout_at
        )
        return True

    def _dynamic_profile(self, requested: ResourceProfile) -> ResourceProfile:
        if requested.kind is ResourceProfileKind.SPECIFIED:
            return requested
        return self.default_slot_profile

    def remaining_budget(self) -> ResourceProfile:
        remaining = self.total_budget
        for slot in self.slots.values():
            remaining = subtract(remaining, slot.resource_profile)
        return remaining

    def is_slot_free(self, index: int) -> bool:
        return index not in self._static

    def is_allocated(self, index: int, job_id: str, allocation_id: str) -> bool:
        slot = self.slots.get(allocation_id)
        return slot is not None and slot.index == index and slot.job_id == job_id

    def owner_of_index(self, index: int) -> TaskSlot | None:
        allocation_id = self._static.get(index)
        return self.slots[allocation_id] if allocation_id is not None else None

    def try_mark_slot_active(self, job_id: str, allocation_id: str) -> bool:
        """Activate the job's slot (also if already active), cancelling its timeout (TST-1/11)."""
        slot = self.slots.get(allocation_id)
        if slot is None or slot.job_id != job_id or slot.state is TaskSlotState.RELEASING:
            return False
        slot.state = TaskSlotState.ACTIVE
        slot.timeout_at = None
        return True

    def mark_slot_inactive(self, allocation_id: str, timeout_at: int) -> bool:
        """Back from ACTIVE to ALLOCATED with the timeout re-armed (on JobManager disconnect)."""
        slot = self.slots.get(allocation_id)
        if slot is None or slot.state is TaskSlotState.RELEASING:
            return False
        slot.state = TaskSlotState.ALLOCATED
        slot.timeout_at = timeout_at
        return True

    def free_slot(self, allocation_id: str) -> FreeSlotResult | None:
        """Free a slot, or start releasing it if tasks still run (TST-5, TST-9). None: unknown."""
        slot = self.slots.get(allocation_id)
        if slot is None:
            return None
        if slot.tasks:
            slot.state = TaskSlotState.RELEASING
            return FreeSlotResult(slot.index, freed=False, tasks_to_fail=tuple(slot.tasks))
        self._remove(slot)
        return FreeSlotResult(slot.index, freed=True)

    def _remove(self, slot: TaskSlot) -> None:
        del self.slots[slot.allocation_id]
        if not slot.is_dynamic:
            del self._static[slot.index]

    def add_task(self, job_id: str, allocation_id: str, attempt_id: str) -> AddTaskResult:
        """Put a task into an ACTIVE slot of its job; a duplicate attempt keeps the old one."""
        slot = self.slots.get(allocation_id)
        if slot is None:
            return AddTaskResult.UNKNOWN_ALLOCATION
        if slot.state is not TaskSlotState.ACTIVE or slot.job_id != job_id:
            return AddTaskResult.SLOT_NOT_ACTIVE
        if attempt_id in self._task_slot:
            return AddTaskResult.DUPLICATE_ATTEMPT
        slot.tasks.append(attempt_id)
        self._task_slot[attempt_id] = allocation_id
        return AddTaskResult.ADDED

    def remove_task(self, attempt_id: str) -> TaskSlot | None:
        """Forget a terminated task; returns its slot if it was RELEASING and is now freed."""
        allocation_id = self._task_slot.pop(attempt_id, None)
        if allocation_id is None:
            return None
        slot = self.slots[allocation_id]
        slot.tasks.remove(attempt_id)
        if slot.state is TaskSlotState.RELEASING and not slot.tasks:
            self._remove(slot)
            return slot
        return None

    def slot_of_task(self, attempt_id: str) -> TaskSlot | None:
        allocation_id = self._task_slot.get(attempt_id)
        return self.slots[allocation_id] if allocation_id is not None else None

    def allocated_slots(self, job_id: str) -> list[TaskSlot]:
        """The job's slots in state ALLOCATED, by index: what an offer contains (TE-13)."""
        return sorted(
            (
                s
                for s in self.slots.values()
                if s.job_id == job_id and s.state is TaskSlotState.ALLOCATED
            ),
            key=lambda s: (s.index < 0, s.index, s.allocation_id),
        )

    def active_allocation_ids(self, job_id: str | None = None) -> set[str]:
        return {
            s.allocation_id
            for s in self.slots.values()
            if s.state is TaskSlotState.ACTIVE and (job_id is None or s.job_id == job_id)
        }

    def jobs(self) -> set[str]:
        return {s.job_id for s in self.slots.values()}

    def timed_out(self, now: int) -> list[str]:
        """ALLOCATED slots whose timeout is due at event time `now`, in allocation order."""
        return [
            s.allocation_id
            for s in self.slots.values()
            if s.state is TaskSlotState.ALLOCATED
            and s.timeout_at is not None
            and s.timeout_at <= now
        ]

    def next_timeout(self) -> int | None:
        """When the first ALLOCATED slot times out (None: none will)."""
        return min(
            (
                s.timeout_at
                for s in self.slots.values()
                if s.state is TaskSlotState.ALLOCATED and s.timeout_at is not None
            ),
            default=None,
        )

    def slot_report(self) -> list[SlotStatus]:
        """One status per static index, then one per dynamic slot (TST-8)."""
        report = []
        for index in range(self.number_of_slots):
            slot = self.owner_of_index(index)
            free = SlotStatus(slot_index=index, resource_profile=self.default_slot_profile)
            report.append(free if slot is None else _status(slot))
        report.extend(_status(s) for s in self.slots.values() if s.is_dynamic)
        return report


def _status(slot: TaskSlot) -> SlotStatus:
    return SlotStatus(
        slot_index=slot.index,
        resource_profile=slot.resource_profile,
        allocation_id=slot.allocation_id,
        job_id=slot.job_id,
    )
