"""TaskExecutor: one test per rule TE-* of docs/reference/flink-rules.md that events can
express, each asserting the exact derived events, in order."""

from __future__ import annotations

import pytest

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
from jobledger.schemas.topics import TopicRole
from jobledger.schemas.types import AllocatedSlotInfo, ExecutionState, OwnerKind
from jobledger.services.control.driver import ReducerDriver
from jobledger.services.control.task_executor import TaskExecutor, TaskExecutorConfig
from jobledger.services.control.task_slot_table import TaskSlotState

from ..support.events import (
    UNKNOWN,
    Clock,
    Derived,
    assert_derived,
    expect,
    profile,
    rejection,
    types,
)

TM = "tm-1"
JOB = "job-1"
JM = "jm-1"
DEFAULT = profile(1.0, 100)
PRODUCER = "taskexecutor"


class TE:
    def __init__(self, registered: bool = True, slots: int = 2) -> None:
        self.clock = Clock()
        self.te = TaskExecutor(TM, TaskExecutorConfig(slot_timeout_ms=1_000))
        if registered:
            self.apply(
                TaskManagerRegistrationAccepted, resource_manager_id="rm", number_of_slots=slots,
                resource_profile=DEFAULT,
            )  # fmt: skip

    def apply(self, cls, at=None, **fields) -> Derived:
        event = self.clock(cls, at=at, resource_id=TM, **fields)
        return Derived(self.te.apply(event), event, PRODUCER)

    def request(self, index, alloc, job=JOB, rm="rm", prof=UNKNOWN, at=None):
        return self.apply(
            SlotAllocationRequested, at=at, slot_index=index, allocation_id=alloc, job_id=job,
            resource_profile=prof, resource_manager_id=rm, job_master_id=JM,
        )  # fmt: skip

    def connect(self, job=JOB, jm=JM):
        return self.apply(JobMasterRegistrationAccepted, job_id=job, job_master_id=jm)

    def accept(self, alloc, index=0, jm=JM):
        return self.apply(
            SlotOfferAccepted, job_id=JOB, job_master_id=jm, slot_index=index, allocation_id=alloc
        )

    def reject(self, alloc, index=1, jm=JM):
        return self.apply(
            SlotOfferRejected, job_id=JOB, job_master_id=jm, slot_index=index,
            allocation_id=alloc, reason="not needed",
        )  # fmt: skip

    def submit(self, alloc, attempt="att-1", jm=JM, job=JOB, max_parallelism=128, info=None):
        return self.apply(
            TaskDeploymentRequested, job_id=job, job_master_id=jm, execution_attempt_id=attempt,
            vertex_id="v", subtask_index=0, attempt_number=0, number_of_subtasks=1,
            max_parallelism=max_parallelism, allocation_id=alloc, slot_index=0,
            invokable_class_name="noop", job_information_job_id=info,
        )  # fmt: skip

    def tick(self, at: int) -> Derived:
        timer = self.clock(TimerFired, at=at, scope=OwnerKind.TASK_EXECUTOR, owner_id=TM)
        return Derived(self.te.apply(timer), timer, PRODUCER)

    def state(self, alloc) -> TaskSlotState:
        return self.te.table.slots[alloc].state


# the events the TaskExecutor derives, whole: every field named, defaults for this TM and job


def allocated(alloc, index=0, job=JOB):
    return expect(SlotAllocated, resource_id=TM, slot_index=index, allocation_id=alloc, job_id=job)


def allocation_failed(alloc, reason, index=0, job=JOB):
    return expect(
        SlotAllocationFailed, resource_id=TM, slot_index=index, allocation_id=alloc, job_id=job,
        reason=reason,
    )  # fmt: skip


def registration(job=JOB, jm=JM):
    return expect(JobMasterRegistrationRequested, job_id=job, job_master_id=jm, resource_id=TM)


def offered(alloc, index=0, prof=DEFAULT, jm=JM):
    """A static slot is offered with the TaskExecutor's default profile (TST-7)."""
    return expect(
        SlotOffered, job_id=JOB, job_master_id=jm, resource_id=TM, slot_index=index,
        allocation_id=alloc, resource_profile=prof,
    )  # fmt: skip


def freed(alloc, cause, index=0, job=JOB):
    return expect(
        SlotFreed, resource_id=TM, slot_index=index, allocation_id=alloc, job_id=job, cause=cause
    )


def allocation_lost(alloc, cause):
    return expect(
        AllocationFailed, job_id=JOB, job_master_id=JM, resource_id=TM, allocation_id=alloc,
        cause=cause,
    )  # fmt: skip


def submitted(attempt, alloc):
    return expect(
        TaskSubmissionAccepted, job_id=JOB, resource_id=TM, execution_attempt_id=attempt,
        allocation_id=alloc,
    )  # fmt: skip


def submission_rejected(attempt, alloc, reason):
    return expect(
        TaskSubmissionRejected, job_id=JOB, resource_id=TM, execution_attempt_id=attempt,
        allocation_id=alloc, reason=reason,
    )  # fmt: skip


def task_failed(attempt, error, jm=JM):
    return expect(
        TaskExecutionStateChanged, job_id=JOB, job_master_id=jm, execution_attempt_id=attempt,
        execution_state=ExecutionState.FAILED, error=error, resource_id=TM,
    )  # fmt: skip


def rejected(events: Derived, reason: str):
    return rejection(events.cause, OwnerKind.TASK_EXECUTOR, TM, reason)


def test_te_1_slot_requests_before_rm_registration_are_refused():
    te = TE(registered=False)
    assert_derived(
        te.request(0, "a1"),
        [allocation_failed("a1", "TaskManager is not connected to the resource manager rm.")],
    )


def test_te_2_slot_request_from_another_rm_is_refused():
    assert_derived(
        TE().request(0, "a1", rm="rm-old"),
        [allocation_failed("a1", "TaskManager is not connected to the resource manager rm-old.")],
    )


def test_te_3_a_free_slot_is_allocated_and_the_job_master_is_asked_to_register():
    te = TE()
    assert_derived(te.request(0, "a1"), [allocated("a1"), registration()])
    assert te.state("a1") is TaskSlotState.ALLOCATED
    assert_derived(te.request(1, "a2"), [allocated("a2", index=1)])  # registration asked once


def test_te_3_with_a_job_master_connection_the_slot_is_offered_at_once():
    te = TE()
    te.connect()
    assert_derived(te.request(0, "a1"), [allocated("a1"), offered("a1")])


def test_te_4_a_slot_taken_by_another_allocation_is_refused_naming_the_owner():
    te = TE()
    te.request(0, "a1")
    for job in ("job-2", JOB):
        assert_derived(te.request(0, "a2", job=job), [allocation_failed(
            "a2", "The slot 0 has already been allocated for a different job: allocation a1 of "
            "job job-1.", job=job,
        )])  # fmt: skip


def test_te_5_a_repeated_identical_request_is_acknowledged_without_change():
    te = TE()
    te.request(0, "a1")
    before = te.te.to_dict()
    assert_derived(te.request(0, "a1"), [allocated("a1")])
    assert te.te.to_dict() == before


def test_te_6_the_table_refusing_gives_could_not_allocate_slot():
    te = TE()
    te.request(0, "a1")
    assert_derived(
        te.request(1, "a1"), [allocation_failed("a1", "Could not allocate slot.", index=1)]
    )
    assert te.te.table.is_slot_free(1)


def test_te_7_partial_acceptance_frees_the_rejected_slot_and_tells_the_rm():
    te = TE()
    te.request(0, "a1")
    te.request(1, "a2")
    te.connect()
    assert te.accept("a1") == []
    assert_derived(te.reject("a2"), [freed("a2", "offer rejected: not needed", index=1)])
    assert_derived(te.submit("a1"), [submitted("att-1", "a1")])
    assert_derived(te.submit("a2", attempt="att-2"), [submission_rejected(
        "att-2", "a2", "No task slot allocated for job ID job-1 and allocation ID a2."
    )])  # fmt: skip
    assert_derived(te.request(1, "a2"), [allocated("a2", index=1), offered("a2", index=1)])


def test_te_8_a_task_submitted_before_the_offer_reply_activates_its_slot():
    te = TE()
    te.request(0, "a1")
    te.request(1, "a2")
    te.connect()
    assert_derived(te.submit("a1"), [submitted("att-1", "a1")])
    assert te.state("a1") is TaskSlotState.ACTIVE
    assert te.accept("a1") == []
    assert_derived(te.reject("a2"), [freed("a2", "offer rejected: not needed", index=1)])


def test_te_9_a_renewed_job_master_connection_re_offers_what_is_still_allocated():
    te = TE()
    te.request(0, "a1")
    te.request(1, "a2")
    te.connect()
    te.accept("a1")
    assert_derived(te.connect(), [offered("a2", index=1)])


def test_te_10_a_declined_registration_offers_nothing_and_the_slots_time_out():
    """The timeout counts from the decline: until then the answer was awaited."""
    te = TE()
    te.request(0, "a1", at=5_000)
    assert te.apply(JobMasterRegistrationDeclined, at=5_500, job_id=JOB, reason="no leader") == []
    assert te.tick(6_499) == []
    assert_derived(te.tick(6_500), [freed("a1", "slot timed out before it was used")])


def test_a_slot_waiting_for_its_job_master_s_answer_never_times_out():
    """Load issue, item 1: the JobMaster answers every registration and offer, on its own
    partition, and under load later than the slot timeout. A slot freed meanwhile failed a
    healthy job, so neither wait lets the slot time out; the answer decides."""
    te = TE()
    te.request(0, "a1", at=5_000)
    assert te.te.next_timer() is None
    assert te.tick(60_000) == []  # the registration is not answered yet
    assert_derived(te.connect(), [offered("a1")])
    assert te.te.next_timer() is None
    assert te.tick(120_000) == []  # nor the offer
    assert te.accept("a1") == []
    assert te.state("a1") is TaskSlotState.ACTIVE


def test_te_11_a_reply_from_a_former_leader_is_ignored():
    te = TE()
    te.request(0, "a1")
    te.connect()
    before = te.te.to_dict()
    events = te.accept("a1", jm="jm-old")
    assert_derived(events, [rejected(events, "no connection to JobMaster jm-old of job job-1")])
    assert te.te.to_dict() == before


def test_te_12_an_accepted_slot_that_cannot_be_activated_is_reported_failed():
    te = TE()
    te.request(0, "a1")
    te.connect()
    assert_derived(te.accept("gone"), [allocation_lost("gone", "Could not mark slot gone active.")])


def test_te_13_only_allocated_slots_are_offered():
    te = TE(slots=3)
    for i in range(3):
        te.request(i, f"a{i}")
    te.connect()
    te.accept("a0")
    te.submit("a1")
    assert_derived(te.connect(), [offered("a2", index=2)])
    te2 = TE(slots=3)
    te2.request(0, "x")
    assert_derived(te2.connect(), [offered("x")])


def test_te_14_free_slot_tells_the_rm_drops_the_job_and_refuses_unknown_ones():
    te = TE()
    te.request(0, "a1")
    te.connect()
    assert_derived(
        te.apply(SlotFreeRequested, job_id=JOB, allocation_id="a1", cause="idle"),
        [freed("a1", "idle")],
    )
    assert JOB not in te.te.job_masters
    events = te.apply(SlotFreeRequested, job_id=JOB, allocation_id="a1", cause="again")
    assert_derived(events, [rejected(events, "no slot with allocation a1")])


def test_te_15_heartbeat_sync_fails_what_the_te_lacks_and_frees_what_the_jm_forgot():
    te = TE(slots=3)
    for index, alloc in enumerate(["A", "C"]):
        te.request(index, alloc)
    te.connect()
    te.accept("A")
    te.accept("C", index=1)
    report = [AllocatedSlotInfo(slot_index=0, allocation_id="A"),
              AllocatedSlotInfo(slot_index=1, allocation_id="B")]  # fmt: skip
    assert_derived(
        te.apply(JobMasterHeartbeat, job_id=JOB, job_master_id=JM, allocated_slots=report),
        [
            allocation_lost("B", "TaskExecutor tm-1 holds no slot 1 for B"),
            freed("C", "the JobMaster no longer holds the slot", index=1),
        ],
    )
    assert set(te.te.table.slots) == {"A"}


def test_te_15_the_right_allocation_at_another_index_is_failed_too_in_report_order():
    """isAllocated(index, job, allocation): A is held at index 0, so a report of A at index 2
    fails A at the JobMaster; the report's order is kept (Z before A)."""
    te = TE(slots=3)
    te.request(0, "A")
    te.connect()
    te.accept("A")
    report = [AllocatedSlotInfo(slot_index=1, allocation_id="Z"),
              AllocatedSlotInfo(slot_index=2, allocation_id="A")]  # fmt: skip
    assert_derived(
        te.apply(JobMasterHeartbeat, job_id=JOB, job_master_id=JM, allocated_slots=report),
        [
            allocation_lost("Z", "TaskExecutor tm-1 holds no slot 1 for Z"),
            allocation_lost("A", "TaskExecutor tm-1 holds no slot 2 for A"),
        ],
    )
    assert set(te.te.table.slots) == {"A"}, "A is reported, so it is not freed here"


def test_te_16_job_master_disconnect_fails_tasks_and_deactivates_slots():
    te = TE()
    te.request(0, "a1", at=1_000)
    te.connect()
    te.submit("a1")
    events = te.apply(
        JobManagerDisconnected, at=2_000, job_id=JOB, job_master_id=JM, cause="leader lost"
    )
    # the connection is gone before the task fails, so its failure names no JobMaster
    assert_derived(events, [task_failed("att-1", "leader lost", jm=None)])
    assert te.state("a1") is TaskSlotState.ALLOCATED
    assert te.te.table.slots["a1"].timeout_at == 3_000
    assert JOB not in te.te.job_masters


def test_te_20_the_reducer_never_beats_on_the_runner_s_behalf():
    """TE-20's heartbeat is the runner's own (the process that runs the tasks): a beat derived
    here on every tick kept a dead runner's TaskExecutor alive for ever. A tick only frees
    slots that timed out, and none is asked for while no slot can time out."""
    te = TE()
    assert te.te.next_timer() is None
    te.request(1, "a1", at=100)
    te.apply(JobMasterRegistrationDeclined, at=150, job_id=JOB, reason="no leader")
    assert te.te.next_timer() == 1_150
    assert te.tick(200) == []
    assert TE(registered=False).tick(200) == []


def test_te_21_dynamic_slots_keep_their_profile_and_are_not_reported_freed():
    te = TE()
    te.request(-1, "dyn", prof=profile(0.5, 50))
    assert te.te.table.slots["dyn"].resource_profile == profile(0.5, 50)
    assert te.te.table.slot_report()[-1].slot_index == -1
    te.connect()
    assert te.apply(SlotFreeRequested, job_id=JOB, allocation_id="dyn", cause="done") == []


@pytest.mark.parametrize(
    ("setup", "kwargs", "reason"),
    [
        ("none", {}, "Could not submit task because there is no JobManager associated for "
                     "the job job-1."),
        ("connected", {"jm": "jm-2"}, "Rejecting the task submission because the job manager "
         "leader id jm-2 does not match the expected job manager leader id jm-1."),
        ("connected", {"alloc": "nope"},
         "No task slot allocated for job ID job-1 and allocation ID nope."),
        ("connected", {"alloc": "nope", "info": "job-2"},
         "No task slot allocated for job ID job-1 and allocation ID nope."),
        ("connected", {"info": "job-2", "max_parallelism": 0},
         "Inconsistent job ID information inside TaskDeploymentDescriptor (job-1 vs. job-2)"),
        ("connected", {"max_parallelism": 0},
         "Could not submit task: max parallelism 0 is not > 0."),
        ("running", {}, "TaskManager already contains a task for id att-1."),
    ],
    ids=["te-22-1-no-job-manager", "te-22-2-job-master-id", "te-22-3-no-slot",
         "te-22-3-before-4", "te-22-4-inconsistent-job-id", "te-23-max-parallelism",
         "te-22-6-duplicate"],
)  # fmt: skip
def test_te_22_submission_checks_in_order(setup, kwargs, reason):
    te = TE()
    te.request(0, "a1")
    if setup != "none":
        te.connect()
    if setup == "running":
        te.submit("a1")
    before = te.te.to_dict()
    alloc = kwargs.pop("alloc", "a1")
    assert_derived(te.submit(alloc, **kwargs), [submission_rejected("att-1", alloc, reason)])
    assert te.te.to_dict() == before, "a refused submission changes nothing"


def test_te_22_4_a_consistent_job_information_job_id_is_accepted():
    te = TE()
    te.request(0, "a1")
    te.connect()
    assert types(te.submit("a1", info=JOB)) == ["TaskSubmissionAccepted"]


def test_te_24_cancelling_an_unknown_task_is_refused():
    te = TE()
    events = te.apply(TaskCancellationRequested, job_id=JOB, execution_attempt_id="ghost")
    assert_derived(events, [rejected(events, "Cannot find task to stop for execution ghost.")])


def test_events_for_an_unregistered_task_executor_are_rejected():
    te = TE(registered=False)
    events = te.apply(SlotFreeRequested, job_id=JOB, allocation_id="a", cause="x")
    assert_derived(events, [rejected(events, "TaskExecutor tm-1 is not registered")])


def test_a_registration_with_an_absurd_number_of_slots_is_rejected():
    te = TE(registered=False)
    events = te.apply(
        TaskManagerRegistrationAccepted, resource_manager_id="rm", number_of_slots=2**31 - 1,
        resource_profile=DEFAULT,
    )  # fmt: skip
    assert_derived(events, [rejected(events, "a TaskExecutor has 1 to 4096 slots, not 2147483647")])
    assert te.te.table is None and te.te.resource_manager_id is None


def test_a_task_that_reported_its_end_is_not_failed_when_its_slot_is_freed():
    te = TE()
    te.request(0, "a1", at=1_000)
    te.connect()
    te.accept("a1")
    assert_derived(te.submit("a1", attempt="att-1"), [submitted("att-1", "a1")])
    assert_derived(te.submit("a1", attempt="att-2"), [submitted("att-2", "a1")])

    def report_end(attempt: str):
        return te.apply(TaskFinalStateReported, job_id=JOB, execution_attempt_id=attempt,
                        execution_state=ExecutionState.FINISHED)  # fmt: skip

    assert report_end("att-1") == []
    # only the task that never reported its end is failed
    assert_derived(
        te.apply(SlotFreeRequested, job_id=JOB, allocation_id="a1", cause="job finished"),
        [task_failed("att-2", "slot a1 freed: job finished"), freed("a1", "job finished")],
    )
    events = report_end("att-1")
    assert_derived(events, [rejected(events, "no task att-1 in the slot table")])


def test_a_registration_the_resource_manager_never_made_asks_for_no_timer():
    """Hardening issue, item 8: a TaskManagerRegistrationAccepted no ResourceManager derived
    made a TaskExecutor beat into rejections forever. Nothing here beats now: such a
    TaskExecutor asks for no timer and derives nothing from a tick."""
    clock = Clock()
    driver = ReducerDriver()
    bogus = clock(TaskManagerRegistrationAccepted, resource_id=TM,
                  resource_manager_id="resourcemanager", number_of_slots=1,
                  resource_profile=DEFAULT)  # fmt: skip
    driver.run([bogus])
    assert driver.due_timers(TopicRole.TASK_EXECUTOR, clock.now + 60_000) == []
    again = driver.run([clock(TimerFired, scope=OwnerKind.TASK_EXECUTOR, owner_id=TM)])
    assert types(again) == ["TimerFired"]


def test_a_registration_of_a_new_instance_starts_an_empty_table():
    """The runner was restarted: the new process holds nothing, so neither does its table;
    the old instance's tasks are the JobMasters' to fail (the ResourceManager lost it)."""
    te = TE()
    te.apply(TaskManagerRegistrationAccepted, resource_manager_id="rm", number_of_slots=2,
             resource_profile=DEFAULT, instance_id="i1")  # fmt: skip
    te.request(0, "a1")
    te.connect()
    te.accept("a1")
    te.submit("a1")
    assert te.apply(TaskManagerConnectionClosed, resource_manager_id="rm", cause="lost",
                    instance_id="i1") == []  # fmt: skip
    events = te.apply(TaskManagerRegistrationAccepted, resource_manager_id="rm",
                      number_of_slots=2, resource_profile=DEFAULT, instance_id="i2")  # fmt: skip
    assert events == []
    assert te.te.to_dict() == {
        "resource_id": TM, "resource_manager_id": "rm", "instance_id": "i2", "job_masters": {},
        "slots": {},
    }  # fmt: skip
    late = te.apply(TaskFinalStateReported, job_id=JOB, execution_attempt_id="att-1",
                    execution_state=ExecutionState.FINISHED)  # fmt: skip
    assert_derived(late, [rejected(late, "no task att-1 in the slot table")])


def test_the_same_instance_accepted_again_keeps_its_table():
    te = TE()
    te.request(0, "a1")
    before = te.te.to_dict()
    assert te.apply(TaskManagerRegistrationAccepted, resource_manager_id="rm", number_of_slots=2,
                    resource_profile=DEFAULT) == []  # fmt: skip
    assert te.te.to_dict() == before


def test_a_connection_closed_for_an_earlier_instance_changes_nothing():
    te = TE()
    te.apply(TaskManagerRegistrationAccepted, resource_manager_id="rm", number_of_slots=2,
             resource_profile=DEFAULT, instance_id="i2")  # fmt: skip
    before = te.te.to_dict()
    assert te.apply(TaskManagerConnectionClosed, resource_manager_id="rm", cause="lost",
                    instance_id="i1") == []  # fmt: skip
    assert te.te.to_dict() == before


def test_a_connection_closed_by_another_resource_manager_is_rejected():
    te = TE()
    events = te.apply(TaskManagerConnectionClosed, resource_manager_id="rm-old", cause="lost")
    assert_derived(events, [rejected(events, "not connected to the resource manager rm-old")])
    assert te.te.resource_manager_id == "rm"
    assert te.apply(TaskManagerConnectionClosed, resource_manager_id="rm", cause="lost") == []
    assert te.te.resource_manager_id is None
    # each beat of a runner the ResourceManager lost closes it again: nothing to answer
    assert te.apply(TaskManagerConnectionClosed, resource_manager_id="rm", cause="lost") == []


def offer_failed(te: TE, allocations: list[str], timed_out: bool, jm=JM):
    return te.apply(
        SlotOfferFailed, job_id=JOB, job_master_id=jm, allocation_ids=allocations,
        timed_out=timed_out, cause="java.util.concurrent.TimeoutException" if timed_out
        else "org.apache.flink.util.FlinkException: offer lost",
    )  # fmt: skip


def test_te_9_an_offer_that_times_out_is_offered_again_until_accepted():
    """testOfferSlotToJobMasterAfterTimeout: two offers of slot 0 time out, the third is
    accepted; every offer holds that one slot, index 1 stays free."""
    te = TE()
    te.request(0, "a1")
    assert_derived(te.connect(), [offered("a1")])
    for _ in range(2):
        assert_derived(offer_failed(te, ["a1"], timed_out=True), [offered("a1")])
    assert te.accept("a1") == []
    assert te.state("a1") is TaskSlotState.ACTIVE
    assert te.te.table.is_slot_free(1)


def test_te_10_an_offer_failing_otherwise_frees_every_slot_it_held():
    te = TE()
    te.request(0, "a1")
    te.request(1, "a2")
    te.connect()
    cause = "offering the slot failed: org.apache.flink.util.FlinkException: offer lost"
    assert_derived(offer_failed(te, ["a1", "a2"], timed_out=False), [
        freed("a1", cause), freed("a2", cause, index=1),
    ])  # fmt: skip
    assert te.te.table.slots == {}


def test_te_11_a_failed_offer_from_a_former_leader_is_ignored():
    te = TE()
    te.request(0, "a1")
    te.connect()
    events = offer_failed(te, ["a1"], timed_out=False, jm="jm-old")
    assert_derived(events, [rejected(events, "no connection to JobMaster jm-old of job job-1")])
    assert "a1" in te.te.table.slots


def test_te_17_a_job_master_heartbeat_timeout_disconnects_and_registers_again():
    te = TE()
    te.request(0, "a1", at=1_000)
    te.connect()
    te.submit("a1")
    events = te.apply(JobMasterHeartbeatTimedOut, at=2_000, job_id=JOB, job_master_id=JM)
    cause = f"The heartbeat of JobManager with id {JM} timed out."
    assert_derived(events, [
        task_failed("att-1", cause, jm=None),
        expect(TaskManagerDisconnected, job_id=JOB, resource_id=TM, cause=cause),
        registration(),
    ])  # fmt: skip
    assert te.state("a1") is TaskSlotState.ALLOCATED
    assert_derived(te.connect(), [offered("a1")])


def test_te_18_a_resource_manager_heartbeat_timeout_drops_the_connection():
    te = TE()
    assert te.apply(ResourceManagerHeartbeatTimedOut, resource_manager_id="rm") == []
    assert_derived(te.request(0, "a1"), [
        allocation_failed("a1", "TaskManager is not connected to the resource manager rm."),
    ])  # fmt: skip
    events = te.apply(ResourceManagerHeartbeatTimedOut, resource_manager_id="rm")
    assert_derived(events, [rejected(events, "not connected to the resource manager rm")])
