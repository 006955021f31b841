"""Records and enums shared by several events, named after their Flink counterparts."""

from __future__ import annotations

from pydantic import Field

from .ids import SlotIndex
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


class InputGateDeploymentDescriptor(Record):
    """Which upstream result partitions a deployed subtask consumes."""

    source_vertex_id: str = Field(description="JobVertexID of the producer.")
    distribution_pattern: DistributionPattern = Field(description="ALL_TO_ALL or POINTWISE.")
    result_partition_type: ResultPartitionType = Field(
        default=ResultPartitionType.PIPELINED, description="PIPELINED or BLOCKING."
    )
    consumed_subtask_indexes: list[Int32] = Field(
        default_factory=list, description="Producer subtasks whose output this subtask reads."
    )


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
