"""Task deployment, submission checks, execution state updates and cancellation."""

from __future__ import annotations

from pydantic import Field

from .ids import (
    AllocationID,
    ExecutionAttemptID,
    JobID,
    JobMasterFencingToken,
    ResourceID,
    SlotIndex,
)
from .model import Event, Int32
from .topics import TopicRole
from .types import (
    ExecutionState,
    InputGateDeploymentDescriptor,
    JobStatus,
    OperatorSpec,
    ResultPartitionDeploymentDescriptor,
)


class TaskDeploymentRequested(Event):
    """The JobMaster deploys an execution attempt into a slot (the task deployment descriptor)."""

    topic_role = TopicRole.TASK_EXECUTOR
    key_field = "resource_id"
    produced_by = "the JobMaster"

    job_id: JobID
    job_master_id: str = Field(description="JobMasterId of the deploying leader.")
    execution_attempt_id: ExecutionAttemptID
    vertex_id: str = Field(description="JobVertexID.")
    subtask_index: Int32 = Field(description="Index of the subtask.")
    attempt_number: Int32 = Field(description="0 for the first attempt, +1 per restart.")
    number_of_subtasks: Int32 = Field(description="Parallelism of the vertex.")
    max_parallelism: Int32 = Field(description="Number of key groups of the vertex.")
    allocation_id: AllocationID
    resource_id: ResourceID
    slot_index: SlotIndex
    invokable_class_name: str = Field(description="The code the task runs.")
    operators: list[OperatorSpec] = Field(
        default_factory=list, description="The vertex's operator chain."
    )
    inputs: list[InputGateDeploymentDescriptor] = Field(
        default_factory=list, description="The result partitions the task consumes."
    )
    outputs: list[ResultPartitionDeploymentDescriptor] = Field(
        default_factory=list, description="The result partitions the task produces (added in v2)."
    )
    job_information_job_id: str | None = Field(
        default=None,
        description="The JobID inside the deployment's JobInformation, which Flink's descriptor "
        "carries apart from its own; the TaskExecutor refuses a deployment where the two "
        "differ (TE-22). None: the same as job_id (added in v3).",
    )


class TaskSubmissionAccepted(Event):
    """The TaskExecutor took a deployment into its slot (Flink's submitTask acknowledged): the
    task runner starts only what the TaskExecutor accepted, never a refused submission."""

    topic_role = TopicRole.TASK_EXECUTOR
    key_field = "resource_id"
    produced_by = "the TaskExecutor"

    job_id: JobID
    resource_id: ResourceID
    execution_attempt_id: ExecutionAttemptID
    allocation_id: AllocationID


class TaskSubmissionRejected(Event):
    """The TaskExecutor refused a deployment (no JobManager connection, JobMasterId mismatch,
    slot not active, duplicate attempt)."""

    topic_role = TopicRole.JOB
    key_field = "job_id"
    produced_by = "the TaskExecutor"

    job_id: JobID
    resource_id: ResourceID
    execution_attempt_id: ExecutionAttemptID
    allocation_id: AllocationID
    reason: str = Field(description="Why.")


class TaskExecutionStateChanged(Event):
    """An execution attempt changed state (Flink's TaskExecutionState update)."""

    topic_role = TopicRole.JOB
    key_field = "job_id"
    produced_by = "the task runner (Spark) or the TaskExecutor"

    job_id: JobID
    job_master_id: JobMasterFencingToken = None
    execution_attempt_id: ExecutionAttemptID
    execution_state: ExecutionState = Field(description="The new state.")
    error: str | None = Field(default=None, description="Failure text when FAILED.")
    resource_id: str | None = Field(default=None, description="Where the attempt runs.")


class TaskCancellationRequested(Event):
    """The JobMaster asks the TaskExecutor to cancel an execution attempt."""

    topic_role = TopicRole.TASK_EXECUTOR
    key_field = "resource_id"
    produced_by = "the JobMaster"

    job_id: JobID
    resource_id: ResourceID
    execution_attempt_id: ExecutionAttemptID


class ResultPartitionsReleased(Event):
    """The job ended for good (FINISHED, CANCELED or FAILED), so no attempt will read its result
    partitions again: the TaskExecutor releases those its tasks produced (Flink's
    `releasePartitions` when a job terminates), and the task runner deletes their topics."""

    topic_role = TopicRole.TASK_EXECUTOR
    key_field = "resource_id"
    produced_by = "the JobMaster"

    job_id: JobID
    resource_id: ResourceID
    job_status: JobStatus = Field(description="The job's terminal status.")


class TaskFinalStateReported(Event):
    """A task told its TaskExecutor how it ended, so the TaskExecutor unregisters it from its
    slot (Flink's unregisterTaskAndNotifyFinalState); the JobMaster learns the same state
    from TaskExecutionStateChanged."""

    topic_role = TopicRole.TASK_EXECUTOR
    key_field = "resource_id"
    produced_by = "the task runner (Spark)"

    job_id: JobID
    resource_id: ResourceID
    execution_attempt_id: ExecutionAttemptID
    execution_state: ExecutionState = Field(description="FINISHED, FAILED or CANCELED.")
