"""Records and enums shared by several events, named after their Flink counterparts."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from .ids import InstanceID, ResourceID, SlotIndex
from .model import CatalogEnum, Int32, Record


class ResourceProfileKind(CatalogEnum):
    """Flink's special profiles: UNKNOWN requests match any slot, ANY slots fit any request."""

    SPECIFIED = "SPECIFIED"
    ANY = "ANY"
    UNKNOWN = "UNKNOWN"


class ResourceProfile(Record):
    """Resources of a slot or a slot request (Flink's ResourceProfile, the fields used here)."""

    kind: ResourceProfileKind = Field(
        default=ResourceProfileKind.UNKNOWN,
        description="SPECIFIED uses the fields below; UNKNOWN and ANY ignore them.",
    )
    cpu_cores: float = Field(default=0.0, description="CPU cores.")
    task_heap_memory_mb: int = Field(default=0, description="Task heap memory, MiB.")
    managed_memory_mb: int = Field(default=0, description="Managed memory, MiB.")


class SlotStatus(Record):
    """One slot in a TaskExecutor's slot report (Flink's SlotStatus)."""

    slot_index: SlotIndex
    resource_profile: ResourceProfile = Field(description="The slot's resources.")
    allocation_id: str | None = Field(default=None, description="Allocation, if allocated.")
    job_id: str | None = Field(default=None, description="Job the slot is allocated to, if any.")


class TaskManagerBeat(Record):
    """One TaskExecutor instance's beat inside a runner's `TaskManagerHeartbeatsReported`."""

    resource_id: ResourceID
    instance_id: InstanceID = None


class AllocatedSlotInfo(Record):
    """One slot a JobMaster holds on a TaskExecutor (Flink's AllocatedSlotInfo)."""

    slot_index: SlotIndex
    allocation_id: str = Field(description="AllocationID of the slot.")


class DistributionPattern(CatalogEnum):
    """How producer subtasks connect to consumer subtasks."""

    ALL_TO_ALL = "ALL_TO_ALL"
    POINTWISE = "POINTWISE"
    UNKNOWN = "UNKNOWN"


class ResultPartitionType(CatalogEnum):
    """BLOCKING results are consumed after the producer finished; PIPELINED ones while it runs."""

    PIPELINED = "PIPELINED"
    BLOCKING = "BLOCKING"
    UNKNOWN = "UNKNOWN"


class JobEdge(Record):
    """An input of a JobVertex: the upstream vertex and how its result is distributed."""

    source_vertex_id: str = Field(description="JobVertexID of the producing vertex.")
    distribution_pattern: DistributionPattern = Field(description="ALL_TO_ALL or POINTWISE.")
    result_partition_type: ResultPartitionType = Field(
        default=ResultPartitionType.PIPELINED, description="PIPELINED or BLOCKING."
    )


class OperatorSpec(Record):
    """One operator of a vertex's chain: a built-in name or a `module:function` reference."""

    name: str = Field(description="Built-in operator name or `module:function`.")
    config: dict[str, str] = Field(default_factory=dict, description="Operator parameters.")


class JobVertex(Record):
    """A vertex of the JobGraph (Flink's JobVertex)."""

    vertex_id: str = Field(description="JobVertexID.")
    name: str = Field(description="Human-readable vertex name.")
    invokable_class_name: str = Field(description="Reference to the code the vertex runs.")
    parallelism: Int32 = Field(description="Number of parallel subtasks.")
    max_parallelism: Int32 = Field(
        default=-1, description="Number of key groups; -1 lets Flink's default rule decide."
    )
    inputs: list[JobEdge] = Field(default_factory=list, description="Upstream edges, in order.")
    operators: list[OperatorSpec] = Field(
        default_factory=list, description="The chain of operators the vertex runs."
    )
    resource_profile: ResourceProfile = Field(
        default_factory=ResourceProfile, description="Resources each subtask's slot needs."
    )


class ScheduleMode(CatalogEnum):
    """EAGER deploys every vertex at once; LAZY_FROM_SOURCES starts from the sources."""

    EAGER = "EAGER"
    LAZY_FROM_SOURCES = "LAZY_FROM_SOURCES"
    LAZY_FROM_SOURCES_WITH_BATCH_SLOT_REQUEST = "LAZY_FROM_SOURCES_WITH_BATCH_SLOT_REQUEST"
    UNKNOWN = "UNKNOWN"


class RestartStrategyKind(CatalogEnum):
    """Flink's restart strategies; CLUSTER_DEFAULT: the job configures none, so the cluster's
    `restart-strategy` applies (RS-10)."""

    NONE = "NONE"
    FIXED_DELAY = "FIXED_DELAY"
    FAILURE_RATE = "FAILURE_RATE"
    UNKNOWN = "UNKNOWN"
    CLUSTER_DEFAULT = "CLUSTER_DEFAULT"


class RestartStrategy(Record):
    """Restart strategy of a job; the fields that do not apply to `kind` are ignored. A job's
    own strategy, NONE included, beats the cluster's; left out, the cluster's applies."""

    kind: RestartStrategyKind = Field(
        default=RestartStrategyKind.CLUSTER_DEFAULT, description="Strategy."
    )
    restart_attempts: Int32 = Field(default=0, description="FIXED_DELAY: attempts allowed.")
    delay_ms: int = Field(default=0, description="Delay between a failure and the restart.")
    max_failures_per_interval: Int32 = Field(
        default=0, description="FAILURE_RATE: failures allowed per interval."
    )
    failure_rate_interval_ms: int = Field(default=0, description="FAILURE_RATE: the interval.")


class JobStatus(CatalogEnum):
    """Flink's JobStatus."""

    INITIALIZING = "INITIALIZING"
    CREATED = "CREATED"
    RUNNING = "RUNNING"
    FAILING = "FAILING"
    FAILED = "FAILED"
    CANCELLING = "CANCELLING"
    CANCELED = "CANCELED"
    FINISHED = "FINISHED"
    RESTARTING = "RESTARTING"
    SUSPENDED = "SUSPENDED"
    RECONCILING = "RECONCILING"
    UNKNOWN = "UNKNOWN"


class ExecutionState(CatalogEnum):
    """Flink's ExecutionState of one execution attempt."""

    CREATED = "CREATED"
    SCHEDULED = "SCHEDULED"
    DEPLOYING = "DEPLOYING"
    INITIALIZING = "INITIALIZING"
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    CANCELING = "CANCELING"
    CANCELED = "CANCELED"
    FAILED = "FAILED"
    RECONCILING = "RECONCILING"
    UNKNOWN = "UNKNOWN"


class ConsumedPartitionGroup(Record):
    """The producer subtasks whose result partitions a consumer subtask reads, as the one
    contiguous range every input has (Flink's ConsumedPartitionGroup): all producers for
    ALL_TO_ALL, shared by every consumer subtask; a slice of them for POINTWISE. Its size does
    not depend on the parallelism, so no deployment grows with its producers (a list of them
    made the deployments of a P x P ALL_TO_ALL job P^2 bytes on the log)."""

    first_subtask_index: Int32 = Field(description="The first producer subtask read.")
    number_of_subtasks: Int32 = Field(description="How many producer subtasks are read, from it.")


class InputGateDeploymentDescriptor(Record):
    """Which upstream result partitions a deployed subtask consumes."""

    source_vertex_id: str = Field(description="JobVertexID of the producer.")
    distribution_pattern: DistributionPattern = Field(description="ALL_TO_ALL or POINTWISE.")
    result_partition_type: ResultPartitionType = Field(
        default=ResultPartitionType.PIPELINED, description="PIPELINED or BLOCKING."
    )
    consumed_subtask_indexes: list[Int32] = Field(
        default_factory=list,
        description="Producer subtasks whose output this subtask reads, one by one, as "
        "deployments before v4 of TaskDeploymentRequested listed them; read as "
        "`consumed_partition_group` when they are a range (every one jobledger wrote was). "
        "Empty in today's deployments.",
    )
    consumed_partition_group: ConsumedPartitionGroup | None = Field(
        default=None,
        description="The producer subtasks this subtask reads, as one range (added in v4 of "
        "TaskDeploymentRequested). None: `consumed_subtask_indexes` lists them.",
    )

    @model_validator(mode="before")
    @classmethod
    def _validated_upcast(cls, fields: Any) -> Any:
        """A validated gate (JSON, a test's constructor) is upcast as a decoded one is."""
        if not isinstance(fields, dict):
            return fields
        upcast = upcast_input_gate(fields)
        group = upcast.get("consumed_partition_group")
        if isinstance(group, dict):
            upcast["consumed_partition_group"] = ConsumedPartitionGroup(**group)
        return upcast

    @staticmethod
    def __upcast__(fields: dict[str, Any]) -> dict[str, Any]:
        """What `construct.from_avro` applies to a decoded record (see `upcast_input_gate`)."""
        return upcast_input_gate(fields)

    @property
    def consumed_subtasks(self) -> range | list[int]:
        """The producer subtasks read, in order, however the deployment wrote them."""
        group = self.consumed_partition_group
        if group is None:
            return self.consumed_subtask_indexes
        first = group.first_subtask_index
        return range(first, first + group.number_of_subtasks)


def upcast_input_gate(fields: dict[str, Any]) -> dict[str, Any]:
    """An input gate as today's deployments write it: producers listed one by one (every
    deployment before v4) that form a range become its ConsumedPartitionGroup, so an old
    log's deployments equal the ones today's reducers derive for it (replay --verify) and a
    reader needs one form only. A list that is no range is kept as it is: nothing is lost."""
    listed = fields.get("consumed_subtask_indexes")
    if not listed or fields.get("consumed_partition_group") is not None:
        return fields
    first = listed[0]
    if any(index != first + n for n, index in enumerate(listed)):
        return fields
    group = {"first_subtask_index": first, "number_of_subtasks": len(listed)}
    return {**fields, "consumed_subtask_indexes": [], "consumed_partition_group": group}


class ResultPartitionDeploymentDescriptor(Record):
    """A result partition a deployed subtask produces: who consumes it and how the records
    are routed to the consumer's subtasks (by key group when the consumer is keyed)."""

    consumer_vertex_id: str = Field(description="JobVertexID of the consumer.")
    distribution_pattern: DistributionPattern = Field(description="ALL_TO_ALL or POINTWISE.")
    result_partition_type: ResultPartitionType = Field(
        default=ResultPartitionType.PIPELINED, description="PIPELINED or BLOCKING."
    )
    number_of_consumer_subtasks: Int32 = Field(description="Parallelism of the consumer.")
    consumer_max_parallelism: Int32 = Field(description="Key groups of the consumer.")


class KeyGroupRange(Record):
    """An inclusive range of key groups (Flink's KeyGroupRange)."""

    start_key_group: Int32 = Field(description="First key group, inclusive.")
    end_key_group: Int32 = Field(description="Last key group, inclusive.")


class OwnerKind(CatalogEnum):
    """Which kind of reducer owns a timer or a rejection; selects the topic it is written to."""

    JOB = "JOB"
    RESOURCE_MANAGER = "RESOURCE_MANAGER"
    TASK_EXECUTOR = "TASK_EXECUTOR"
    UNKNOWN = "UNKNOWN"
