"""The REST API's answers as typed messages, named after Flink's (its `rest.messages` classes:
ClusterOverviewWithVersion, MultipleJobsDetails, JobDetailsInfo, ...), so the OpenAPI
document says every field a client reads. Field names are Flink's JSON names (aliases where
they hold a hyphen); jobledger's additions are declared beside them. The answers themselves
are built in `jobs.py`, `exceptions.py`, `task_managers.py` and `cluster_overview.py`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Message(BaseModel):
    model_config = ConfigDict(populate_by_name=True)


class AsOf(Message):
    """The point of the log an answer reflects."""

    position: str
    records: int = Field(description="How many records of the log the answer reflects.")
    offsets: dict[str, int] = Field(description="ROLE/PARTITION -> the last offset reflected.")


DECIDED = (
    "(jobledger) whether the services have decided the job's status; false: it is submitted "
    "and no services have read it yet (state INITIALIZING)"
)


def field(name: str, description: str | None = None) -> Any:
    """A field whose JSON name is Flink's `name` (with its hyphen)."""
    return Field(alias=name, description=description)


class RecordWriter(Message):
    """(jobledger) Who wrote a record, as its signature and the keyring say
    (projections/log/writers.py): a principal and its role, or none (unsigned, refused, or no
    keyring to check it)."""

    principal: str | None
    role: str | None
    key_id: str | None = Field(description="the key the record's signer header names")
    refused: str | None = Field(description="why the keyring refuses the signature")


class StatusCause(Message):
    type: str = Field(description="the request's event type")
    writer: RecordWriter


class StatusChange(Message):
    """(jobledger) One status change of the job: who wrote it, and whose request caused it."""

    status: str
    timestamp: int
    writer: RecordWriter
    cause: StatusCause | None = Field(description="the submission or cancellation that caused it")


class ClusterOverviewWithVersion(Message):
    taskmanagers: int
    slots_total: int = field("slots-total")
    slots_available: int = field("slots-available")
    jobs_running: int = field("jobs-running")
    jobs_finished: int = field("jobs-finished")
    jobs_cancelled: int = field("jobs-cancelled")
    jobs_failed: int = field("jobs-failed")
    flink_version: str = field("flink-version")
    flink_commit: str = field("flink-commit")
    pending_slot_requests: int = field("pending-slot-requests", "(jobledger)")
    as_of: AsOf = field("as-of")


class JobDetails(Message):
    jid: str
    name: str
    state: str
    start_time: int = field("start-time")
    end_time: int = field("end-time", "-1 while the job runs")
    duration: int
    last_modification: int = field("last-modification")
    tasks: dict[str, int] = Field(description="total, and how many subtasks are in each state")
    restarts: int = Field(description="(jobledger) how often the job restarted")
    decided: bool = Field(description=DECIDED)


class MultipleJobsDetails(Message):
    jobs: list[JobDetails]
    as_of: AsOf = field("as-of")


class JobIdWithStatus(Message):
    id: str
    status: str


class JobIdsWithStatusOverview(Message):
    jobs: list[JobIdWithStatus]
    as_of: AsOf = field("as-of")


class JobVertexDetailsInfo(Message):
    """One vertex in a job's details."""

    id: str
    name: str
    max_parallelism: int = field("maxParallelism")
    parallelism: int
    status: str
    start_time: int = field("start-time")
    end_time: int = field("end-time")
    duration: int
    tasks: dict[str, int]


class JobPlanNodeInput(Message):
    num: int
    id: str
    ship_strategy: str
    exchange: str


class JobPlanNode(Message):
    id: str
    parallelism: int
    operator: str
    operator_strategy: str
    description: str
    operators: list[str] = Field(description="(jobledger) the vertex's operator chain")
    inputs: list[JobPlanNodeInput]
    optimizer_properties: dict[str, Any]


class JobPlan(Message):
    jid: str
    name: str
    type: str
    nodes: list[JobPlanNode]


class JobPlanInfo(Message):
    plan: JobPlan
    as_of: AsOf = field("as-of")


class JobDetailsInfo(Message):
    jid: str
    name: str
    is_stoppable: bool = field("isStoppable")
    state: str
    job_type: str = field("job-type")
    start_time: int = field("start-time")
    end_time: int = field("end-time")
    duration: int
    max_parallelism: int = field("maxParallelism")
    now: int = Field(description="the cut's last append time, never the clock")
    timestamps: dict[str, int] = Field(description="status -> when the job last entered it")
    status_history: list[StatusChange] = field(
        "status-history", "(jobledger) every status change in log order, with its writers"
    )
    submitted_by: RecordWriter | None = field(
        "submitted-by", "(jobledger) who wrote the job's submission"
    )
    cancelled_by: RecordWriter | None = field(
        "cancelled-by", "(jobledger) who wrote its latest cancellation the services admitted"
    )
    vertices: list[JobVertexDetailsInfo]
    status_counts: dict[str, int] = field("status-counts")
    plan: JobPlan
    restarts: int
    failure_cause: str | None = field("failure-cause", "(jobledger) the latest failure")
    decided: bool = Field(description=DECIDED)
    as_of: AsOf = field("as-of")


class Attempt(Message):
    """(jobledger) One execution attempt of a subtask."""

    attempt: int
    attempt_id: str = field("attempt-id")
    status: str
    taskmanager_id: str = field("taskmanager-id")
    slot_index: int | None = field("slot-index")
    allocation_id: str | None = field("allocation-id")
    start_time: int = field("start-time")
    end_time: int = field("end-time")
    duration: int
    timestamps: dict[str, int] = Field(description="state -> when the attempt entered it")
    error: str | None


class SubtaskExecutionAttemptDetailsInfo(Attempt):
    subtask: int
    endpoint: str
    metrics: dict[str, Any]
    attempt_history: list[Attempt] = field("attempt-history", "(jobledger) every attempt")


class SubtaskExecutionAttemptInfo(Attempt):
    """One attempt of one subtask, as of a point."""

    subtask: int
    endpoint: str
    metrics: dict[str, Any]
    as_of: AsOf = field("as-of")


class JobStatusInfo(Message):
    status: str
    as_of: AsOf = field("as-of")


class DashboardConfiguration(Message):
    refresh_interval: int = field("refresh-interval")
    timezone_name: str = field("timezone-name")
    timezone_offset: int = field("timezone-offset")
    flink_version: str = field("flink-version")
    flink_revision: str = field("flink-revision")
    features: dict[str, bool]


class JobVertexDetailsWithSubtasks(Message):
    id: str
    name: str
    parallelism: int
    max_parallelism: int = field("maxParallelism")
    now: int
    subtasks: list[SubtaskExecutionAttemptDetailsInfo]
    as_of: AsOf = field("as-of")


class SubtaskTimeInfo(Message):
    subtask: int
    host: str
    endpoint: str
    duration: int
    timestamps: dict[str, int]


class SubtasksTimesInfo(Message):
    id: str
    name: str
    now: int
    subtasks: list[SubtaskTimeInfo]
    as_of: AsOf = field("as-of")


class ExceptionInfo(Message):
    exception_name: str = field("exceptionName")
    stacktrace: str
    timestamp: int
    task_name: str = field("taskName")
    location: str | None


class RootExceptionInfo(ExceptionInfo):
    endpoint: str | None
    task_manager_id: str | None = field("taskManagerId")
    failure_labels: dict[str, str] = field("failureLabels")
    concurrent_exceptions: list[dict[str, Any]] = field("concurrentExceptions")
    vertex_id: str = field("vertex-id")
    subtask: int
    attempt: int
    attempt_id: str = field("attempt-id")
    position: str = Field(description="(jobledger) where the failure report is in the log")
    writer: RecordWriter = Field(description="(jobledger) who wrote the failure report")


class JobExceptionHistory(Message):
    entries: list[RootExceptionInfo]
    truncated: bool


class JobExceptionsInfoWithHistory(Message):
    root_exception: str | None = field("root-exception")
    timestamp: int | None
    all_exceptions: list[ExceptionInfo] = field("all-exceptions")
    truncated: bool
    exception_history: JobExceptionHistory = field("exceptionHistory")
    as_of: AsOf = field("as-of")


class ResourceProfileInfo(Message):
    cpu_cores: float = field("cpuCores")
    task_heap_memory: int = field("taskHeapMemory")
    task_off_heap_memory: int = field("taskOffHeapMemory")
    managed_memory: int = field("managedMemory")
    network_memory: int = field("networkMemory")
    extended_resources: dict[str, float] = field("extendedResources")


class TaskManagerInfo(Message):
    id: str
    path: str
    data_port: int = field("dataPort")
    jmx_port: int = field("jmxPort")
    time_since_last_heartbeat: int = field("timeSinceLastHeartbeat")
    slots_number: int = field("slotsNumber")
    free_slots: int = field("freeSlots")
    total_resource: ResourceProfileInfo = field("totalResource")
    free_resource: ResourceProfileInfo = field("freeResource")
    hardware: dict[str, int]
    blocked: bool
    registered: bool = Field(description="(jobledger) known to the ResourceManager")
    slot_profile: str = field("slot-profile", "(jobledger) each slot's resources")


class TaskManagersInfo(Message):
    taskmanagers: list[TaskManagerInfo]
    as_of: AsOf = field("as-of")


class SlotInfo(Message):
    index: int
    resource: ResourceProfileInfo
    job_id: str | None = field("jobId")
    allocation_id: str | None = field("allocationId")
    state: str = Field(description="the slot as the ResourceManager sees it")
    at_task_executor: str | None = field("at-task-executor", "as its own slot table sees it")


class Slot(Message):
    """(jobledger) A slot as `jobledger slots` shows it."""

    index: int
    at_resource_manager: str
    allocation: str | None
    job: str | None
    at_task_executor: str | None


class TaskManagerDetailsInfo(TaskManagerInfo):
    metrics: dict[str, Any]
    allocated_slots: list[SlotInfo] = field("allocatedSlots")
    slots: list[Slot]
    as_of: AsOf = field("as-of")
