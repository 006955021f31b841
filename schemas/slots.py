"""Slot requests, allocations and offers between SlotPool, ResourceManager and TaskExecutor."""

from __future__ import annotations

from pydantic import Field

from .ids import AllocationID, JobID, JobMasterFencingToken, ResourceID, SlotIndex, SlotRequestId
from .model import Event
from .topics import TopicRole
from .types import ResourceProfile

_SLOT_POOL = "the job's SlotPool"
_TASK_EXECUTOR = "the TaskExecutor's slot table"


class SlotRequested(Event):
    """The SlotPool asks the ResourceManager for a new slot under a fresh AllocationID."""

    topic_role = TopicRole.RESOURCE_MANAGER
    key_field = "job_id"
    produced_by = _SLOT_POOL

    job_id: JobID
    job_master_id: JobMasterFencingToken = None
    slot_request_id: SlotRequestId
    allocation_id: AllocationID
    resource_profile: ResourceProfile = Field(description="Resources the slot must have.")
    batch_request: bool = Field(
        default=False, description="Batch requests ignore allocation failures and time out later."
    )
    timeout_ms: int = Field(description="Time the request may stay pending.")
    blocked_resource_ids: list[ResourceID] = Field(
        default_factory=list,
        description="TaskExecutors the job takes no slot of (a deployment there was not "
        "acknowledged in time): the ResourceManager serves the request elsewhere.",
    )
    principal: str | None = Field(
        default=None,
        description="The job's tenant (its JobSubmitted's principal; None: 'anonymous'): the "
        "ResourceManager shares slots fairly between tenants and holds each to its limits.",
    )


class SlotRequestRefused(Event):
    """The ResourceManager refused a slot request: its job's tenant is over one of its limits
    (`jobledger.principal.*`). The pool fails the request, and with it the job's task."""

    topic_role = TopicRole.JOB
    key_field = "job_id"
    produced_by = "the ResourceManager"

    job_id: JobID
    allocation_id: AllocationID
    cause: str = Field(description="Which limit, and the tenant's count against it.")


class SlotRequestCancelled(Event):
    """A pending slot request was withdrawn; the ResourceManager forgets it."""

    topic_role = TopicRole.RESOURCE_MANAGER
    key_field = "job_id"
    produced_by = _SLOT_POOL

    job_id: JobID
    slot_request_id: SlotRequestId
    allocation_id: AllocationID
    cause: str = Field(description="Why it was cancelled.")


class SlotAllocationRequested(Event):
    """The ResourceManager asks a TaskExecutor to allocate one of its slots for a job."""

    topic_role = TopicRole.TASK_EXECUTOR
    key_field = "resource_id"
    produced_by = "the ResourceManager"

    resource_id: ResourceID
    slot_index: SlotIndex
    allocation_id: AllocationID
    job_id: JobID
    resource_profile: ResourceProfile = Field(description="Resources requested.")
    resource_manager_id: str = Field(description="Fencing token of the ResourceManager leader.")
    job_master_id: JobMasterFencingToken = None


class SlotAllocated(Event):
    """The TaskExecutor allocated the slot for the job (it will offer it next)."""

    topic_role = TopicRole.RESOURCE_MANAGER
    key_field = "resource_id"
    produced_by = _TASK_EXECUTOR

    resource_id: ResourceID
    slot_index: SlotIndex
    allocation_id: AllocationID
    job_id: JobID


class SlotAllocationFailed(Event):
    """The TaskExecutor refused an allocation, e.g. the slot is occupied by another job."""

    topic_role = TopicRole.RESOURCE_MANAGER
    key_field = "resource_id"
    produced_by = _TASK_EXECUTOR

    resource_id: ResourceID
    slot_index: SlotIndex
    allocation_id: AllocationID
    job_id: JobID
    reason: str = Field(description="Why.")


class SlotOffered(Event):
    """A TaskExecutor offers an allocated slot to the job's SlotPool (Flink's SlotOffer)."""

    topic_role = TopicRole.JOB
    key_field = "job_id"
    produced_by = _TASK_EXECUTOR

    job_id: JobID
    job_master_id: JobMasterFencingToken = None
    resource_id: ResourceID
    slot_index: SlotIndex
    allocation_id: AllocationID
    resource_profile: ResourceProfile = Field(description="Resources of the slot.")


class SlotOfferAccepted(Event):
    """The SlotPool accepted the offer; the TaskExecutor marks the slot ACTIVE."""

    topic_role = TopicRole.TASK_EXECUTOR
    key_field = "resource_id"
    produced_by = _SLOT_POOL

    job_id: JobID
    job_master_id: JobMasterFencingToken = None
    resource_id: ResourceID
    slot_index: SlotIndex
    allocation_id: AllocationID


class SlotOfferRejected(Event):
    """The SlotPool rejected the offer; the TaskExecutor frees the slot."""

    topic_role = TopicRole.TASK_EXECUTOR
    key_field = "resource_id"
    produced_by = _SLOT_POOL

    job_id: JobID
    job_master_id: JobMasterFencingToken = None
    resource_id: ResourceID
    slot_index: SlotIndex
    allocation_id: AllocationID
    reason: str = Field(description="Why the offer was rejected.")


class SlotOfferFailed(Event):
    """The TaskExecutor's offer of the job's slots got no answer from the JobMaster (Flink's
    failed `offerSlots` future): on a timeout the TaskExecutor offers again (TE-9); on any
    other error it frees every slot of that offer and gives them back (TE-10)."""

    topic_role = TopicRole.TASK_EXECUTOR
    key_field = "resource_id"
    produced_by = "the TaskExecutor's RPC layer (the Spark runner, or an operator)"

    job_id: JobID
    job_master_id: JobMasterFencingToken = None
    resource_id: ResourceID
    allocation_ids: list[str] = Field(description="The AllocationIDs the failed offer held.")
    timed_out: bool = Field(description="Whether the offer timed out (else another error).")
    cause: str = Field(description="The error the offer failed with.")


class AllocationFailed(Event):
    """An allocation failed (Flink's failAllocation): its request or slot is given up."""

    topic_role = TopicRole.JOB
    key_field = "job_id"
    produced_by = "the ResourceManager or a TaskExecutor"

    job_id: JobID
    job_master_id: JobMasterFencingToken = None
    allocation_id: AllocationID
    cause: str = Field(description="Why it failed.")
    resource_id: str | None = Field(
        default=None, description="The TaskExecutor reporting it (failSlot); null from the RM."
    )
    unfulfillable: bool = Field(
        default=False, description="The request can never be met; fails batch requests too."
    )


class SlotFreeRequested(Event):
    """The SlotPool gives a slot back: the TaskExecutor frees it (Flink's freeSlot call)."""

    topic_role = TopicRole.TASK_EXECUTOR
    key_field = "resource_id"
    produced_by = _SLOT_POOL

    job_id: JobID
    resource_id: ResourceID
    allocation_id: AllocationID
    cause: str = Field(description="Why the slot is released.")


class SlotFreed(Event):
    """A TaskExecutor freed a slot; the ResourceManager may hand it out again."""

    topic_role = TopicRole.RESOURCE_MANAGER
    key_field = "resource_id"
    produced_by = _TASK_EXECUTOR

    resource_id: ResourceID
    slot_index: SlotIndex
    allocation_id: AllocationID
    job_id: str | None = Field(default=None, description="JobID it was allocated to.")
    cause: str = Field(description="Why it was freed.")


class SlotRequestTimedOut(Event):
    """A pending slot request was not fulfilled in time (decided on a TimerFired)."""

    topic_role = TopicRole.JOB
    key_field = "job_id"
    produced_by = _SLOT_POOL

    job_id: JobID
    slot_request_id: SlotRequestId
    allocation_id: str | None = Field(
        default=None, description="Its AllocationID; null if it never reached the RM."
    )


class IdleSlotTimedOut(Event):
    """An available slot stayed unused past the idle timeout and is released."""

    topic_role = TopicRole.JOB
    key_field = "job_id"
    produced_by = _SLOT_POOL

    job_id: JobID
    resource_id: ResourceID
    allocation_id: AllocationID


class NewAllocatedSlotRequested(Event):
    """The scheduler asks the job's SlotPool for a new slot (Flink's requestNewAllocatedSlot,
    or requestNewAllocatedBatchSlot when `batch_request`)."""

    topic_role = TopicRole.JOB
    key_field = "job_id"
    produced_by = "the JobMaster's scheduler"

    job_id: JobID
    slot_request_id: SlotRequestId
    resource_profile: ResourceProfile = Field(
        default_factory=ResourceProfile, description="Resources the slot must have."
    )
    batch_request: bool = Field(
        default=False, description="Batch requests time out only while no slot could serve them."
    )
    timeout_ms: int = Field(
        default=300_000, description="Streaming requests fail when pending this long."
    )


class AvailableSlotAllocationRequested(Event):
    """The scheduler takes an available slot of the pool for a request (allocateAvailableSlot)."""

    topic_role = TopicRole.JOB
    key_field = "job_id"
    produced_by = "the JobMaster's scheduler"

    job_id: JobID
    slot_request_id: SlotRequestId
    allocation_id: AllocationID


class SlotRequestReleased(Event):
    """The scheduler gives up a request (releaseSlot): a pending one is cancelled, a fulfilled
    one returns its slot to the pool for the next waiting request."""

    topic_role = TopicRole.JOB
    key_field = "job_id"
    produced_by = "the JobMaster's scheduler"

    job_id: JobID
    slot_request_id: SlotRequestId
    cause: str = Field(default="released by the scheduler", description="Why.")


class SlotRequestFulfilled(Event):
    """A request of the pool got its slot."""

    topic_role = TopicRole.JOB
    key_field = "job_id"
    produced_by = _SLOT_POOL

    job_id: JobID
    slot_request_id: SlotRequestId
    allocation_id: AllocationID
    resource_id: ResourceID
    slot_index: SlotIndex


class SlotRequestFailed(Event):
    """A request of the pool failed: its allocation failed, or it was released while pending."""

    topic_role = TopicRole.JOB
    key_field = "job_id"
    produced_by = _SLOT_POOL

    job_id: JobID
    slot_request_id: SlotRequestId
    allocation_id: str | None = Field(default=None, description="Its AllocationID, if it had one.")
    cause: str = Field(description="Why.")


class BatchSlotRequestTimeoutCheckDisabled(Event):
    """Someone else took over the batch request timeout check
    (disableBatchSlotRequestTimeoutCheck)."""

    topic_role = TopicRole.JOB
    key_field = "job_id"
    produced_by = "the JobMaster's scheduler"

    job_id: JobID


class LastSlotOfTaskManagerFreed(Event):
    """The pool holds no slot of this TaskManager any more (failAllocation's Optional.of(tm))."""

    topic_role = TopicRole.JOB
    key_field = "job_id"
    produced_by = _SLOT_POOL

    job_id: JobID
    resource_id: ResourceID
