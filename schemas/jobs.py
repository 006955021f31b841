"""Job submission, leadership (JobMasterId fencing), status, cancellation and rescaling."""

from __future__ import annotations

from pydantic import Field

from .ids import JobID, JobMasterFencingToken
from .model import Event, Int32
from .topics import TopicRole
from .types import JobStatus, JobVertex, RestartStrategy, ScheduleMode

_JOB_MASTER = "the JobMaster"


class JobSubmitted(Event):
    """A client submitted a JobGraph."""

    topic_role = TopicRole.JOB
    key_field = "job_id"
    produced_by = "a client"

    job_id: JobID
    job_name: str = Field(description="Name of the job.")
    vertices: list[JobVertex] = Field(description="The JobGraph's vertices.")
    schedule_mode: ScheduleMode = Field(
        default=ScheduleMode.EAGER, description="EAGER or LAZY_FROM_SOURCES."
    )
    restart_strategy: RestartStrategy = Field(
        default_factory=RestartStrategy, description="What to do when a task fails."
    )
    principal: str | None = Field(
        default=None,
        description="The tenant the job counts against (its per-principal limits and slot "
        "share): the record's signer on a secured cluster, which refuses any other name; "
        "chosen by the client on an unsigned one. None: the tenant 'anonymous'.",
    )


class JobMasterLeadershipGranted(Event):
    """A JobMaster became leader for the job under a new JobMasterId fencing token."""

    topic_role = TopicRole.JOB
    key_field = "job_id"
    produced_by = "leader election (the service runtime)"

    job_id: JobID
    job_master_id: str = Field(description="The new JobMasterId.")


class JobMasterLeadershipRevoked(Event):
    """The JobMaster holding `job_master_id` lost leadership for the job."""

    topic_role = TopicRole.JOB
    key_field = "job_id"
    produced_by = "leader election (the service runtime)"

    job_id: JobID
    job_master_id: str = Field(description="The revoked JobMasterId.")


class JobStatusChanged(Event):
    """The job moved from one JobStatus to another."""

    topic_role = TopicRole.JOB
    key_field = "job_id"
    produced_by = _JOB_MASTER

    job_id: JobID
    from_status: JobStatus = Field(description="Status before.")
    to_status: JobStatus = Field(description="Status after.")
    cause: str | None = Field(default=None, description="Failure cause, if any.")


class JobCancellationRequested(Event):
    """A client asked to cancel the job."""

    topic_role = TopicRole.JOB
    key_field = "job_id"
    produced_by = "a client"

    job_id: JobID


class RescaleRequested(Event):
    """A client asked to run the job (or one vertex) at a new parallelism."""

    topic_role = TopicRole.JOB
    key_field = "job_id"
    produced_by = "a client"

    job_id: JobID
    new_parallelism: Int32 = Field(description="Requested parallelism; must be > 0.")
    vertex_id: str | None = Field(default=None, description="One vertex, or null for all.")


class JobMasterStopped(Event):
    """The JobMaster stopped (job terminal or shut down): its SlotPool closes, cancelling pending
    requests and releasing every TaskManager."""

    topic_role = TopicRole.JOB
    key_field = "job_id"
    produced_by = "the JobMaster"

    job_id: JobID
    cause: str = Field(description="Why it stopped.")


class GlobalAggregateUpdateRequested(Event):
    """A task adds a value to one of the job's named global aggregates (Flink's
    updateGlobalAggregate). Flink ships the aggregate function as user code; nothing read from
    a topic runs code here, so the function is named from a fixed list: `sum`."""

    topic_role = TopicRole.JOB
    key_field = "job_id"
    produced_by = "a task (the Spark runner)"

    job_id: JobID
    job_master_id: JobMasterFencingToken = None
    aggregate_name: str = Field(description="Name of the aggregate.")
    value: int = Field(description="The value to add.")
    aggregate_function: str = Field(default="sum", description="The function folding values: sum.")


class GlobalAggregateUpdated(Event):
    """The JobMaster folded the value into the aggregate: its value now (JM-10)."""

    topic_role = TopicRole.JOB
    key_field = "job_id"
    produced_by = "the JobMaster"

    job_id: JobID
    aggregate_name: str = Field(description="Name of the aggregate.")
    value: int = Field(description="The aggregate's value after the update.")
