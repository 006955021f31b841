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

from jobledger.schemas.types import ExecutionState, JobStatus, JobVertex, ResourceProfile

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
    subtasks: int
    """The subtasks of its ExecutionGraph (a failover restarting all of them restarts the
    job); 0 before one is built."""


@dataclass(frozen=True)
class PendingRestartInfo:
    """A failover waiting to restart its subtasks (Flink's restartTasksWithDelay)."""

    at: int
    """Event time at which the restart is due."""
    versions: tuple[tuple[str, int, int], ...]
    """(job vertex, subtask, version) of every subtask it restarts, sorted: a subtask is
    restarted only if its version is still this one (Flink's ExecutionVertexVersion)."""


# -- ExecutionGraph ---------------------------------------------------------------------
# Flink's REST handlers never see the live ExecutionGraph: they read an ArchivedExecutionGraph,
# a copy taken once, so a handler cannot change the job it describes and the scheduler may
# re-index its graph freely. The JobMaster answers `archived_graph()` with these records.


@dataclass(frozen=True)
class ArchivedExecution:
    """One attempt of a subtask as the JobMaster holds it (Flink's ArchivedExecution; the
    times each state was reached come from the log, projections/rest adds them)."""

    attempt_id: str
    """Its ExecutionAttemptID."""
    attempt_number: int
    """0 for the first attempt, one more for each restart of the subtask."""
    state: ExecutionState
    """Where the attempt is in its lifecycle, as the JobMaster believes."""
    slot_request_id: str | None
    """The slot request made for it; None before it is scheduled."""
    allocation_id: str | None
    """The slot it was given; None while it waits for one."""
    resource_id: str | None
    """The TaskExecutor that slot is on; None while it waits for one."""
    slot_index: int | None
    """The slot's index in that TaskExecutor's slot table; None while it waits for one."""

    @property
    def has_slot(self) -> bool:
        return self.allocation_id is not None


@dataclass(frozen=True)
class ArchivedExecutionVertex:
    """One subtask and its attempts (Flink's ArchivedExecutionVertex)."""

    job_vertex_id: str
    """The JobVertex it is a subtask of."""
    subtask_index: int
    """Its index among that vertex's subtasks."""
    attempts: tuple[ArchivedExecution, ...]
    """Every attempt made, oldest first: the last is the current one."""

    @property
    def current(self) -> ArchivedExecution:
        return self.attempts[-1]

    @property
    def prior(self) -> tuple[ArchivedExecution, ...]:
        return self.attempts[:-1]


@dataclass(frozen=True)
class ArchivedExecutionJobVertex:
    """One JobVertex expanded to its subtasks (Flink's ArchivedExecutionJobVertex)."""

    vertex: JobVertex
    """The JobVertex as submitted."""
    parallelism: int
    """Its subtasks in this run (a rescale may override the submitted parallelism)."""
    max_parallelism: int
    """Its key groups: the most subtasks it may be rescaled to."""
    subtasks: tuple[ArchivedExecutionVertex, ...]
    """Its subtasks, by index."""

    @property
    def vertex_id(self) -> str:
        return self.vertex.vertex_id


@dataclass(frozen=True)
class ArchivedExecutionGraph:
    """A job's ExecutionGraph frozen at one point of the log (Flink's ArchivedExecutionGraph,
    the part the JobMaster owns: status and times are asked of it and of the log)."""

    job_id: str
    """The JobID."""
    vertices: tuple[ArchivedExecutionJobVertex, ...]
    """Its job vertices in topological order."""

    def vertex(self, vertex_id: str) -> ArchivedExecutionJobVertex | None:
        """The job vertex of that id; None if the graph has none."""
        return next((jv for jv in self.vertices if jv.vertex_id == vertex_id), None)

    def execution_vertices(self) -> list[ArchivedExecutionVertex]:
        """Every subtask, in topological order."""
        return [ev for jv in self.vertices for ev in jv.subtasks]

    def attempt(self, attempt_id: str) -> tuple[ArchivedExecutionVertex, ArchivedExecution] | None:
        """The subtask that made the attempt `attempt_id`, and the attempt; None if none did."""
        for ev in self.execution_vertices():
            for attempt in ev.attempts:
                if attempt.attempt_id == attempt_id:
                    return ev, attempt
        return None
