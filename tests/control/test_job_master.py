"""JobMaster: whole jobs driven by events through the reducers (rules JM-*, ES-8, ES-9, JS-3,
RS-2..RS-9, SM-1/2, KV-3/KV-14), with a stand-in task runner answering deployments.

Where a test gives one input, it asserts the JobMaster's decisions from it whole and in order;
`run_one` also holds that the input led to nothing else."""

from __future__ import annotations

from dataclasses import FrozenInstanceError

import pytest

from jobledger.schemas import Event
from jobledger.schemas.cluster import (
    JobManagerDisconnected,
    JobMasterRegistrationAccepted,
    JobMasterRegistrationDeclined,
    JobMasterRegistrationRequested,
    ResourceManagerConnected,
    TaskManagerDisconnected,
)
from jobledger.schemas.jobs import (
    GlobalAggregateUpdated,
    GlobalAggregateUpdateRequested,
    JobCancellationRequested,
    JobMasterLeadershipGranted,
    JobStatusChanged,
    JobSubmitted,
    RescaleRequested,
)
from jobledger.schemas.kvstate import KvStateRegistered, KvStateRegistrationRejected
from jobledger.schemas.slots import (
    AllocationFailed,
    LastSlotOfTaskManagerFreed,
    SlotFreeRequested,
    SlotOfferAccepted,
    SlotOffered,
    SlotOfferRejected,
    SlotRequestCancelled,
    SlotRequested,
    SlotRequestFailed,
    SlotRequestFulfilled,
)
from jobledger.schemas.tasks import (
    ResultPartitionsReleased,
    TaskCancellationRequested,
    TaskDeploymentRequested,
)
from jobledger.schemas.types import (
    ConsumedPartitionGroup,
    ExecutionState,
    JobStatus,
    KeyGroupRange,
    OwnerKind,
    RestartStrategy,
    RestartStrategyKind,
    ScheduleMode,
)
from jobledger.services.control.driver import ReducerDriver
from jobledger.services.control.job_master import JobMasterConfig
from jobledger.services.control.key_groups import assign_to_key_group
from jobledger.services.control.queries import ArchivedExecution, ArchivedExecutionVertex

from ..support.events import (
    ANY,
    ANY_VALUE,
    UNKNOWN,
    Clock,
    Derived,
    Expected,
    assert_derived,
    derived_from,
    expect,
    rejection,
    types,
)
from ..support.jobs import FULL, JM, JOB, JobCluster, fails_first_attempt_of, fixed_delay, vertex

PIPELINE = [vertex("src", 2), vertex("sink", 2, ("src", "ALL_TO_ALL", "PIPELINED"))]
PRODUCER = "jobmaster"
SLOT_POOL = "slotpool"


def group(first: int, count: int) -> ConsumedPartitionGroup:
    return ConsumedPartitionGroup(first_subtask_index=first, number_of_subtasks=count)


def run_one(c: JobCluster, event: Event) -> Derived:
    """Run one input to quiescence; everything it led to, to be expected whole as the
    JobMaster's decisions from it (anything another owner made of them shows as unexpected)."""
    return Derived(c.run([event])[1:], event, PRODUCER)


def rejected(cause: Event, reason: str):
    return rejection(cause, OwnerKind.JOB, JOB, reason)


def pooled(cls: type[Event], /, **fields) -> Expected:
    """A decision of the JobMaster's SlotPool, which the pool signs in its own name."""
    return expect(cls, producer=SLOT_POOL, **fields)


def pool_rejected(cause: Event, reason: str) -> Expected:
    """The SlotPool's refusal of `cause`, in its own name."""
    refusal = rejected(cause, reason)
    return Expected(refusal.cls, {**refusal.fields, "producer": SLOT_POOL})


def status(before: JobStatus, after: JobStatus, cause: str | None = None):
    return expect(JobStatusChanged, job_id=JOB, from_status=before, to_status=after, cause=cause)


def kv_rejected(vertex_id: str, name: str, reason: str, job: str = JOB):
    return expect(
        KvStateRegistrationRejected, job_id=job, job_vertex_id=vertex_id,
        registration_name=name, reason=reason,
    )  # fmt: skip


def cancel_task(deployment):
    return expect(
        TaskCancellationRequested, job_id=JOB, resource_id=deployment.resource_id,
        execution_attempt_id=deployment.execution_attempt_id,
    )  # fmt: skip


def test_an_eager_job_deploys_everything_once_all_slots_arrive_and_finishes():
    c = JobCluster()
    c.submit(PIPELINE)
    deployed = c.deployments()
    assert sorted((d.vertex_id, d.subtask_index) for d in deployed) == [
        ("sink", 0), ("sink", 1), ("src", 0), ("src", 1),
    ]  # fmt: skip
    sink = next(d for d in deployed if d.vertex_id == "sink")
    assert sink.inputs[0].consumed_partition_group == group(0, 2)
    assert sink.inputs[0].consumed_subtask_indexes == [], "a range, never the producers listed"
    assert sink.max_parallelism == 128 and sink.number_of_subtasks == 2
    assert {d.job_master_id for d in deployed} == {JM}
    c.play()
    assert c.statuses() == ["CREATED", "RUNNING", "FINISHED"]
    assert types(c.log).count("SlotFreeRequested") == 4, "every slot goes back at the end"
    assert c.jm.pool.allocated_slots == {} and c.jm.pool.available_slots == {}


def test_sm_2_lazy_from_sources_deploys_consumers_after_their_blocking_inputs_finish():
    c = JobCluster()
    c.submit([vertex("src", 2), vertex("sink", 1, ("src", "POINTWISE", "BLOCKING"))],
             mode=ScheduleMode.LAZY_FROM_SOURCES)  # fmt: skip
    assert [d.vertex_id for d in c.deployments()] == ["src", "src"]
    first = c.deployments()[0].execution_attempt_id
    c.report(first, ExecutionState.RUNNING)
    c.report(first, ExecutionState.FINISHED)
    assert [d.vertex_id for d in c.deployments()] == ["src", "src"], "one producer still runs"
    c.play()
    assert [d.vertex_id for d in c.deployments()] == ["src", "src", "sink"]
    assert c.deployments()[2].inputs[0].consumed_partition_group == group(0, 2)
    assert c.statuses()[-1] == "FINISHED"


def test_a_job_that_ended_releases_its_results_on_every_task_executor_a_producer_ran_on():
    """Flink's JobMaster releases the partitions it tracks once the job terminates: the last
    report that finishes the job also tells tm-0 and tm-1, where the two `src` subtasks
    produced, to release the job's result partitions; no restart can read them again."""
    c = JobCluster(task_executors=2, slots=1)
    c.submit([vertex("src", 2), vertex("sink", 2, ("src", "ALL_TO_ALL", "BLOCKING"))],
             mode=ScheduleMode.LAZY_FROM_SOURCES)  # fmt: skip
    for d in c.deployments():
        c.report(d.execution_attempt_id, ExecutionState.RUNNING)
        c.report(d.execution_attempt_id, ExecutionState.FINISHED)
    sinks = c.deployments()[2:]
    assert [(d.vertex_id, d.resource_id) for d in sinks] == [("sink", "tm-0"), ("sink", "tm-1")]
    for d in sinks:
        c.report(d.execution_attempt_id, ExecutionState.RUNNING)
    c.report(sinks[0].execution_attempt_id, ExecutionState.FINISHED)
    assert types(c.log).count("ResultPartitionsReleased") == 0, "not while the job runs"
    last = c.state_report(sinks[1].execution_attempt_id, ExecutionState.FINISHED)
    c.run([last])
    assert_derived(derived_from(c.log, last, PRODUCER), [
        status(JobStatus.RUNNING, JobStatus.FINISHED),
        *(pooled(SlotFreeRequested, job_id=JOB, resource_id=d.resource_id,
                 allocation_id=d.allocation_id, cause="SlotPool stopped: job FINISHED")
          for d in sinks),
        expect(ResultPartitionsReleased, job_id=JOB, resource_id="tm-0",
               job_status=JobStatus.FINISHED),
        expect(ResultPartitionsReleased, job_id=JOB, resource_id="tm-1",
               job_status=JobStatus.FINISHED),
    ])  # fmt: skip


def test_rs_6_a_task_failing_once_under_fixed_delay_restarts_after_the_delay_and_finishes():
    c = JobCluster()
    c.submit(PIPELINE, restart=fixed_delay(attempts=2, delay_ms=5_000))
    c.play(fails_first_attempt_of("sink"))
    assert c.statuses() == ["CREATED", "RUNNING", "RESTARTING"]
    failed_at = next(e.event_time for e in c.log if getattr(e, "to_status", None) == "RESTARTING")
    c.tick(failed_at + 4_999)
    assert c.jm.status.value == "RESTARTING"
    c.tick(failed_at + 5_000)
    assert c.statuses()[-1] == "RUNNING"
    assert len(c.deployments()) == 8 and {d.attempt_number for d in c.deployments()[4:]} == {1}
    c.play(fails_first_attempt_of("sink"))
    assert c.statuses() == ["CREATED", "RUNNING", "RESTARTING", "RUNNING", "FINISHED"]


def test_rs_7_without_restart_a_failed_task_fails_the_job():
    c = JobCluster()
    c.submit(PIPELINE)
    c.play(fails_first_attempt_of("src"))
    assert c.statuses()[-2:] == ["FAILING", "FAILED"]
    assert "java.lang.RuntimeException: boom" in c.jm.failure_cause
    assert c.jm.pool.allocated_slots == {}


def test_rs_7_a_slot_that_never_comes_fails_the_job_with_no_resource_available():
    c = JobCluster(task_executors=1, slots=1)
    c.submit(PIPELINE)
    c.tick(c.clock.now + 300_000)
    assert c.statuses()[-1] == "FAILED"
    assert "NoResourceAvailableException" in c.jm.failure_cause
    assert "within slot request timeout" in c.jm.failure_cause


def test_rs_1_rs_9_restarts_stop_when_the_attempts_are_used_up():
    c = JobCluster()
    c.submit([vertex("only", 1)], restart=fixed_delay(attempts=1, delay_ms=0))
    c.play(lambda d: [ExecutionState.RUNNING, ExecutionState.FAILED])
    c.tick(c.clock.now)
    c.play(lambda d: [ExecutionState.RUNNING, ExecutionState.FAILED])
    assert c.statuses() == [
        "CREATED", "RUNNING", "RESTARTING", "RUNNING", "FAILING", "FAILED",
    ]  # fmt: skip


def test_es_8_a_state_for_an_unknown_attempt_is_rejected():
    c = JobCluster()
    c.submit(PIPELINE)
    report = c.state_report("no-such-attempt", ExecutionState.RUNNING)
    assert_derived(
        run_one(c, report), [rejected(report, "no current execution attempt no-such-attempt")]
    )


def test_an_illegal_report_is_rejected_and_the_attempt_fails():
    c = JobCluster()
    c.submit([vertex("only", 1)])
    attempt = c.deployments()[0].execution_attempt_id
    report = c.state_report(attempt, ExecutionState.SCHEDULED)
    # only the rejection: the attempt stays DEPLOYING (Flink would fail it: "TaskManager sent
    # illegal state update"), though the test's name says it fails
    assert_derived(run_one(c, report), [rejected(report, "a task cannot report SCHEDULED")])
    assert c.jm.graph.find(attempt).current.state is ExecutionState.DEPLOYING


def test_a_stale_leaders_event_is_rejected():
    c = JobCluster()
    c.submit([vertex("only", 1)])
    attempt = c.deployments()[0].execution_attempt_id
    report = c.state_report(attempt, ExecutionState.RUNNING, job_master_id="jm-old")
    assert_derived(run_one(c, report), [rejected(report, "JobMasterId jm-old is not the leader's")])
    assert c.jm.graph.find(attempt).current.state is ExecutionState.DEPLOYING


def test_jm_9_new_leadership_suspends_and_starts_again_same_id_is_a_no_op():
    c = JobCluster()
    c.submit([vertex("only", 1)])
    before = c.jm.to_dict()
    assert c.run([c.clock(JobMasterLeadershipGranted, job_id=JOB, job_master_id=JM)])[1:] == []
    assert c.jm.to_dict() == before
    c.run([
        c.clock(JobMasterLeadershipGranted, job_id=JOB, job_master_id="jm-2"),
        c.clock(ResourceManagerConnected, job_id=JOB, resource_manager_id="resourcemanager"),
    ])  # fmt: skip
    assert c.statuses() == ["CREATED", "RUNNING", "SUSPENDED", "CREATED", "RUNNING"]
    assert {d.job_master_id for d in c.deployments()} == {JM, "jm-2"}
    assert c.jm.job_master_id == "jm-2"


def test_js_3_cancellation_ends_in_canceled_once_every_task_is_canceled():
    c = JobCluster()
    c.submit(PIPELINE)
    for d in c.deployments():
        c.report(d.execution_attempt_id, ExecutionState.RUNNING)
    cancel = c.clock(JobCancellationRequested, job_id=JOB)
    events = c.run([cancel])
    assert types(events).count("TaskCancellationRequested") == 4
    assert_derived(derived_from(events, cancel, PRODUCER), [
        status(JobStatus.RUNNING, JobStatus.CANCELLING, "cancelled by request"),
        *[cancel_task(d) for d in c.deployments()],
    ])  # fmt: skip
    assert c.jm.status.value == "CANCELLING"
    for d in c.deployments():
        c.report(d.execution_attempt_id, ExecutionState.CANCELED)
    assert c.statuses()[-2:] == ["CANCELLING", "CANCELED"]
    again = c.clock(JobCancellationRequested, job_id=JOB)
    assert_derived(
        run_one(c, again), [rejected(again, "job job-1 cannot be cancelled in CANCELED")]
    )


def test_rescale_builds_a_new_graph_at_the_new_parallelism_and_restarts():
    c = JobCluster()
    c.submit(PIPELINE)
    for d in c.deployments():
        c.report(d.execution_attempt_id, ExecutionState.RUNNING)
    rescale = c.clock(RescaleRequested, job_id=JOB, new_parallelism=0)
    assert_derived(run_one(c, rescale), [rejected(rescale, "parallelism must be > 0, not 0")])
    c.run([c.clock(RescaleRequested, job_id=JOB, new_parallelism=3)])
    for d in c.deployments():
        c.report(d.execution_attempt_id, ExecutionState.CANCELED)
    assert c.statuses()[-2:] == ["RESTARTING", "RUNNING"]
    assert {jv.parallelism for jv in c.jm.graph.vertices.values()} == {3}
    assert len(c.deployments()) == 4 + 6
    c.play()
    assert c.statuses()[-1] == "FINISHED"


def test_an_invalid_job_graph_is_rejected_with_the_reason():
    for vertices, reason in [
        ([vertex("a", 0)], "vertex a: parallelism 0 is not in 1..32768"),
        ([vertex("a", 4, max_p=2)], "vertex a: parallelism 4 exceeds its max parallelism 2"),
        ([vertex("a", 1, ("b", "ALL_TO_ALL", "BLOCKING")),
          vertex("b", 1, ("a", "ALL_TO_ALL", "BLOCKING"))], "the JobGraph has a cycle"),
        ([vertex("a", 1, ("zzz", "ALL_TO_ALL", "PIPELINED"))], "vertex a reads unknown vertex zzz"),
    ]:  # fmt: skip
        c = JobCluster()
        submitted, *events = c.submit(vertices, lead=False)
        assert_derived(
            events, [rejected(submitted, f"invalid JobGraph: {reason}")],
            cause=submitted, producer=PRODUCER,
        )  # fmt: skip
        assert c.driver.job_masters[JOB].job is None


def test_a_second_submission_is_rejected():
    c = JobCluster()
    c.submit([vertex("a", 1)])
    again = c.clock(JobSubmitted, job_id=JOB, job_name="again", vertices=[vertex("b", 1)])
    assert_derived(run_one(c, again), [rejected(again, "job job-1 was already submitted")])


def test_jm_6_a_lost_task_manager_without_restart_fails_the_running_job():
    c = JobCluster(task_executors=1)
    c.submit([vertex("only", 1)])
    attempt = c.deployments()[0].execution_attempt_id
    c.report(attempt, ExecutionState.RUNNING)
    c.run([c.clock(TaskManagerDisconnected, job_id=JOB, resource_id="tm-0", cause="heartbeat")])
    assert c.statuses()[-1] == "FAILED"


def test_jm_1_offers_from_an_unknown_task_manager_are_rejected():
    c = JobCluster()
    c.submit([vertex("only", 1)])
    offer = c.clock(
        SlotOffered, job_id=JOB, job_master_id=JM, resource_id="tm-stranger", slot_index=0,
        allocation_id="a", resource_profile=ANY,
    )  # fmt: skip
    assert_derived(derived_from(c.run([offer]), offer, PRODUCER), [pooled(
        SlotOfferRejected, job_id=JOB, job_master_id=JM, resource_id="tm-stranger", slot_index=0,
        allocation_id="a", reason="TaskManager tm-stranger is not registered at the job",
    )])  # fmt: skip


def test_jm_4_fail_slot_of_an_unknown_allocation_is_ignored_with_a_reason():
    c = JobCluster()
    c.submit([vertex("only", 1)])
    failed = c.clock(AllocationFailed, job_id=JOB, allocation_id="x", cause="y")
    assert_derived(
        run_one(c, failed), [pool_rejected(failed, "allocation x is unknown to the pool")]
    )


def test_kv_14_registration_for_an_unknown_job_is_rejected():
    driver = ReducerDriver()
    clock = Clock()
    event = clock(
        KvStateRegistered, job_id="ghost", job_vertex_id="v",
        key_group_range=KeyGroupRange(start_key_group=0, end_key_group=0),
        registration_name="n", kv_state_id="k", server_host="h", server_port=1,
    )  # fmt: skip
    assert_derived(
        driver.process(event), [kv_rejected("v", "n", "Job ghost not found", job="ghost")],
        cause=event, producer=PRODUCER,
    )  # fmt: skip


def test_kv_3_a_name_clash_fails_the_job_without_restart():
    c = JobCluster()
    c.submit(PIPELINE, restart=fixed_delay(attempts=10, delay_ms=0))
    for d in c.deployments():
        c.report(d.execution_attempt_id, ExecutionState.RUNNING)

    def register(vertex_id: str, n: int):
        return c.run([c.clock(
            KvStateRegistered, job_id=JOB, job_master_id=JM, job_vertex_id=vertex_id,
            key_group_range=KeyGroupRange(start_key_group=0, end_key_group=63),
            registration_name="counts", kv_state_id=f"kv-{n}", server_host="h", server_port=n,
        )])  # fmt: skip

    assert types(register("src", 1)) == ["KvStateRegistered"]
    clash = register("sink", 2)
    reason = ("Registration name clash. KvState with name 'counts' has already been registered "
              "by another operator (src).")  # fmt: skip
    deployed = {(d.vertex_id, d.subtask_index): d for d in c.deployments()}
    # the clash fails the sink's first subtask without restarts: every other task is cancelled
    assert_derived(derived_from(clash, clash[0], PRODUCER), [
        kv_rejected("sink", "counts", reason),
        status(JobStatus.RUNNING, JobStatus.FAILING,
               f"{deployed['sink', 0].execution_attempt_id}: {reason}"),
        *[cancel_task(deployed[key]) for key in [("src", 0), ("src", 1), ("sink", 1)]],
    ])  # fmt: skip
    assert c.jm.status.value == "FAILING"
    for d in c.deployments():
        c.report(d.execution_attempt_id, ExecutionState.CANCELED)
    assert c.statuses()[-1] == "FAILED"
    assert "Registration name clash" in c.jm.failure_cause


def test_jm_2_a_task_manager_registering_twice_is_acknowledged_both_times():
    c = JobCluster()
    c.submit([vertex("only", 1)])
    for _ in range(2):
        register = c.clock(JobMasterRegistrationRequested, job_id=JOB, job_master_id=JM,
                           resource_id="tm-0")  # fmt: skip
        assert_derived(derived_from(c.run([register]), register, PRODUCER), [
            pooled(JobMasterRegistrationAccepted, job_id=JOB, job_master_id=JM, resource_id="tm-0")
        ])  # fmt: skip
    assert list(c.jm.pool.registered_task_managers).count("tm-0") == 1


def test_jm_4_fail_slot_from_an_unknown_task_manager_is_ignored_with_a_warning():
    c = JobCluster()
    c.submit([vertex("only", 1)])
    allocation = c.deployments()[0].allocation_id
    failed = c.clock(AllocationFailed, job_id=JOB, allocation_id=allocation, cause="y",
                     resource_id="tm-ghost")  # fmt: skip
    assert_derived(run_one(c, failed), [
        pool_rejected(failed, "failSlot from unknown TaskManager tm-ghost ignored (JM-4)"),
    ])  # fmt: skip
    assert c.jm.graph.find(c.deployments()[0].execution_attempt_id).current.has_slot


def test_rs_2_rs_3_the_restart_counter_counts_restarts_only():
    c = JobCluster()
    c.submit([vertex("only", 1)], restart=fixed_delay(attempts=1, delay_ms=0))
    c.play(lambda d: [ExecutionState.RUNNING, ExecutionState.FAILED])
    c.tick(c.clock.now)
    assert c.jm.to_dict()["restarts"] == 1
    c.play(lambda d: [ExecutionState.RUNNING, ExecutionState.FAILED])
    assert c.jm.status.value == "FAILED" and c.jm.to_dict()["restarts"] == 1


def test_es_9_a_restarted_vertex_is_reset_to_a_new_created_attempt_before_scheduling():
    c = JobCluster()
    c.submit([vertex("only", 1)], restart=fixed_delay(attempts=1, delay_ms=0))
    first = c.deployments()[0]
    c.play(lambda d: [ExecutionState.FAILED] if d.attempt_number == 0 else [])
    c.tick(c.clock.now)
    ev = c.jm.graph.vertices["only"].subtasks[0]
    assert [e.attempt_id for e in ev.prior] == [first.execution_attempt_id]
    assert ev.current.attempt_number == 1 and ev.current.state is ExecutionState.DEPLOYING


def test_the_archived_graph_is_a_frozen_copy_that_later_events_leave_as_it_was():
    """Read models are handed `archived_graph()`, never the live graph: what they hold
    stays the graph as of when they asked, however the job moves on."""
    c = JobCluster()
    c.submit([vertex("only", 1)], restart=fixed_delay(attempts=1, delay_ms=0))
    first = c.deployments()[0]
    before = c.jm.archived_graph()
    c.play(lambda d: [ExecutionState.FAILED] if d.attempt_number == 0 else [])
    c.tick(c.clock.now)
    after = c.jm.archived_graph()
    archived = ArchivedExecution(
        first.execution_attempt_id, 0, ExecutionState.DEPLOYING, first.execution_attempt_id,
        first.allocation_id, first.resource_id, first.slot_index,
    )  # fmt: skip
    only = before.vertex("only")
    assert (only.parallelism, only.max_parallelism) == (1, 128)
    assert before.execution_vertices() == [ArchivedExecutionVertex("only", 0, (archived,))]
    ev = after.execution_vertices()[0]
    assert [(a.attempt_number, a.state) for a in ev.attempts] == [
        (0, ExecutionState.FAILED), (1, ExecutionState.DEPLOYING),
    ]  # fmt: skip
    assert after.attempt(first.execution_attempt_id) == (ev, ev.prior[0])
    with pytest.raises(FrozenInstanceError):
        ev.current.state = ExecutionState.FINISHED  # type: ignore[misc]


def test_sm_1_lazy_with_batch_slot_requests_asks_for_batch_slots():
    c = JobCluster()
    c.submit([vertex("only", 2)], mode=ScheduleMode.LAZY_FROM_SOURCES_WITH_BATCH_SLOT_REQUEST)
    requests = [e for e in c.log if e.type_name() == "SlotRequested"]
    assert len(requests) == 2
    # sent when the ResourceManager connects: batch requests, with no timeout of their own
    connected = next(e for e in c.log if isinstance(e, ResourceManagerConnected))
    assert_derived(derived_from(c.log, connected, PRODUCER), [pooled(
        SlotRequested, job_id=JOB, job_master_id=JM, slot_request_id=ANY_VALUE,
        allocation_id=ANY_VALUE, resource_profile=UNKNOWN, batch_request=True, timeout_ms=0,
    )] * 2)  # fmt: skip
    c.play()
    assert c.statuses()[-1] == "FINISHED"


def test_queryable_state_lookup_by_key_through_the_job_master():
    c = JobCluster()
    c.submit([vertex("count", 2, max_p=8)])
    for index in range(2):
        c.run([c.clock(
            KvStateRegistered, job_id=JOB, job_master_id=JM, job_vertex_id="count",
            key_group_range=KeyGroupRange(start_key_group=4 * index, end_key_group=4 * index + 3),
            registration_name="word-counts", kv_state_id=f"kv-{index}", server_host="10.0.0.9",
            server_port=9069 + index,
        )])  # fmt: skip
    found = c.jm.kv_state_location("word-counts", "hello")
    expected_index = 0 if assign_to_key_group("hello", 8) < 4 else 1
    assert (found.kv_state_id, found.server_port) == (f"kv-{expected_index}", 9069 + expected_index)
    assert c.jm.kv_state_location("nothing", "hello") is None


def test_rs_8_requests_of_outdated_attempts_are_withdrawn_and_the_job_keeps_running():
    c = JobCluster(task_executors=1, slots=1, config=FULL)
    c.submit([vertex("only", 2)], restart=fixed_delay(attempts=3, delay_ms=0))
    holder = next(e for e in c.log if e.type_name() == "SlotRequestFulfilled")
    waiting = next(r for r in c.jm.pool.pending_requests.values())
    lost = c.clock(AllocationFailed, job_id=JOB, allocation_id=holder.allocation_id,
                   cause="slot lost")  # fmt: skip
    withdrawn = (f"Pending slot request with SlotRequestId {waiting.slot_request_id} has been "
                 "released.")  # fmt: skip
    slot = dict(job_id=JOB, slot_request_id=waiting.slot_request_id,
                allocation_id=waiting.allocation_id, cause=withdrawn)  # fmt: skip
    new_request = pooled(
        SlotRequested, job_id=JOB, job_master_id=JM, slot_request_id=ANY_VALUE,
        allocation_id=ANY_VALUE, resource_profile=UNKNOWN, timeout_ms=300_000,
    )  # fmt: skip
    assert_derived(derived_from(c.run([lost]), lost, PRODUCER), [
        pooled(SlotRequestFailed, job_id=JOB, slot_request_id=holder.slot_request_id,
               allocation_id=holder.allocation_id, cause="slot lost"),
        pooled(SlotFreeRequested, job_id=JOB, resource_id="tm-0",
               allocation_id=holder.allocation_id, cause="slot lost"),
        pooled(LastSlotOfTaskManagerFreed, job_id=JOB, resource_id="tm-0"),
        status(JobStatus.RUNNING, JobStatus.RESTARTING, f"{holder.slot_request_id}: slot lost"),
        # the outdated attempt's request is withdrawn
        pooled(SlotRequestFailed, **slot), pooled(SlotRequestCancelled, **slot),
        status(JobStatus.RESTARTING, JobStatus.RUNNING),
        new_request, new_request,
        # tm-0 holds no slot of the pool any more, and no partitions: let go (JM-4)
        expect(JobManagerDisconnected, job_id=JOB, job_master_id=JM, resource_id="tm-0",
               cause="No more slots registered at JobMaster tm-0."),
    ])  # fmt: skip
    c.tick(c.clock.now)
    assert c.jm.status.value == "RUNNING"
    assert {ev.current.attempt_number for ev in c.jm.graph.execution_vertices()} == {1}


def test_an_inverted_or_negative_key_group_range_is_rejected():
    c = JobCluster()
    c.submit([vertex("count", 1, max_p=8)])
    for start, end in [(5, 2), (-1, 3)]:
        registered = c.clock(
            KvStateRegistered, job_id=JOB, job_master_id=JM, job_vertex_id="count",
            key_group_range=KeyGroupRange(start_key_group=start, end_key_group=end),
            registration_name="counts", kv_state_id="kv", server_host="h", server_port=1,
        )  # fmt: skip
        assert_derived(run_one(c, registered), [
            kv_rejected("count", "counts", f"invalid key group range [{start}, {end}]"),
        ])  # fmt: skip
    assert c.jm.registry.locations == {}


SUPPRESSED = (
    "java.lang.RuntimeException: wrapped\n\tat org.example.Op.run(Op.java:1)\nCaused by: "
    "org.apache.flink.runtime.execution.SuppressRestartsException: Unrecoverable failure."
)


def test_rs_4_a_suppress_restarts_exception_in_the_cause_chain_fails_the_job_without_restart():
    c = JobCluster()
    c.submit(PIPELINE, restart=fixed_delay(attempts=10, delay_ms=0))
    deployed = {(d.vertex_id, d.subtask_index): d for d in c.deployments()}
    for d in deployed.values():
        c.report(d.execution_attempt_id, ExecutionState.RUNNING)
    failing = deployed["src", 0].execution_attempt_id
    report = c.state_report(failing, ExecutionState.FAILED, SUPPRESSED)
    assert_derived(run_one(c, report), [
        status(JobStatus.RUNNING, JobStatus.FAILING, f"{failing}: {SUPPRESSED}"),
        *[cancel_task(deployed[key]) for key in [("src", 1), ("sink", 0), ("sink", 1)]],
    ])  # fmt: skip
    for key in [("src", 1), ("sink", 0), ("sink", 1)]:
        c.report(deployed[key].execution_attempt_id, ExecutionState.CANCELED)
    assert c.statuses()[-2:] == ["FAILING", "FAILED"]
    assert c.jm.to_dict()["restarts"] == 0


def test_rs_4_only_an_error_of_that_type_suppresses_restarts_not_its_name_in_a_message():
    c = JobCluster()
    c.submit([vertex("only", 1)], restart=fixed_delay(attempts=10, delay_ms=0))
    attempt = c.deployments()[0].execution_attempt_id
    c.report(attempt, ExecutionState.RUNNING)
    error = "java.lang.RuntimeException: not a SuppressRestartsException: at all"
    report = c.state_report(attempt, ExecutionState.FAILED, error)
    c.run([report])
    assert c.statuses()[-2:] == ["RESTARTING", "RUNNING"]
    assert c.jm.to_dict()["restarts"] == 1


def test_es_3_cancelling_an_eager_job_deploys_nothing_and_ends_canceled_at_once():
    """One slot for two subtasks: src holds it, sink waits. Cancelling bumps every vertex's
    version first, so the slot src gives back is refused for the outdated sink (not deployed),
    and with nothing deployed the job is CANCELED at once."""
    c = JobCluster(task_executors=1, slots=1)
    c.submit([vertex("src", 1), vertex("sink", 1, ("src", "POINTWISE", "PIPELINED"))])
    assert c.deployments() == []
    src, sink = (c.jm.scheduler.graph.vertices[v].subtasks[0].current for v in ("src", "sink"))
    held, own = src.allocation_id, c.jm.pool.pending_requests[sink.attempt_id].allocation_id
    cancel = c.clock(JobCancellationRequested, job_id=JOB)
    c.run([cancel])
    assert_derived(derived_from(c.log, cancel, PRODUCER), [
        status(JobStatus.RUNNING, JobStatus.CANCELLING, "cancelled by request"),
        pooled(SlotRequestFulfilled, job_id=JOB, slot_request_id=sink.attempt_id,
               allocation_id=held, resource_id="tm-0", slot_index=0),
        pooled(SlotRequestCancelled, job_id=JOB, slot_request_id=sink.attempt_id,
               allocation_id=own,
               cause=f"slot request {sink.attempt_id} fulfilled by allocation {held}"),
        status(JobStatus.CANCELLING, JobStatus.CANCELED),
        pooled(SlotFreeRequested, job_id=JOB, resource_id="tm-0", allocation_id=held,
               cause="SlotPool stopped: job CANCELED"),
    ])  # fmt: skip
    assert c.deployments() == []


PIPELINES = [vertex("src", 2), vertex("sink", 2, ("src", "POINTWISE", "PIPELINED"))]
"""Two pipelined regions: {src[0], sink[0]} and {src[1], sink[1]}."""


def running(c: JobCluster) -> dict[tuple[str, int], TaskDeploymentRequested]:
    deployed = {(d.vertex_id, d.subtask_index): d for d in c.deployments()}
    for d in deployed.values():
        c.report(d.execution_attempt_id, ExecutionState.RUNNING)
    return deployed


def test_region_failover_restarts_only_the_failed_tasks_pipelined_region():
    """RestartPipelinedRegionFailoverStrategy, the default: src[0] failing cancels sink[0]
    only; once it is cancelled and the delay passed, src[0] and sink[0] run again while the
    other region ran on (RS-9: RESTARTING until then)."""
    c = JobCluster()
    c.submit(PIPELINES, restart=fixed_delay(attempts=3, delay_ms=100))
    deployed = running(c)
    failing = deployed["src", 0].execution_attempt_id
    report = c.state_report(failing, ExecutionState.FAILED, "java.lang.RuntimeException: boom")
    assert_derived(run_one(c, report), [
        status(JobStatus.RUNNING, JobStatus.RESTARTING,
               f"{failing}: java.lang.RuntimeException: boom"),
        cancel_task(deployed["sink", 0]),
    ])  # fmt: skip
    c.report(deployed["sink", 0].execution_attempt_id, ExecutionState.CANCELED)
    c.tick(c.clock.now + 100)
    assert c.statuses()[-1] == "RUNNING"
    again = [(d.vertex_id, d.subtask_index, d.attempt_number) for d in c.deployments()[4:]]
    assert again == [("src", 0, 1), ("sink", 0, 1)]
    attempts = {(ev.job_vertex_id, ev.subtask_index): ev.current.attempt_number
                for ev in c.jm.graph.execution_vertices()}  # fmt: skip
    assert attempts == {("src", 0): 1, ("src", 1): 0, ("sink", 0): 1, ("sink", 1): 0}


def test_full_failover_restarts_every_vertex():
    c = JobCluster(config=FULL)
    c.submit(PIPELINES, restart=fixed_delay(attempts=3, delay_ms=100))
    deployed = running(c)
    failing = deployed["src", 0].execution_attempt_id
    report = c.state_report(failing, ExecutionState.FAILED, "java.lang.RuntimeException: boom")
    assert_derived(run_one(c, report), [
        status(JobStatus.RUNNING, JobStatus.RESTARTING,
               f"{failing}: java.lang.RuntimeException: boom"),
        *[cancel_task(deployed[key]) for key in [("src", 1), ("sink", 0), ("sink", 1)]],
    ])  # fmt: skip


def test_rs_5_a_global_failure_restarts_every_vertex_whatever_the_strategy():
    """CANCELED reported for a FINISHED task is a race ES-7 fails globally: every vertex of
    both regions is cancelled for the restart, the finished one staying FINISHED (ES-3)."""
    c = JobCluster()
    c.submit(PIPELINES, restart=fixed_delay(attempts=3, delay_ms=100))
    deployed = running(c)
    racing = deployed["src", 0].execution_attempt_id
    c.report(racing, ExecutionState.FINISHED)
    report = c.state_report(racing, ExecutionState.CANCELED)
    assert_derived(run_one(c, report), [
        status(JobStatus.RUNNING, JobStatus.RESTARTING,
               f"{racing}: Asynchronous race: Found FINISHED while expecting CANCELING"),
        *[cancel_task(deployed[key]) for key in [("src", 1), ("sink", 0), ("sink", 1)]],
    ])  # fmt: skip
    for key in [("src", 1), ("sink", 0), ("sink", 1)]:
        c.report(deployed[key].execution_attempt_id, ExecutionState.CANCELED)
    c.tick(c.clock.now + 100)
    assert {d.attempt_number for d in c.deployments()[4:]} == {1}
    assert len(c.deployments()) == 8, "all four, the finished one too, run again"


def test_rs_9_a_second_region_failing_meanwhile_keeps_the_job_restarting_until_both_ran():
    c = JobCluster()
    c.submit(PIPELINES, restart=fixed_delay(attempts=3, delay_ms=100))
    deployed = running(c)
    c.report(deployed["src", 0].execution_attempt_id, ExecutionState.FAILED, "E: one")
    c.report(deployed["sink", 0].execution_attempt_id, ExecutionState.CANCELED)
    c.tick(c.clock.now + 50)
    c.report(deployed["src", 1].execution_attempt_id, ExecutionState.FAILED, "E: two")
    c.report(deployed["sink", 1].execution_attempt_id, ExecutionState.CANCELED)
    c.tick(c.clock.now + 50)
    assert c.statuses()[-1] == "RESTARTING", "the second region's delay has not passed"
    assert [(d.vertex_id, d.subtask_index) for d in c.deployments()[4:]] == [
        ("src", 0), ("sink", 0),
    ]  # fmt: skip
    c.tick(c.clock.now + 100)
    assert c.statuses()[-1] == "RUNNING" and c.jm.restarts == 2
    assert [(d.vertex_id, d.subtask_index) for d in c.deployments()[6:]] == [
        ("src", 1), ("sink", 1),
    ]  # fmt: skip


def test_es_3_a_failover_deploys_nothing_of_the_region_it_cancels():
    """LAZY, one slot: src runs, sink waits for a slot. src failing marks the region modified
    before its slot goes back, so the slot is refused for sink (no deployment to cancel) and
    the region restarts once the delay passed."""
    c = JobCluster(task_executors=1, slots=1)
    c.submit([vertex("src", 1), vertex("sink", 1, ("src", "POINTWISE", "PIPELINED"))],
             mode=ScheduleMode.LAZY_FROM_SOURCES,
             restart=fixed_delay(attempts=3, delay_ms=100))  # fmt: skip
    src = c.deployments()[0]
    c.report(src.execution_attempt_id, ExecutionState.RUNNING)
    sink = c.jm.graph.vertices["sink"].subtasks[0].current
    own = c.jm.pool.pending_requests[sink.attempt_id].allocation_id
    report = c.state_report(src.execution_attempt_id, ExecutionState.FAILED, "E: boom")
    c.run([report])
    assert_derived(derived_from(c.log, report, PRODUCER), [
        pooled(SlotRequestFulfilled, job_id=JOB, slot_request_id=sink.attempt_id,
               allocation_id=src.allocation_id, resource_id="tm-0", slot_index=0),
        pooled(SlotRequestCancelled, job_id=JOB, slot_request_id=sink.attempt_id,
               allocation_id=own,
               cause=f"slot request {sink.attempt_id} fulfilled by allocation "
                     f"{src.allocation_id}"),
        status(JobStatus.RUNNING, JobStatus.RESTARTING, f"{src.execution_attempt_id}: E: boom"),
    ])  # fmt: skip
    assert c.deployments() == [src]
    c.tick(c.clock.now + 100)
    assert [(d.vertex_id, d.attempt_number) for d in c.deployments()] == [("src", 0), ("src", 1)]


def test_rs_10_the_cluster_restart_strategy_serves_jobs_that_configure_none():
    c = JobCluster(config=JobMasterConfig(restart_strategy=fixed_delay(attempts=1, delay_ms=0)))
    c.submit([vertex("only", 1)])
    c.play(lambda d: [ExecutionState.RUNNING, ExecutionState.FAILED])
    assert c.statuses() == [
        "CREATED", "RUNNING", "RESTARTING", "RUNNING", "FAILING", "FAILED",
    ], "the cluster's one restart attempt, then no more"  # fmt: skip


def test_rs_10_a_jobs_own_strategy_none_included_beats_the_clusters():
    c = JobCluster(config=JobMasterConfig(restart_strategy=fixed_delay(attempts=5, delay_ms=0)))
    c.submit([vertex("only", 1)], restart=RestartStrategy(kind=RestartStrategyKind.NONE))
    c.play(lambda d: [ExecutionState.RUNNING, ExecutionState.FAILED])
    assert c.statuses() == ["CREATED", "RUNNING", "FAILING", "FAILED"]


def test_rs_10_without_any_configured_strategy_a_job_does_not_restart():
    """No checkpointing here, so the cluster default is no restart (RS-10)."""
    c = JobCluster()
    c.submit([vertex("only", 1)], restart=RestartStrategy())
    c.play(lambda d: [ExecutionState.RUNNING, ExecutionState.FAILED])
    assert c.statuses() == ["CREATED", "RUNNING", "FAILING", "FAILED"]


def test_the_failover_strategy_option_is_checked():
    with pytest.raises(ValueError, match="Unknown failover strategy: 'all'"):
        JobMasterConfig(failover_strategy="all")


def test_jm_3_a_registration_for_a_job_this_job_master_does_not_lead_is_declined():
    """The registration is routed by its JobID, so it reaches the JobMaster of the job it
    names; one naming a job with no leader (another job's TaskExecutor) is declined."""
    c = JobCluster()
    c.submit([vertex("only", 1)])
    register = c.clock(JobMasterRegistrationRequested, job_id="other-job", job_master_id=JM,
                       resource_id="tm-0")  # fmt: skip
    events = c.run([register])
    assert_derived(derived_from(events, register, PRODUCER), [
        pooled(JobMasterRegistrationDeclined, job_id="other-job", resource_id="tm-0",
               reason="job other-job has no JobMaster leader"),
    ])  # fmt: skip
    assert "tm-0" in c.jm.pool.registered_task_managers, "this job's registration stands"


def test_jm_7_a_restarting_job_still_accepts_slots():
    """testJobMasterAcceptsSlotsWhenJobIsRestarting: a day's restart delay, the TaskManager
    disconnected: the job is RESTARTING, and every slot another TaskManager offers is
    accepted."""
    c = JobCluster(task_executors=1, slots=2)
    c.submit([vertex("only", 1)], restart=fixed_delay(attempts=3, delay_ms=86_400_000))
    c.report(c.deployments()[0].execution_attempt_id, ExecutionState.RUNNING)
    c.run([c.clock(TaskManagerDisconnected, job_id=JOB, resource_id="tm-0", cause="gone")])
    assert c.jm.status is JobStatus.RESTARTING
    c.run([c.clock(JobMasterRegistrationRequested, job_id=JOB, job_master_id=JM,
                   resource_id="tm-9")])  # fmt: skip
    offers = [c.clock(SlotOffered, job_id=JOB, job_master_id=JM, resource_id="tm-9",
                      slot_index=i, allocation_id=f"x{i}", resource_profile=ANY)
              for i in range(2)]  # fmt: skip
    for offer in offers:
        assert_derived(derived_from(c.run([offer]), offer, PRODUCER), [
            pooled(SlotOfferAccepted, job_id=JOB, job_master_id=JM, resource_id="tm-9",
                   slot_index=offer.slot_index, allocation_id=offer.allocation_id),
        ])  # fmt: skip
    assert sorted(c.jm.pool.available_slots) == ["x0", "x1"]


def test_jm_8_the_job_master_id_fences_every_input_that_carries_one():
    """JobMasterId as fencing token: a report under another id is refused; after leadership
    passes to a new id, the old id is refused and the new one is followed."""
    c = JobCluster()
    c.submit([vertex("only", 1)])
    attempt = c.deployments()[0].execution_attempt_id
    forged = c.state_report(attempt, ExecutionState.RUNNING, job_master_id="jm-forged")
    assert_derived(
        run_one(c, forged), [rejected(forged, "JobMasterId jm-forged is not the leader's")]
    )
    c.run([c.clock(JobMasterLeadershipGranted, job_id=JOB, job_master_id="jm-2")])
    stale = c.clock(SlotOffered, job_id=JOB, job_master_id=JM, resource_id="tm-0",
                    slot_index=3, allocation_id="late", resource_profile=ANY)  # fmt: skip
    assert_derived(derived_from(c.run([stale]), stale, PRODUCER), [
        pooled(SlotOfferRejected, job_id=JOB, job_master_id=JM, resource_id="tm-0",
               slot_index=3, allocation_id="late",
               reason=f"JobMasterId {JM} is not the leader's"),
    ])  # fmt: skip
    assert c.jm.job_master_id == "jm-2"


def test_jm_4_a_task_manager_left_without_slots_is_disconnected():
    """testReleasingTaskExecutorIfNoMoreSlotsRegistered: the only slot of tm-0 fails; the
    pool frees it and reports tm-0 empty, and with no partitions there the JobMaster lets
    tm-0 go: it is no longer registered and hears that the JobMaster disconnected."""
    c = JobCluster(task_executors=1, slots=1)
    c.submit([vertex("only", 1)], restart=fixed_delay(attempts=3, delay_ms=86_400_000))
    derived, slot_broke = _fail_the_slot_of(c, c.deployments()[0])
    assert_derived(derived, [
        *slot_broke,
        expect(JobManagerDisconnected, job_id=JOB, job_master_id=JM, resource_id="tm-0",
               cause="No more slots registered at JobMaster tm-0."),
    ])  # fmt: skip
    assert "tm-0" not in c.jm.pool.registered_task_managers
    assert c.driver.task_executors["tm-0"].job_masters == {}


def test_jm_5_a_task_manager_still_holding_partitions_is_kept():
    """testTaskExecutorNotReleasedOnFailedAllocationIfPartitionIsAllocated: src finished on
    tm-0 and its blocking result is still there, so when the sink's slot on tm-0 fails the
    slot is freed but tm-0 stays registered."""
    c = JobCluster(task_executors=1, slots=1)
    c.submit([vertex("src", 1), vertex("sink", 1, ("src", "POINTWISE", "BLOCKING"))],
             mode=ScheduleMode.LAZY_FROM_SOURCES,
             restart=fixed_delay(attempts=3, delay_ms=86_400_000))  # fmt: skip
    src = c.deployments()[0]
    c.report(src.execution_attempt_id, ExecutionState.RUNNING)
    c.report(src.execution_attempt_id, ExecutionState.FINISHED)
    sink = c.deployments()[1]
    assert (sink.vertex_id, sink.resource_id) == ("sink", "tm-0")
    derived, slot_broke = _fail_the_slot_of(c, sink)
    assert_derived(derived, slot_broke)
    assert "tm-0" in c.jm.pool.registered_task_managers


def _fail_the_slot_of(c: JobCluster, deployment: TaskDeploymentRequested) -> tuple[list, list]:
    """What `deployment`'s slot failing on tm-0 derives, and what it derives whatever tm-0
    still holds: the request failed, the slot freed, tm-0 reported empty, the job restarting."""
    attempt, allocation = deployment.execution_attempt_id, deployment.allocation_id
    failed = c.clock(AllocationFailed, job_id=JOB, allocation_id=allocation,
                     cause="slot broke", resource_id="tm-0")  # fmt: skip
    return derived_from(c.run([failed]), failed, PRODUCER), [
        pooled(SlotRequestFailed, job_id=JOB, slot_request_id=attempt,
               allocation_id=allocation, cause="slot broke"),
        pooled(SlotFreeRequested, job_id=JOB, resource_id="tm-0", allocation_id=allocation,
               cause="slot broke"),
        pooled(LastSlotOfTaskManagerFreed, job_id=JOB, resource_id="tm-0"),
        status(JobStatus.RUNNING, JobStatus.RESTARTING, f"{attempt}: slot broke"),
    ]  # fmt: skip


def test_jm_10_global_aggregates_fold_each_value_per_name():
    """testJobMasterAggregatesValuesCorrectly: agg1 gives 1, 3, 6, 10 for 1..4; agg2 gives
    10, then 33."""
    c = JobCluster()
    c.submit([vertex("only", 1)])

    def update(name: str, value: int, function: str = "sum", jm: str | None = JM):
        return c.clock(GlobalAggregateUpdateRequested, job_id=JOB, job_master_id=jm,
                       aggregate_name=name, value=value, aggregate_function=function)  # fmt: skip

    answers = []
    for name, value in [("agg1", 1), ("agg1", 2), ("agg2", 10), ("agg1", 3), ("agg2", 23),
                        ("agg1", 4)]:  # fmt: skip
        request = update(name, value)
        derived = run_one(c, request)
        answers.append((name, derived[0].value))
        assert_derived(derived, [expect(GlobalAggregateUpdated, job_id=JOB, aggregate_name=name,
                                        value=derived[0].value)])  # fmt: skip
    assert answers == [("agg1", 1), ("agg1", 3), ("agg2", 10), ("agg1", 6), ("agg2", 33),
                       ("agg1", 10)]  # fmt: skip
    unknown = update("agg1", 1, function="max")
    assert_derived(
        run_one(c, unknown), [rejected(unknown, "unknown aggregate function 'max' (sum)")]
    )
    stale = update("agg1", 1, jm="jm-old")
    assert_derived(run_one(c, stale), [rejected(stale, "JobMasterId jm-old is not the leader's")])
    assert c.jm.global_aggregates == {"agg1": 10, "agg2": 33}


def test_rs_9_lazy_scheduling_goes_on_in_a_restarted_region_while_another_waits():
    """Region A restarted while region B still waits for its delay (the job RESTARTING): A's
    source running schedules A's sink at once, as Flink's scheduling strategy reacts to every
    state change."""
    c = JobCluster()
    c.submit(PIPELINES, mode=ScheduleMode.LAZY_FROM_SOURCES,
             restart=fixed_delay(attempts=3, delay_ms=100))  # fmt: skip
    for d in c.deployments():
        c.report(d.execution_attempt_id, ExecutionState.RUNNING)
    deployed = {(d.vertex_id, d.subtask_index): d for d in c.deployments()}
    start = c.clock.now
    c.report(
        deployed["src", 0].execution_attempt_id,
        ExecutionState.FAILED,
        "E: one",
    )
    c.report(deployed["sink", 0].execution_attempt_id, ExecutionState.CANCELED)
    c.report(deployed["src", 1].execution_attempt_id, ExecutionState.FAILED, "E: two")
    c.report(deployed["sink", 1].execution_attempt_id, ExecutionState.CANCELED)
    c.tick(start + 101)
    assert c.statuses()[-1] == "RESTARTING"
    src0 = c.deployments()[-1]
    assert (src0.vertex_id, src0.subtask_index, src0.attempt_number) == ("src", 0, 1)
    c.report(src0.execution_attempt_id, ExecutionState.RUNNING)
    sink0 = c.deployments()[-1]
    assert (sink0.vertex_id, sink0.subtask_index, sink0.attempt_number) == ("sink", 0, 1)
    assert c.jm.status is JobStatus.RESTARTING
