"""Freshness, not only signatures: a record re-sent long after it was written
(past the dedup window, so it is not dropped as a duplicate) never replaces newer state. Each
kind of stale input, at the reducer that owns it: it is rejected with its reason, or changes
nothing, whichever instance, attempt or leader it addresses."""

from __future__ import annotations

import copy

import pytest

from jobledger.schemas import Event
from jobledger.schemas.cluster import (
    TaskManagerHeartbeat,
    TaskManagerLost,
    TaskManagerRegistered,
    TaskManagerRegistrationAccepted,
)
from jobledger.schemas.jobs import JobCancellationRequested, JobMasterLeadershipGranted
from jobledger.schemas.rejections import EventRejected
from jobledger.schemas.timers import TimerFired
from jobledger.schemas.types import ExecutionState, OwnerKind
from jobledger.services.control import resource_manager
from jobledger.services.control.driver import ReducerDriver

from ..support.events import Clock, assert_derived, profile, rejection
from ..support.jobs import JM, JOB, JobCluster, fails_first_attempt_of, fixed_delay, vertex
from .test_resource_manager import RM, accepted, rejected
from .test_task_executor import TE

STALE = "an old record, which never replaces a newer instance"


def _state(rm: RM) -> dict:
    """The ResourceManager's state, and all it keeps of TaskExecutor tm-1."""
    return copy.deepcopy(rm.rm.to_dict() | {"te": vars(rm.rm.task_executors.get("tm-1"))})


def test_a_registration_older_than_the_registered_instance_is_rejected_and_changes_nothing():
    rm = RM()
    rm.register("tm-1", at=1_000, instance="i1")  # the record an attacker copies
    rm.register("tm-1", at=2_000, instance="i2")
    rm.confirm(rm.request("a1")[0])
    before = _state(rm)
    events = rm.register("tm-1", at=1_000, instance="i1")
    assert_derived(events, [rejected(events, (
        "registration of instance i1 of TaskExecutor tm-1, written at 1000, is not newer than "
        f"instance i2 (registered), registered at 2000: {STALE}"
    ))])  # fmt: skip
    assert _state(rm) == before


def test_a_lost_instance_and_anything_older_never_register_again_a_newer_one_does():
    rm = RM(heartbeat_timeout_ms=1_000)
    rm.register("tm-1", at=1_000, instance="i1")
    rm.apply(TimerFired, at=2_001, scope=OwnerKind.RESOURCE_MANAGER, owner_id="rm")
    assert rm.rm.task_executors == {}
    again = rm.register("tm-1", at=1_000, instance="i1")
    assert_derived(again, [rejected(again, (
        "instance i1 of TaskExecutor tm-1 was lost: a lost instance never registers again "
        "(its runner registers a new one)"
    ))])  # fmt: skip
    older = rm.register("tm-1", at=900, instance="i0")
    assert_derived(older, [rejected(older, (
        "registration of instance i0 of TaskExecutor tm-1, written at 900, is not newer than "
        f"instance i1 (lost since), registered at 1000: {STALE}"
    ))])  # fmt: skip
    assert_derived(rm.register("tm-1", at=3_000, instance="i3"), [accepted("tm-1", instance="i3")])
    assert rm.rm.retired == {}


def test_a_re_sent_old_beat_moves_no_deadline_back():
    rm = RM(heartbeat_timeout_ms=1_000)
    rm.register("tm-1", at=1_000, instance="i1")
    assert_derived(rm.apply(TaskManagerHeartbeat, at=1_900, resource_id="tm-1",
                            instance_id="i1"), [])  # fmt: skip
    assert_derived(rm.apply(TaskManagerHeartbeat, at=1_100, resource_id="tm-1",
                            instance_id="i1"), [])  # fmt: skip
    scope = dict(scope=OwnerKind.RESOURCE_MANAGER, owner_id="rm")
    assert_derived(rm.apply(TimerFired, at=2_101, **scope), [])  # i1 beat at 1900: alive
    assert rm.rm.task_executors["tm-1"].last_heartbeat == 1_900


def test_a_loss_of_an_earlier_instance_changes_nothing():
    rm = RM()
    rm.register("tm-1", at=1_000, instance="i1")
    rm.register("tm-1", at=2_000, instance="i2")
    named = rm.apply(TaskManagerLost, at=3_000, resource_id="tm-1", cause="gone",
                     instance_id="i1")  # fmt: skip
    assert_derived(named, [rejected(named, (
        "TaskManagerLost of instance i1 of TaskExecutor tm-1, which is registered as instance "
        "i2: an earlier instance's loss changes nothing"
    ))])  # fmt: skip
    unnamed = rm.apply(TaskManagerLost, at=1_500, resource_id="tm-1", cause="gone")
    assert_derived(unnamed, [rejected(unnamed, (
        "TaskManagerLost of TaskExecutor tm-1, written at 1500, is older than instance i2, "
        "registered at 2000: an earlier instance's loss changes nothing"
    ))])  # fmt: skip
    assert rm.rm.task_executors["tm-1"].instance_id == "i2"


def test_lost_instances_are_remembered_for_the_latest_resource_ids_only(monkeypatch):
    monkeypatch.setattr(resource_manager, "RETIRED_LIMIT", 2)
    rm = RM()
    for n in range(3):
        rm.register(f"tm-{n}", at=1_000 + n, instance=f"i{n}")
    for n in (1, 0, 2):
        rm.apply(TaskManagerLost, resource_id=f"tm-{n}", cause="gone")
    assert {rid: r.instance_id for rid, r in rm.rm.retired.items()} == {"tm-0": "i0", "tm-2": "i2"}


def test_an_acceptance_of_an_earlier_instance_never_empties_the_task_executor_s_table():
    te = TE(registered=False)
    fields = dict(resource_manager_id="rm", number_of_slots=2, resource_profile=profile(1.0, 100))
    te.apply(TaskManagerRegistrationAccepted, at=1_000, instance_id="i1", **fields)
    te.apply(TaskManagerRegistrationAccepted, at=2_000, instance_id="i2", **fields)
    te.request(0, "a1")
    before = copy.deepcopy(te.te.to_dict())
    events = te.apply(TaskManagerRegistrationAccepted, at=1_000, instance_id="i1", **fields)
    assert_derived(events, [rejection(events.cause, OwnerKind.TASK_EXECUTOR, "tm-1", (
        "acceptance of instance i1, registered at 1000, is not newer than instance i2, "
        f"registered at 2000: {STALE}"
    ))])  # fmt: skip
    assert te.te.to_dict() == before


def test_a_report_for_an_attempt_no_longer_current_is_rejected():
    c = JobCluster(task_executors=1, slots=2)
    c.submit([vertex("v", 1)], restart=fixed_delay(1, 10))
    c.play(fails_first_attempt_of("v"))
    c.tick(10_000)
    c.play(fails_first_attempt_of("v"))
    first, second = (d.execution_attempt_id for d in c.deployments())
    assert c.statuses()[-1] == "FINISHED"
    for state in (ExecutionState.RUNNING, ExecutionState.FAILED):
        stale = c.state_report(first, state, "java.lang.RuntimeException: old")
        assert _answers(c, stale) == [f"no current execution attempt {first}"]
    resent = c.state_report(second, ExecutionState.FAILED, "java.lang.RuntimeException: old")
    assert c.run([resent])[1:] == []  # the attempt FINISHED: a later word changes nothing
    assert c.statuses()[-1] == "FINISHED"


def _answers(c: JobCluster, event: Event) -> list[str]:
    """The reasons of the rejections `event` leads to, when they are all it leads to."""
    answers = c.run([event])[1:]
    assert all(isinstance(e, EventRejected) and e.rejected_event_id == event.event_id
               for e in answers), answers  # fmt: skip
    return [e.reason for e in answers]


def test_a_grant_of_an_earlier_leader_and_a_cancellation_of_an_ended_job_change_nothing():
    c = JobCluster(task_executors=1, slots=2)
    c.submit([vertex("v", 1)])
    c.run([c.clock(JobMasterLeadershipGranted, job_id=JOB, job_master_id="jm-2")])
    old_grant = c.clock(JobMasterLeadershipGranted, job_id=JOB, job_master_id=JM)
    assert _answers(c, old_grant) == [
        f"JobMasterId {JM} led job {JOB} before: a leadership is never granted twice (an old "
        "grant, re-sent)"
    ]
    assert (c.jm.job_master_id, c.jm.former_leaders) == ("jm-2", [JM])
    c.run([c.clock(JobCancellationRequested, job_id=JOB)])
    assert c.statuses()[-1] == "CANCELED"
    resent = c.clock(JobCancellationRequested, job_id=JOB)
    assert _answers(c, resent) == [f"job {JOB} cannot be cancelled in CANCELED"]


@pytest.mark.parametrize("window_filled", [False, True])
def test_a_captured_registration_re_sent_after_the_dedup_window_is_rejected(window_filled):
    """A replay attack at the driver: a runner fills the window with beats of its own
    TaskExecutor, then re-sends another runner's captured registration of an earlier
    instance. Within the window it is dropped as a duplicate; past it, the ResourceManager
    rejects it: the victim's instance stays registered either way."""
    clock, driver = Clock(), ReducerDriver(dedup_window=30)
    slots = dict(address="a", number_of_slots=1, resource_profile=profile(1.0, 1024))
    captured = clock(TaskManagerRegistered, resource_id="rk-2-0", instance_id="old", **slots)
    driver.run([
        captured,
        clock(TaskManagerRegistered, resource_id="rk-2-0", instance_id="new", **slots),
        clock(TaskManagerRegistered, resource_id="rk-0", instance_id="mine", **slots),
    ])  # fmt: skip
    flood = 31 if window_filled else 3
    driver.run([clock(TaskManagerHeartbeat, resource_id="rk-0", instance_id="mine")
                for _ in range(flood)])  # fmt: skip
    answer = driver.process(captured)
    if window_filled:
        assert [(e.type_name(), e.reason) for e in answer] == [("EventRejected", (
            f"registration of instance old of TaskExecutor rk-2-0, written at "
            f"{captured.event_time}, is not newer than instance new (registered), registered "
            f"at {captured.event_time + 1}: {STALE}"
        ))]  # fmt: skip
    else:
        assert answer == []
    assert driver.resource_manager.task_executors["rk-2-0"].instance_id == "new"
