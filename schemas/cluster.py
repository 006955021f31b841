"""Cluster membership: TaskManagers joining, beating and leaving; per-job RM connections."""

from __future__ import annotations

from pydantic import Field

from .ids import InstanceID, JobID, JobMasterFencingToken, ResourceID
from .model import Event, Int32
from .topics import TopicRole
from .types import AllocatedSlotInfo, ResourceProfile, SlotStatus, TaskManagerBeat

_TASK_EXECUTOR = "a TaskExecutor (the Spark runner registers its own)"


class TaskManagerRegistered(Event):
    """A TaskExecutor registered at the ResourceManager with its slots."""

    topic_role = TopicRole.RESOURCE_MANAGER
    key_field = "resource_id"
    produced_by = _TASK_EXECUTOR

    resource_id: ResourceID
    address: str = Field(description="Address the TaskExecutor is reached at.")
    number_of_slots: Int32 = Field(description="Slots in its slot table.")
    resource_profile: ResourceProfile = Field(description="Resources of each slot.")
    instance_id: InstanceID = None
    slot_report: list[SlotStatus] = Field(
        default_factory=list,
        description="What the TaskExecutor holds as it registers (after a crash: nothing); the "
        "ResourceManager takes its word over its own view of the slots.",
    )


class TaskManagerHeartbeat(Event):
    """A TaskExecutor is alive; its slot report says which slots it holds for which job."""

    topic_role = TopicRole.RESOURCE_MANAGER
    key_field = "resource_id"
    produced_by = _TASK_EXECUTOR

    resource_id: ResourceID
    slot_report: list[SlotStatus] = Field(default_factory=list, description="Status of every slot.")
    instance_id: InstanceID = None


MAX_BEATS_PER_RECORD = 2_000
"""The most TaskExecutor beats one `TaskManagerHeartbeatsReported` carries: ~100 kB of Avro,
well inside Kafka's default 1 MB record, and a bounded slice of the ResourceManager's work
per input. A runner with more TaskExecutors writes several records per beat."""


class TaskManagerHeartbeatsReported(Event):
    """A runner's TaskExecutors are alive: one record carries the beat of each of its current
    instances, so a beat that changes nothing costs the ResourceManager's partition a fraction
    of a record instead of one per TaskExecutor. Each beat means what a `TaskManagerHeartbeat`
    of that instance at this event time means."""

    topic_role = TopicRole.RESOURCE_MANAGER
    key_field = "runner_id"
    produced_by = "a runner, for the TaskExecutors it hosts"

    runner_id: str = Field(description="The runner whose TaskExecutors beat (the record's key).")
    beats: list[TaskManagerBeat] = Field(
        default_factory=list,
        description=f"One per TaskExecutor instance, at most {MAX_BEATS_PER_RECORD}.",
    )


class TaskManagerLost(Event):
    """A TaskExecutor is gone (heartbeat timeout, shutdown); its slots and tasks are lost."""

    topic_role = TopicRole.RESOURCE_MANAGER
    key_field = "resource_id"
    produced_by = (
        "the ResourceManager (heartbeat timeout), an operator, or the TaskExecutor itself as it "
        "shuts down (Flink's disconnectTaskManager)"
    )

    resource_id: ResourceID
    cause: str = Field(description="Why it is considered lost.")
    instance_id: InstanceID = Field(
        default=None,
        description="The instance that is gone (a TaskExecutor shutting down names its own): "
        "the loss of an earlier instance changes nothing. None: whichever is registered, if it "
        "registered before this was written.",
    )


class ResourceManagerConnected(Event):
    """The job's JobMaster is connected to the ResourceManager: stashed requests can go."""

    topic_role = TopicRole.JOB
    key_field = "job_id"
    produced_by = "the ResourceManager"

    job_id: JobID
    resource_manager_id: str = Field(description="Fencing token of the ResourceManager leader.")


class ResourceManagerDisconnected(Event):
    """The job's JobMaster lost its ResourceManager connection."""

    topic_role = TopicRole.JOB
    key_field = "job_id"
    produced_by = "the ResourceManager or the JobMaster"

    job_id: JobID
    resource_manager_id: str = Field(description="Fencing token of the ResourceManager leader.")
    cause: str = Field(description="Why the connection ended.")


class TaskManagerRegistrationAccepted(Event):
    """The ResourceManager registered the TaskExecutor; it may now take slot requests (TE-1)."""

    topic_role = TopicRole.TASK_EXECUTOR
    key_field = "resource_id"
    produced_by = "the ResourceManager"

    resource_id: ResourceID
    resource_manager_id: str = Field(description="Fencing token of the ResourceManager leader.")
    number_of_slots: Int32 = Field(description="Slots of the TaskExecutor's slot table.")
    resource_profile: ResourceProfile = Field(description="Default profile of each slot.")
    instance_id: InstanceID = None


class TaskManagerConnectionClosed(Event):
    """The ResourceManager closed its connection to the TaskExecutor (Flink's
    `closeTaskManagerConnection`: it was lost, or it beats without being registered): the
    TaskExecutor stops beating to it and takes no slot requests from it until it registers
    again."""

    topic_role = TopicRole.TASK_EXECUTOR
    key_field = "resource_id"
    produced_by = "the ResourceManager"

    resource_id: ResourceID
    resource_manager_id: str = Field(description="Fencing token of the ResourceManager leader.")
    cause: str = Field(description="Why the connection was closed.")
    instance_id: InstanceID = None
    replaced_by_instance_id: str | None = Field(
        default=None,
        description="The instance registered in its place, when another registration under "
        "its ResourceID replaced it (null: lost, not replaced). A runner that did not make "
        "that instance stops: another process holds its TaskExecutor.",
    )


class JobMasterRegistrationRequested(Event):
    """A TaskExecutor holding slots for the job registers at its JobMaster (registerTaskManager)."""

    topic_role = TopicRole.JOB
    key_field = "job_id"
    produced_by = "the TaskExecutor"

    job_id: JobID
    job_master_id: JobMasterFencingToken = None
    resource_id: ResourceID
    address: str = Field(default="", description="Address of the TaskExecutor.")


class JobMasterRegistrationAccepted(Event):
    """The JobMaster registered the TaskExecutor: the TaskExecutor offers its slots for the job."""

    topic_role = TopicRole.TASK_EXECUTOR
    key_field = "resource_id"
    produced_by = "the JobMaster"

    job_id: JobID
    job_master_id: str = Field(description="JobMasterId the TaskExecutor is now connected to.")
    resource_id: ResourceID


class JobMasterRegistrationDeclined(Event):
    """The JobMaster refused the TaskExecutor's registration (no leader, stale JobMasterId)."""

    topic_role = TopicRole.TASK_EXECUTOR
    key_field = "resource_id"
    produced_by = "the JobMaster"

    job_id: JobID
    resource_id: ResourceID
    reason: str = Field(description="Why.")


class TaskManagerDisconnected(Event):
    """The job lost a TaskManager (heartbeat timeout, TaskExecutor lost): its slots are released
    and the tasks on them fail (disconnectTaskManager -> releaseTaskManager)."""

    topic_role = TopicRole.JOB
    key_field = "job_id"
    produced_by = "the ResourceManager or the TaskExecutor"

    job_id: JobID
    resource_id: ResourceID
    cause: str = Field(description="Why.")


class JobManagerDisconnected(Event):
    """The job's JobMaster dropped its connection to the TaskExecutor (lost leadership)."""

    topic_role = TopicRole.TASK_EXECUTOR
    key_field = "resource_id"
    produced_by = "the JobMaster"

    job_id: JobID
    job_master_id: str = Field(description="The JobMasterId that disconnected.")
    resource_id: ResourceID
    cause: str = Field(description="Why.")


class JobMasterHeartbeat(Event):
    """The JobMaster's heartbeat to a TaskExecutor, carrying the slots it believes it holds
    there (AllocatedSlotReport), so both sides reconcile (TE-15)."""

    topic_role = TopicRole.TASK_EXECUTOR
    key_field = "resource_id"
    produced_by = "the JobMaster's SlotPool"

    job_id: JobID
    job_master_id: str = Field(description="JobMasterId of the sender.")
    resource_id: ResourceID
    allocated_slots: list[AllocatedSlotInfo] = Field(
        default_factory=list, description="The job's slots on this TaskExecutor."
    )


class JobMasterHeartbeatTimedOut(Event):
    """The TaskExecutor heard no heartbeat from the job's JobMaster within the heartbeat
    timeout: it disconnects from that JobMaster (as TE-16) and registers at it again (TE-17)."""

    topic_role = TopicRole.TASK_EXECUTOR
    key_field = "resource_id"
    produced_by = "the TaskExecutor's heartbeat manager (the Spark runner, or an operator)"

    job_id: JobID
    job_master_id: str = Field(description="JobMasterId of the JobMaster that went quiet.")
    resource_id: ResourceID


class ResourceManagerHeartbeatTimedOut(Event):
    """The TaskExecutor heard no heartbeat from the ResourceManager within the heartbeat
    timeout: it drops the connection, taking no slot requests until a registration is accepted
    again (TE-18); registering again is the TaskExecutor process's part."""

    topic_role = TopicRole.TASK_EXECUTOR
    key_field = "resource_id"
    produced_by = "the TaskExecutor's heartbeat manager (the Spark runner, or an operator)"

    resource_id: ResourceID
    resource_manager_id: str = Field(description="Fencing token of the ResourceManager leader.")
