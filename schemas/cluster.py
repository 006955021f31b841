"""Cluster membership: TaskManagers joining, beating and leaving; per-job RM connections."""

from __future__ import annotations

from pydantic import Field

from .ids import JobID, ResourceID
from .model import Event, Int32
from .topics import TopicRole
from .types import ResourceProfile, SlotStatus

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


class TaskManagerHeartbeat(Event):
    """A TaskExecutor is alive; its slot report says which slots it holds for which job."""

    topic_role = TopicRole.RESOURCE_MANAGER
    key_field = "resource_id"
    produced_by = _TASK_EXECUTOR

    resource_id: ResourceID
    slot_report: list[SlotStatus] = Field(default_factory=list, description="Status of every slot.")


class TaskManagerLost(Event):
    """A TaskExecutor is gone (heartbeat timeout, shutdown); its slots and tasks are lost."""

    topic_role = TopicRole.RESOURCE_MANAGER
    key_field = "resource_id"
    produced_by = "the ResourceManager (heartbeat timeout) or an operator"

    resource_id: ResourceID
    cause: str = Field(description="Why it is considered lost.")


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
