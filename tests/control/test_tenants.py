"""Tenants at the ResourceManager: slots shared fairly between the principals whose requests
wait, and each principal held to its limits (jobs in flight, submissions per second on event
time, slots held); each test asserts the exact derived events, in order."""

from __future__ import annotations

from jobledger.schemas.slots import (
    SlotAllocationRequested,
    SlotFreed,
    SlotRequestCancelled,
    SlotRequested,
    SlotRequestFailed,
    SlotRequestRefused,
)
from jobledger.schemas.types import ExecutionState, JobStatus, OwnerKind, ScheduleMode
from jobledger.services.configuration import Configuration
from jobledger.services.control.resource_manager import ResourceManager, ResourceManagerConfig
from jobledger.services.control.tenants import TenantLimits

from ..support.events import UNKNOWN, assert_derived, derived_from, expect, rejection
from ..support.jobs import JOB, JobCluster, vertex
from .test_job_master import pool_rejected, pooled, status
from .test_resource_manager import RM, asked


def tenants_rm(**limits: int) -> RM:
    rm = RM()
    rm.rm = ResourceManager(ResourceManagerConfig("rm", tenants=TenantLimits(**limits)))
    return rm


def request(rm: RM, alloc: str, job: str, principal: str | None, at: int | None = None):
    return rm.apply(
        SlotRequested, at=at, job_id=job, job_master_id="jm", slot_request_id=f"req-{alloc}",
        allocation_id=alloc, resource_profile=UNKNOWN, timeout_ms=1000, principal=principal,
    )  # fmt: skip


def free(rm: RM, alloc: str, tm: str, index: int):
    return rm.apply(SlotFreed, resource_id=tm, slot_index=index, allocation_id=alloc, cause="x")


def refused(alloc: str, job: str, cause: str):
    return expect(SlotRequestRefused, job_id=job, allocation_id=alloc, cause=cause)


def test_a_freed_slot_goes_to_the_waiting_tenant_that_holds_fewest_not_the_oldest_request():
    rm = tenants_rm()
    rm.register("tm-1", slots=2)
    rm.confirm(request(rm, "a1", "big", "alice")[0])
    rm.confirm(request(rm, "a2", "big", "alice")[0])
    assert request(rm, "a3", "big", "alice") == []
    assert request(rm, "b1", "small", "bob") == []
    # alice holds 2, bob none: bob's younger request is served first, then alice's again
    assert_derived(free(rm, "a1", "tm-1", 0), [asked("b1", "tm-1", 0, job="small")])
    assert_derived(free(rm, "a2", "tm-1", 1), [asked("a3", "tm-1", 1, job="big")])


def test_one_tenant_is_served_first_come_first_served_as_before_tenants():
    rm = tenants_rm()
    rm.register("tm-1", slots=1)
    rm.confirm(request(rm, "a1", "j1", None)[0])
    request(rm, "a2", "j2", None)
    request(rm, "a3", "j1", None)
    assert_derived(free(rm, "a1", "tm-1", 0), [asked("a2", "tm-1", 0, job="j2")])


def test_a_new_job_beyond_the_jobs_in_flight_limit_is_refused_until_one_ends():
    rm = tenants_rm(max_jobs_in_flight=2)
    rm.register("tm-1", slots=4)
    rm.confirm(request(rm, "a1", "j1", "alice")[0])
    request(rm, "a2", "j2", "alice")
    cause = (
        "principal 'alice' has 2 jobs in flight, the limit "
        "(jobledger.principal.max-jobs-in-flight=2)"
    )
    assert_derived(request(rm, "a3", "j3", "alice"), [refused("a3", "j3", cause)])
    # a job in flight asks for more; another principal is not alice's limit
    assert_derived(request(rm, "a4", "j1", "alice"), [asked("a4", "tm-1", 2, job="j1")])
    assert_derived(request(rm, "b1", "k1", "bob"), [asked("b1", "tm-1", 3, job="k1")])
    free(rm, "a1", "tm-1", 0)
    rm.apply(SlotFreed, resource_id="tm-1", slot_index=2, allocation_id="a4", cause="x")
    assert_derived(request(rm, "a5", "j3", "alice"), [asked("a5", "tm-1", 0, job="j3")])


def test_submissions_beyond_the_rate_are_refused_on_the_latest_event_time_read():
    rm = tenants_rm(max_submissions_per_second=2)
    rm.register("tm-1", slots=8)
    assert_derived(request(rm, "a1", "j1", "alice", at=10_000), [asked("a1", "tm-1", 0, "j1")])
    assert_derived(request(rm, "a2", "j2", "alice", at=10_000), [asked("a2", "tm-1", 1, "j2")])
    cause = (
        "principal 'alice' submits faster than its limit "
        "(jobledger.principal.max-submissions-per-second=2)"
    )
    assert_derived(request(rm, "a3", "j3", "alice", at=10_000), [refused("a3", "j3", cause)])
    # bob has his own allowance; half a second gives alice one more job
    assert_derived(request(rm, "b1", "k1", "bob", at=10_000), [asked("b1", "tm-1", 2, "k1")])
    assert_derived(request(rm, "a4", "j4", "alice", at=10_500), [asked("a4", "tm-1", 3, "j4")])
    # dating a job in the past buys nothing: the rate is judged at the latest time read
    assert_derived(request(rm, "a5", "j5", "alice", at=1_000), [refused("a5", "j5", cause)])


def test_a_tenant_at_its_slot_limit_waits_while_others_are_served():
    rm = tenants_rm(max_slots=1)
    rm.register("tm-1", slots=3)
    assert_derived(request(rm, "a1", "j1", "alice"), [asked("a1", "tm-1", 0, job="j1")])
    assert request(rm, "a2", "j1", "alice") == []
    assert_derived(request(rm, "b1", "k1", "bob"), [asked("b1", "tm-1", 1, job="k1")])
    assert [r.allocation_id for r in rm.rm.waiting()] == ["a2"]
    assert_derived(free(rm, "a1", "tm-1", 0), [asked("a2", "tm-1", 0, job="j1")])


def test_shares_and_rates_are_rebuilt_alike_from_a_snapshot_of_the_state():
    rm = tenants_rm(max_jobs_in_flight=1)
    rm.register("tm-1", slots=1)
    rm.confirm(request(rm, "a1", "j1", "alice")[0])
    request(rm, "b1", "k1", "bob")
    copy = ResourceManager(
        rm.rm.config, task_executors=rm.rm.task_executors, requests=rm.rm.requests,
        queue=rm.rm.queue, arrivals=rm.rm.arrivals, registrations=rm.rm.registrations,
        submission_rates=rm.rm.submission_rates, latest_request_time=rm.rm.latest_request_time,
    )  # fmt: skip
    assert copy.shares == rm.rm.shares
    assert copy.submission_rates == rm.rm.submission_rates


def test_the_limits_are_flink_style_options_with_documented_defaults():
    assert Configuration().tenant_limits() == TenantLimits(1_000, 500, 0)
    parsed = Configuration.parse([
        "jobledger.principal.max-jobs-in-flight=3",
        "jobledger.principal.max-submissions-per-second=0",
        "jobledger.principal.max-slots=16",
    ])  # fmt: skip
    assert parsed.resource_manager().tenants == TenantLimits(3, 0, 16)


def cluster(**limits: int) -> JobCluster:
    """One TaskExecutor of two slots, under a ResourceManager holding tenants to `limits`."""
    rm = ResourceManager(ResourceManagerConfig(tenants=TenantLimits(**limits)))
    return JobCluster(task_executors=1, slots=2, resource_manager=rm)


def test_a_refused_job_fails_with_the_reason_and_cancels_its_other_request():
    c = cluster(max_jobs_in_flight=1)
    c.submit([vertex("only", 1)], job="job-0", principal="mallory")
    log = c.submit([vertex("only", 2)], principal="mallory")
    requests = [e for e in log if isinstance(e, SlotRequested)]
    r1, r2 = requests
    cause = (
        "principal 'mallory' has 1 jobs in flight, the limit "
        "(jobledger.principal.max-jobs-in-flight=1)"
    )
    refusals = []
    for request in requests:
        refusal = derived_from(log, request, "resourcemanager")
        assert_derived(refusal, [refused(request.allocation_id, JOB, cause)])
        refusals += refusal
    first, second = refusals
    released = f"Pending slot request with SlotRequestId {r2.slot_request_id} has been released."
    slot2 = {"job_id": JOB, "slot_request_id": r2.slot_request_id,
             "allocation_id": r2.allocation_id, "cause": released}  # fmt: skip
    assert_derived(derived_from(log, first, "jobmaster"), [
        pooled(SlotRequestFailed, job_id=JOB, slot_request_id=r1.slot_request_id,
               allocation_id=r1.allocation_id, cause=cause),
        status(JobStatus.RUNNING, JobStatus.FAILING, f"{r1.slot_request_id}: {cause}"),
        pooled(SlotRequestFailed, **slot2), pooled(SlotRequestCancelled, **slot2),
        status(JobStatus.FAILING, JobStatus.FAILED, f"{r1.slot_request_id}: {cause}"),
    ])  # fmt: skip
    # the second refusal finds its request already released, and the RM never opened it
    assert_derived(derived_from(log, second, "slotpool"), [
        pool_rejected(second, f"allocation {r2.allocation_id} is no pending request"),
    ])  # fmt: skip
    cancel = next(e for e in log if isinstance(e, SlotRequestCancelled))
    assert_derived(derived_from(log, cancel, "resourcemanager"), [
        rejection(cancel, OwnerKind.RESOURCE_MANAGER, "resourcemanager",
                  f"allocation {r2.allocation_id} has no open request"),
    ])  # fmt: skip
    assert c.driver.job_masters["job-0"].status is JobStatus.RUNNING


def test_a_slot_a_wide_job_frees_goes_to_the_tenant_waiting_not_the_jobs_next_subtask():
    """The cause bench/fairness.py found: the wide job's pool kept each freed slot for its
    own next subtask, so another tenant waited for the whole job."""
    c = cluster()
    c.submit([vertex("wide", 3)], mode=ScheduleMode.LAZY_FROM_SOURCES, principal="bob")
    small = c.submit([vertex("only", 1)], job="job-2", principal="alice")
    assert not [e for e in small if isinstance(e, SlotAllocationRequested)]
    first = c.deployments()[0].execution_attempt_id
    c.report(first, ExecutionState.RUNNING)
    log = c.report(first, ExecutionState.FINISHED)
    freed = next(e for e in log if isinstance(e, SlotFreed))
    (asked_again,) = derived_from(log, freed, "resourcemanager")
    assert asked_again.job_id == "job-2"
