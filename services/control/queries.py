"""The control plane's query surface: what read models (projections/) may ask a reducer, and
the frozen records it answers with, each field documented in one line as Flink documents its
REST responses.

A reducer's fields are its own to rename and re-index; a read model that read them broke with
every such change. So a reducer answers questions through methods marked `@query`, which
copy what they tell into these records, and tests/system/test_layers.py holds every projection to
those methods: a reducer may change its state's shape as long as its queries answer alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from jobledger.schemas.types import JobStatus, ResourceProfile

from .slot_states import SlotState, TaskSlotState

Q = TypeVar("Q", bound=Callable[..., object])


def query(method: Q) -> Q:
    """Mark a method (or a property's getter) as part of its reducer's query surface: it
    changes nothing and answers in records or plain values. The mark is read from the source
    by tests/system/test_layers.py; at run time the method is left as it is."""
    return method


# -- SlotPool ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SlotInfo:
    """A slot the job's SlotPool holds (Flink's SlotInfo with its pool's bookkeeping)."""

    allocation_id: str
    """The AllocationID the TaskExecutor offered the slot under."""
    resource_id: str
    """The TaskExecutor (its ResourceID) the slot is on."""
    slot_index: int
    """The slot's index in that TaskExecutor's slot table (Flink's physical slot number)."""
    resource_profile: ResourceProfile
    """The profile the slot was offered with."""
    slot_request_id: str | None
    """The request the slot is allocated to; None while it is available."""
    available_since: int | None
    """Event time since which an available slot has been idle; None while allocated."""


@dataclass(frozen=True)
class PendingRequestInfo:
    """A slot request the SlotPool is waiting on (Flink's PendingRequest)."""

    slot_request_id: str
    """The scheduler's SlotRequestId."""
    allocation_id: str | None
    """The AllocationID it was sent to the ResourceManager under; None while stashed."""
    resource_profile: ResourceProfile
    """The profile a slot must match to serve it."""
    at_resource_manager: bool
    """Sent to the ResourceManager (True) or stashed until one is connected (False)."""


# -- ResourceManager --------------------------------------------------------------------


@dataclass(frozen=True)
class TaskManagerSlot:
    """One slot of a registered TaskExecutor as the ResourceManager's SlotManager sees it."""

    state: SlotState
    """FREE, PENDING (picked for a request, not yet allocated), ALLOCATED or OCCUPIED."""
    allocation_id: str | None
    """The allocation it is pending or allocated for; None while FREE."""
    job_id: str | None
    """The job it is pending or allocated for; None while FREE."""


@dataclass(frozen=True)
class TaskManagerInfo:
    """A TaskExecutor registered at the ResourceManager (Flink's REST TaskManagerInfo)."""

    resource_id: str
    """Its ResourceID."""
    address: str
    """Where it said it can be reached when it registered."""
    resource_profile: ResourceProfile
    """The profile of each of its slots."""
    last_heartbeat: int
    """Event time of its instance's last heartbeat (or of its registration)."""
    slots: tuple[TaskManagerSlot, ...]
    """Its slots, by index."""


@dataclass(frozen=True)
class PendingSlotRequestInfo:
    """A job's slot request open at the ResourceManager (Flink's PendingSlotRequest)."""

    job_id: str
    """The job that asked."""
    slot_request_id: str
    """The job's SlotRequestId."""
    allocation_id: str
    """The AllocationID the slot is to be allocated under."""
    assigned: tuple[str, int] | None
    """(ResourceID, slot index) picked for it; None while it is queued for a free slot."""


# -- TaskExecutor -----------------------------------------------------------------------


@dataclass(frozen=True)
class TaskSlotInfo:
    """A slot of a TaskExecutor's own TaskSlotTable (Flink's TaskSlot)."""

    index: int
    """Its index in the table; negative for a dynamic slot, which has none."""
    allocation_id: str
    """The AllocationID it is allocated under."""
    job_id: str
    """The job it is allocated to."""
    state: TaskSlotState
    """ALLOCATED, ACTIVE or RELEASING."""
    tasks: int
    """How many tasks run in it."""


# -- JobMaster --------------------------------------------------------------------------


@dataclass(frozen=True)
class JobMasterInfo:
    """A job as its JobMaster holds it (the part of Flink's JobDetailsInfo it owns)."""

    job_id: str
    """The JobID."""
    status: JobStatus
    """Where the job is in its lifecycle."""
    job_master_id: str | None
    """The leader's JobMasterId (the fencing token); None without a leader."""
    restarts: int
    """How many times the job has been restarted."""
    failure_cause: str | None
    """Why the job last failed or restarted; None if it never did."""
    restart_at: int | None
    """Event time at which the earliest waiting restart is due; None if none waits."""
    failures_counted: int
    """Failures the job's restart strategy has counted (it decides on these)."""


@dataclass(frozen=True)
class PendingRestartInfo:
    """A failover waiting to restart its subtasks (Flink's restartTasksWithDelay)."""

    at: int
    """Event time at which the restart is due."""
    versions: tuple[tuple[str, int, int], ...]
    """(job vertex, subtask, version) of every subtask it restarts, sorted: a subtask is
    restarted only if its version is still this one (Flink's ExecutionVertexVersion)."""
