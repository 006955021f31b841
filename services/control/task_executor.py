"""TaskExecutor: one TaskManager's slot table and its connections (seed 004, rules TE-*).

Invariants:
- the table is that of one instance (one run of the TaskExecutor's process, the runner): a
  registration accepted for another instance starts an empty table, as a restarted process
  holds nothing; the old instance's tasks are failed by the JobMasters, whom the
  ResourceManager told it was lost;
- liveness is not this reducer's to claim: the ResourceManager judges the runner's own
  heartbeats, so nothing here beats on the runner's behalf;
- slots are allocated only while registered at the ResourceManager that asks (TE-1, TE-2);
- a slot is offered to its job only over an established JobManager connection, and only while
  ALLOCATED (TE-13); an accepted offer makes it ACTIVE, a rejected one frees it (TE-7);
- a task runs only in an ACTIVE slot of its job, submitted by the connected JobMaster
  leader, once per ExecutionAttemptID (TE-22);
- every freed static slot is reported to the ResourceManager (TE-14);
- an ALLOCATED slot times out (`taskmanager.slot.timeout`) only while the TaskExecutor waits
  for nothing from the job's JobMaster: while its registration or an offer of the slot is
  unanswered, the slot does not time out. The JobMaster answers every registration and
  every offer on its own partition, and under load that answer can come later than any
  timeout: a slot freed before it came failed a healthy job ("Could not mark slot active",
  "no JobManager associated for the job"). Flink offers over an RPC connection whose reply
  comes back within the ask timeout; here the reply always comes (a JobMaster that lost its
  leadership meanwhile is answered for by the new leader, addressed to the one asked), so the
  TaskExecutor waits for it, and the timeout runs again once the registration is declined or
  the connection is lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from jobledger.schemas.cluster import (
    JobManagerDisconnected,
    JobMasterHeartbeat,
    JobMasterHeartbeatTimedOut,
    JobMasterRegistrationAccepted,
    JobMasterRegistrationDeclined,
    JobMasterRegistrationRequested,
    ResourceManagerHeartbeatTimedOut,
    TaskManagerConnectionClosed,
    TaskManagerDisconnected,
    TaskManagerRegistrationAccepted,
)
from jobledger.schemas.slots import (
    AllocationFailed,
    SlotAllocated,
    SlotAllocationFailed,
    SlotAllocationRequested,
    SlotFreed,
    SlotFreeRequested,
    SlotOfferAccepted,
    SlotOffered,
    SlotOfferFailed,
    SlotOfferRejected,
)
from jobledger.schemas.tasks import (
    TaskCancellationRequested,
    TaskDeploymentRequested,
    TaskExecutionStateChanged,
    TaskFinalStateReported,
    TaskSubmissionAccepted,
    TaskSubmissionRejected,
)
from jobledger.schemas.timers import TimerFired
from jobledger.schemas.types import ExecutionState, OwnerKind

from .decisions import Decisions
from .event_time import later
from .queries import TaskSlotInfo, query
from .reducer import Reducer, handles
from .slot_states import TaskSlotState
from .task_slot_table import TaskSlotTable, slot_count_refusal

PRODUCER = "taskexecutor"


@dataclass(frozen=True)
class TaskExecutorConfig:
    """Flink's `taskmanager.slot.timeout`: how long an allocated slot may wait to be used."""

    slot_timeout_ms: int = 10_000


@dataclass
class TaskExecutor(Reducer):
    resource_id: str
    config: TaskExecutorConfig = field(default_factory=TaskExecutorConfig)
    resource_manager_id: str | None = None
    table: TaskSlotTable | None = None
    job_masters: dict[str, str] = field(default_factory=dict)
    registering: dict[str, str] = field(default_factory=dict)
    instance_id: str | None = None
    """The instance whose registration was accepted last."""
    registered_at: int | None = None
    """Event time of that instance's registration (its acceptance carries it): an acceptance
    of another instance must be newer, or it is an old record re-sent (None: not kept by the
    snapshot this state was read from)."""

    producer: ClassVar[str] = PRODUCER

    def to_dict(self) -> dict[str, Any]:
        slots = self.table.slots.values() if self.table is not None else ()
        return {
            "resource_id": self.resource_id,
            "resource_manager_id": self.resource_manager_id,
            "instance_id": self.instance_id,
            "job_masters": dict(self.job_masters),
            "slots": {
                s.allocation_id: {
                    "index": s.index,
                    "job_id": s.job_id,
                    "state": s.state.value,
                    "tasks": list(s.tasks),
                    "timeout_at": s.timeout_at,
                }
                for s in slots
            },
        }

    def _reject(self, out: Decisions, reason: str) -> None:
        out.reject(OwnerKind.TASK_EXECUTOR, self.resource_id, reason)

    def _registered_table(self, out: Decisions) -> TaskSlotTable | None:
        if self.table is None:
            self._reject(out, f"TaskExecutor {self.resource_id} is not registered")
        return self.table

    # -- ResourceManager -----------------------------------------------------------------

    @handles(TaskManagerRegistrationAccepted)
    def on_registration_accepted(
        self, event: TaskManagerRegistrationAccepted, out: Decisions
    ) -> None:
        """Connected to the ResourceManager (TE-19). Accepted for another instance than the
        table's: the process was restarted and holds nothing, so the table starts empty and
        no JobMaster connection is kept. An acceptance of an instance registered no later
        than the table's is an old one re-sent, and never empties a newer instance's table."""
        refusal = slot_count_refusal(event.number_of_slots)
        if refusal is None and self.table is not None and event.instance_id != self.instance_id:
            known = self.registered_at
            if known is not None and event.event_time <= known:
                refusal = (
                    f"acceptance of instance {event.instance_id}, registered at "
                    f"{event.event_time}, is not newer than instance {self.instance_id}, "
                    f"registered at {known}: an old record, which never replaces a newer "
                    "instance"
                )
        if refusal is not None:
            self._reject(out, refusal)
            return
        self.resource_manager_id = event.resource_manager_id
        if self.table is None or event.instance_id != self.instance_id:
            self.table = TaskSlotTable(event.number_of_slots, event.resource_profile)
            self.job_masters.clear()
            self.registering.clear()
            self.instance_id = event.instance_id
            self.registered_at = event.event_time

    @handles(TaskManagerConnectionClosed)
    def on_connection_closed(self, event: TaskManagerConnectionClosed, out: Decisions) -> None:
        """The ResourceManager let it go: no slot requests from it (TE-2) until a
        registration is accepted again. Slots and tasks stay until then: the JobMasters fail
        the tasks of a lost instance. Closed again while closed (each beat of a runner the
        ResourceManager lost closes it), or for an earlier instance: a no-op, not a
        rejection."""
        if self.resource_manager_id is None or event.instance_id != self.instance_id:
            return
        if event.resource_manager_id != self.resource_manager_id:
            self._reject(out, f"not connected to the resource manager {event.resource_manager_id}")
            return
        self.resource_manager_id = None

    @handles(SlotAllocationRequested)
    def on_slot_allocation_requested(self, event: SlotAllocationRequested, out: Decisions) -> None:
        """requestSlot: TE-1..TE-6, then offer at once or register at the job's JobMaster."""
        reason = self._allocate_or_refuse(event)
        if reason is not None:
            out.emit(
                SlotAllocationFailed,
                resource_id=self.resource_id,
                slot_index=event.slot_index,
                allocation_id=event.allocation_id,
                job_id=event.job_id,
                reason=reason,
            )
            return
        out.emit(
            SlotAllocated,
            resource_id=self.resource_id,
            slot_index=event.slot_index,
            allocation_id=event.allocation_id,
            job_id=event.job_id,
        )
        if event.job_id in self.job_masters:
            self._offer_slots(event.job_id, out)
            return
        if event.job_id not in self.registering and event.job_master_id is not None:
            self.registering[event.job_id] = event.job_master_id
            out.emit(
                JobMasterRegistrationRequested,
                job_id=event.job_id,
                job_master_id=event.job_master_id,
                resource_id=self.resource_id,
            )
        if event.job_id in self.registering:
            self.table.slots[event.allocation_id].timeout_at = None  # the answer will come

    def _allocate_or_refuse(self, event: SlotAllocationRequested) -> str | None:
        """Allocate the slot in the table, or say why it cannot be: None once it is allocated
        (or already was, TE-5), else the reason, with the table unchanged."""
        table = self.table
        if table is None or event.resource_manager_id != self.resource_manager_id:
            return (
                f"TaskManager is not connected to the resource manager {event.resource_manager_id}."
            )
        if event.slot_index >= table.number_of_slots:
            return f"The slot index {event.slot_index} is out of range."
        if table.is_allocated(event.slot_index, event.job_id, event.allocation_id):
            return None
        owner = table.owner_of_index(event.slot_index) if event.slot_index >= 0 else None
        if owner is not None:
            return (
                f"The slot {event.slot_index} has already been allocated for a different job: "
                f"allocation {owner.allocation_id} of job {owner.job_id}."
            )
        timeout_at = later(event.event_time, self.config.slot_timeout_ms)
        if not table.allocate_slot(
            event.slot_index,
            event.job_id,
            event.allocation_id,
            event.resource_profile,
            timeout_at,
        ):
            return "Could not allocate slot."
        return None

    # -- JobMaster -----------------------------------------------------------------------

    @handles(JobMasterRegistrationAccepted)
    def on_job_master_registration_accepted(
        self, event: JobMasterRegistrationAccepted, out: Decisions
    ) -> None:
        """The JobManager connection is established: offer the job's ALLOCATED slots (TE-13)."""
        if self._registered_table(out) is None:
            return
        self.registering.pop(event.job_id, None)
        self.job_masters[event.job_id] = event.job_master_id
        self._offer_slots(event.job_id, out)

    @handles(JobMasterRegistrationDeclined)
    def on_job_master_registration_declined(
        self, event: JobMasterRegistrationDeclined, out: Decisions
    ) -> None:
        """No JobMaster takes the job's slots: they time out from now."""
        self.registering.pop(event.job_id, None)
        if self.table is not None:
            self._arm_timeouts(event.job_id, event.event_time)

    def _arm_timeouts(self, job_id: str, now: int) -> None:
        """The job's ALLOCATED slots waiting for its JobMaster's answer wait no longer: they
        time out `slot_timeout_ms` from `now` unless used."""
        for slot in self.table.allocated_slots(job_id):
            if slot.timeout_at is None:
                slot.timeout_at = later(now, self.config.slot_timeout_ms)

    def _offer_slots(self, job_id: str, out: Decisions) -> None:
        """Offer the job's ALLOCATED slots; each waits for the answer without timing out."""
        for slot in self.table.allocated_slots(job_id):
            slot.timeout_at = None
            out.emit(
                SlotOffered,
                job_id=job_id,
                job_master_id=self.job_masters[job_id],
                resource_id=self.resource_id,
                slot_index=slot.index,
                allocation_id=slot.allocation_id,
                resource_profile=slot.resource_profile,
            )

    def _stale_reply(self, job_id: str, job_master_id: str | None, out: Decisions) -> bool:
        """A reply from a JobMaster that is no longer the connected leader is ignored (TE-11)."""
        connected = self.job_masters.get(job_id)
        if connected is not None and job_master_id in (None, connected):
            return False
        self._reject(out, f"no connection to JobMaster {job_master_id} of job {job_id}")
        return True

    @handles(SlotOfferAccepted)
    def on_offer_accepted(self, event: SlotOfferAccepted, out: Decisions) -> None:
        """Activate the slot; if it cannot be, tell the JobMaster it failed (TE-12)."""
        table = self._registered_table(out)
        if table is None or self._stale_reply(event.job_id, event.job_master_id, out):
            return
        if not table.try_mark_slot_active(event.job_id, event.allocation_id):
            out.emit(
                AllocationFailed,
                job_id=event.job_id,
                job_master_id=event.job_master_id,
                resource_id=self.resource_id,
                allocation_id=event.allocation_id,
                cause=f"Could not mark slot {event.allocation_id} active.",
            )

    @handles(SlotOfferRejected)
    def on_offer_rejected(self, event: SlotOfferRejected, out: Decisions) -> None:
        """A rejected slot is freed and given back to the ResourceManager (TE-7)."""
        table = self._registered_table(out)
        if table is None or self._stale_reply(event.job_id, event.job_master_id, out):
            return
        self._free(event.allocation_id, f"offer rejected: {event.reason}", out)

    @handles(SlotFreeRequested)
    def on_free_requested(self, event: SlotFreeRequested, out: Decisions) -> None:
        """freeSlot (TE-14): an unknown allocation is refused with the reason."""
        table = self._registered_table(out)
        if table is None:
            return
        if event.allocation_id not in table.slots:
            self._reject(out, f"no slot with allocation {event.allocation_id}")
            return
        self._free(event.allocation_id, event.cause, out)

    def _free(self, allocation_id: str, cause: str, out: Decisions) -> None:
        """Free a slot: its tasks fail first, then the RM hears of the static slot."""
        table = self.table
        slot = table.slots.get(allocation_id)
        if slot is None:
            return
        result = table.free_slot(allocation_id)
        for attempt_id in result.tasks_to_fail:
            self._fail_task(slot.job_id, attempt_id, f"slot {allocation_id} freed: {cause}", out)
        if slot.index >= 0:
            out.emit(
                SlotFreed,
                resource_id=self.resource_id,
                slot_index=slot.index,
                allocation_id=allocation_id,
                job_id=slot.job_id,
                cause=cause,
            )
        if slot.job_id not in table.jobs():
            self.job_masters.pop(slot.job_id, None)

    def _fail_task(self, job_id: str, attempt_id: str, error: str, out: Decisions) -> None:
        out.emit(
            TaskExecutionStateChanged,
            job_id=job_id,
            job_master_id=self.job_masters.get(job_id),
            execution_attempt_id=attempt_id,
            execution_state=ExecutionState.FAILED,
            error=error,
            resource_id=self.resource_id,
        )
        self.table.remove_task(attempt_id)

    @handles(JobManagerDisconnected)
    def on_job_manager_disconnected(self, event: JobManagerDisconnected, out: Decisions) -> None:
        """TE-16: the job's tasks fail, its ACTIVE slots go back to ALLOCATED with a timeout."""
        table = self._registered_table(out)
        if table is None or self._stale_reply(event.job_id, event.job_master_id, out):
            return
        self._disconnect_job_manager(event.job_id, event.cause, out)

    def _disconnect_job_manager(self, job_id: str, cause: str, out: Decisions) -> None:
        """disconnectJobManagerConnection: the job's tasks fail, its slots go back to
        ALLOCATED with the slot timeout armed again."""
        table = self.table
        del self.job_masters[job_id]
        timeout_at = later(out.cause.event_time, self.config.slot_timeout_ms)
        for slot in [s for s in table.slots.values() if s.job_id == job_id]:
            for attempt_id in list(slot.tasks):
                self._fail_task(job_id, attempt_id, cause, out)
            table.mark_slot_inactive(slot.allocation_id, timeout_at)

    @handles(JobMasterHeartbeatTimedOut)
    def on_job_master_heartbeat_timed_out(
        self, event: JobMasterHeartbeatTimedOut, out: Decisions
    ) -> None:
        """TE-17: disconnect from the JobMaster as TE-16 does, tell it so
        (disconnectTaskManager), and register at the job's leader again (reconnect)."""
        table = self._registered_table(out)
        if table is None or self._stale_reply(event.job_id, event.job_master_id, out):
            return
        cause = f"The heartbeat of JobManager with id {event.job_master_id} timed out."
        self._disconnect_job_manager(event.job_id, cause, out)
        out.emit(
            TaskManagerDisconnected, job_id=event.job_id, resource_id=self.resource_id,
            cause=cause,
        )  # fmt: skip
        self.registering[event.job_id] = event.job_master_id
        out.emit(
            JobMasterRegistrationRequested, job_id=event.job_id,
            job_master_id=event.job_master_id, resource_id=self.resource_id,
        )  # fmt: skip

    @handles(ResourceManagerHeartbeatTimedOut)
    def on_resource_manager_heartbeat_timed_out(
        self, event: ResourceManagerHeartbeatTimedOut, out: Decisions
    ) -> None:
        """TE-18: the ResourceManager connection goes (no slot requests from it, TE-1/TE-2)
        until a registration is accepted again; slots and tasks stay."""
        if (
            self.resource_manager_id is None
            or event.resource_manager_id != self.resource_manager_id
        ):
            self._reject(out, f"not connected to the resource manager {event.resource_manager_id}")
            return
        self.resource_manager_id = None

    @handles(SlotOfferFailed)
    def on_offer_failed(self, event: SlotOfferFailed, out: Decisions) -> None:
        """handleAcceptedSlotOffers on a failed offer, for the connected leader only (TE-11):
        a timeout offers the job's ALLOCATED slots again (TE-9); any other error frees every
        slot of the offer and gives them back to the ResourceManager (TE-10)."""
        table = self._registered_table(out)
        if table is None or self._stale_reply(event.job_id, event.job_master_id, out):
            return
        if event.timed_out:
            self._offer_slots(event.job_id, out)
            return
        for allocation_id in event.allocation_ids:
            self._free(allocation_id, f"offering the slot failed: {event.cause}", out)

    @handles(JobMasterHeartbeat)
    def on_job_master_heartbeat(self, event: JobMasterHeartbeat, out: Decisions) -> None:
        """TE-15 (syncSlotsWithSnapshotFromJobMaster): each slot of the JobMaster's report, in
        report order, that this table does not hold as *that allocation at that index for
        that job* is failed at the JobMaster; then every ACTIVE slot of the job the report
        does not name is freed."""
        table = self._registered_table(out)
        if table is None or self._stale_reply(event.job_id, event.job_master_id, out):
            return
        for info in event.allocated_slots:
            if not table.is_allocated(info.slot_index, event.job_id, info.allocation_id):
                out.emit(
                    AllocationFailed,
                    job_id=event.job_id,
                    job_master_id=event.job_master_id,
                    resource_id=self.resource_id,
                    allocation_id=info.allocation_id,
                    cause=(
                        f"TaskExecutor {self.resource_id} holds no slot {info.slot_index} "
                        f"for {info.allocation_id}"
                    ),
                )
        reported = {info.allocation_id for info in event.allocated_slots}
        unknown_to_job_master = [
            s.allocation_id
            for s in table.slots.values()
            if s.job_id == event.job_id
            and s.state is TaskSlotState.ACTIVE
            and s.allocation_id not in reported
        ]
        for allocation_id in unknown_to_job_master:
            self._free(allocation_id, "the JobMaster no longer holds the slot", out)

    # -- tasks ---------------------------------------------------------------------------

    @handles(TaskDeploymentRequested)
    def on_deployment(self, event: TaskDeploymentRequested, out: Decisions) -> None:
        """submitTask with Flink's checks in Flink's order (TE-22, TE-23); an accepted task
        is acknowledged on the TaskExecutor's own topic, where the runner waits for it."""
        reason = self._add_task_or_refuse(event)
        if reason is not None:
            out.emit(
                TaskSubmissionRejected,
                job_id=event.job_id,
                resource_id=self.resource_id,
                execution_attempt_id=event.execution_attempt_id,
                allocation_id=event.allocation_id,
                reason=reason,
            )
            return
        out.emit(
            TaskSubmissionAccepted,
            job_id=event.job_id,
            resource_id=self.resource_id,
            execution_attempt_id=event.execution_attempt_id,
            allocation_id=event.allocation_id,
        )

    def _add_task_or_refuse(self, event: TaskDeploymentRequested) -> str | None:
        """Add the task to its slot, or say why it cannot run here: None once it is added,
        else the reason. Everything is checked before anything changes, so a refused
        submission leaves the slot table as it was."""
        table = self.table
        expected = self.job_masters.get(event.job_id)
        if table is None or expected is None:
            return (
                f"Could not submit task because there is no JobManager associated for the "
                f"job {event.job_id}."
            )
        if event.job_master_id != expected:
            return (
                f"Rejecting the task submission because the job manager leader id "
                f"{event.job_master_id} does not match the expected job manager leader id "
                f"{expected}."
            )
        slot = table.slots.get(event.allocation_id)
        if slot is None or slot.job_id != event.job_id or slot.state is TaskSlotState.RELEASING:
            return (
                f"No task slot allocated for job ID {event.job_id} and allocation ID "
                f"{event.allocation_id}."
            )
        information = event.job_information_job_id
        if information is not None and information != event.job_id:
            return (
                f"Inconsistent job ID information inside TaskDeploymentDescriptor "
                f"({event.job_id} vs. {information})"
            )
        if event.max_parallelism <= 0:
            return f"Could not submit task: max parallelism {event.max_parallelism} is not > 0."
        if table.slot_of_task(event.execution_attempt_id) is not None:
            return f"TaskManager already contains a task for id {event.execution_attempt_id}."
        table.try_mark_slot_active(event.job_id, event.allocation_id)
        table.add_task(event.job_id, event.allocation_id, event.execution_attempt_id)
        return None

    @handles(TaskCancellationRequested)
    def on_cancellation(self, event: TaskCancellationRequested, out: Decisions) -> None:
        """An unknown attempt cannot be cancelled (TE-24); a known one is the runner's to stop."""
        table = self._registered_table(out)
        if table is not None and table.slot_of_task(event.execution_attempt_id) is None:
            self._reject(
                out, f"Cannot find task to stop for execution {event.execution_attempt_id}."
            )

    @handles(TaskFinalStateReported)
    def on_final_state(self, event: TaskFinalStateReported, out: Decisions) -> None:
        """The task ended: it leaves its slot, so freeing the slot later fails nothing."""
        table = self._registered_table(out)
        if table is None:
            return
        if table.slot_of_task(event.execution_attempt_id) is None:
            self._reject(out, f"no task {event.execution_attempt_id} in the slot table")
            return
        table.remove_task(event.execution_attempt_id)

    # -- time ----------------------------------------------------------------------------

    def next_timer(self) -> int | None:
        """The earliest event time at which an allocated slot times out (None: none can)."""
        if self.table is None:
            return None
        return self.table.next_timeout()

    @handles(TimerFired)
    def on_timer(self, event: TimerFired, out: Decisions) -> None:
        """Allocated slots nobody activated in time are freed (TST-11)."""
        if self.table is None:
            return
        for allocation_id in self.table.timed_out(event.event_time):
            self._free(allocation_id, "slot timed out before it was used", out)

    # -- the query surface (queries.py) ---------------------------------------------------

    @query
    def number_of_slots(self) -> int:
        """The static slots of its slot table (0 before the ResourceManager accepted it)."""
        return self.table.number_of_slots if self.table is not None else 0

    @query
    def task_slots(self) -> list[TaskSlotInfo]:
        """Every allocated slot of its slot table, in the table's order (by allocation)."""
        if self.table is None:
            return []
        return [
            TaskSlotInfo(s.index, s.allocation_id, s.job_id, s.state, len(s.tasks))
            for s in self.table.slots.values()
        ]
