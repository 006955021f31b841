"""Events that claim a producer they may not (hardening issue, item 3).

A record in an owner's own name (producer "jobmaster" on the job topic, ...) is one of its own
decisions read back, which it skips; one it never derived was skipped the same way live, and
replay's `--verify` then took it for a decision no reducer derives, forever. The services now
refuse it (dead-lettered with the reason, so replay skips it too), and a decision in another
reducer's name whose cause is no input of the log is reported apart by verify."""

from __future__ import annotations

import pytest

from jobledger.projections.log.log_file import LogRecord, read_export
from jobledger.projections.log.replay import foreign, replay, verify
from jobledger.schemas.deadletters import DeadLettered
from jobledger.schemas.jobs import JobMasterLeadershipGranted, JobStatusChanged, JobSubmitted
from jobledger.schemas.slots import AllocationFailed, SlotRequested
from jobledger.schemas.timers import TimerFired
from jobledger.schemas.topics import TopicRole
from jobledger.schemas.types import JobStatus, OwnerKind
from jobledger.services.control.driver import ReducerDriver

from ..support.events import ANY, Clock
from ..support.golden_logs import LOGS
from ..support.jobs import vertex
from ..support.runtime_harness import RuntimeThread, append, wait_until_decided


def _submitted(clock: Clock, **header) -> JobSubmitted:
    event = clock(JobSubmitted, job_id="job-1", job_name="wordcount",
                  vertices=[vertex("source", 1)])  # fmt: skip
    return event.model_copy(update=header)


def test_a_record_in_its_owners_name_that_the_owner_never_derived_is_refused():
    clock = Clock()
    driver = ReducerDriver()
    forged = _submitted(clock, producer="jobmaster", cause_event_id="in-0")

    assert driver.refusal(forged) == (
        "JobSubmitted claims to be a decision of the JobMaster of job 'job-1', which derived "
        "no event 'in-1'"
    )


def test_the_slot_pools_decisions_are_its_job_masters_own_records():
    """The SlotPool decides in its own name inside the JobMaster: its decisions on the job
    topic are awaited and read back as records, as the JobMaster's are, and one it never
    derived is refused."""
    clock = Clock()
    driver = ReducerDriver()
    driver.process(clock(JobMasterLeadershipGranted, job_id="job-1", job_master_id="jm-1"))
    [rejected] = driver.process(
        clock(AllocationFailed, job_id="job-1", allocation_id="x", cause="lost")
    )
    forged = rejected.model_copy(update={"event_id": "forged"})

    assert rejected.producer == "slotpool"
    assert driver.refusal(forged) == (
        "EventRejected claims to be a decision of the JobMaster of job 'job-1', which derived "
        "no event 'forged'"
    )
    assert driver.refusal(rejected) is None
    assert driver.process(rejected) == []
    assert rejected.event_id not in driver.awaiting


def test_a_pool_decision_recorded_in_its_job_masters_name_is_still_the_pools():
    """A log written before the SlotPool decided in its own name stamps its decisions
    `jobmaster`: read back (a service upgraded mid-job), such a record is the decision it
    was, not a forgery; with any other field changed it is still refused."""
    clock = Clock()
    driver = ReducerDriver()
    driver.process(clock(JobMasterLeadershipGranted, job_id="job-1", job_master_id="jm-1"))
    [rejected] = driver.process(
        clock(AllocationFailed, job_id="job-1", allocation_id="x", cause="lost")
    )
    old = rejected.model_copy(update={"producer": "jobmaster"})
    tampered = old.model_copy(update={"reason": "something else"})

    assert driver.refusal(tampered) == (
        f"EventRejected {old.event_id!r} differs from the decision of that id the JobMaster "
        "of job 'job-1' derived"
    )
    assert driver.refusal(old) is None


def test_a_log_recorded_before_the_pool_had_its_own_name_verifies_clean():
    records = list(read_export(LOGS / "slot-shortage.avro"))
    stamped = {r.event.producer for r in records if isinstance(r.event, SlotRequested)}

    assert stamped == {"jobmaster"}
    assert verify(records)[1] is None


def test_a_decision_names_its_reducer_and_its_cause_and_an_input_neither():
    clock = Clock()
    driver = ReducerDriver()

    assert driver.refusal(_submitted(clock, producer="resourcemanager")) == (
        "producer 'resourcemanager' is a reducer's name, but the event names no cause"
    )
    assert driver.refusal(_submitted(clock, cause_event_id="in-0")) == (
        "the event names cause 'in-0', but producer 'test' is no reducer: only decisions "
        "name a cause"
    )
    assert driver.refusal(_submitted(clock)) is None
    assert driver.refusal(_submitted(clock, producer="clock")) is None


def test_a_timer_fired_by_anyone_but_the_services_clock_is_refused():
    clock = Clock()
    driver = ReducerDriver()
    tick = clock(TimerFired, scope=OwnerKind.JOB, owner_id="job-1")
    forged = tick.model_copy(update={"producer": "cli"})

    assert driver.refusal(forged) == (
        "TimerFired is the services' clock's to write (producer 'clock'), not 'cli''s: nothing "
        "else may move time"
    )
    assert driver.refusal(tick.model_copy(update={"producer": "clock"})) is None


def test_an_owners_own_decision_is_admitted_once_and_only_as_it_was_derived():
    clock = Clock()
    driver = ReducerDriver()
    driver.process(clock(JobMasterLeadershipGranted, job_id="job-1", job_master_id="jm-1"))
    decisions = driver.process(_submitted(clock))
    [running] = [
        d for d in decisions if isinstance(d, JobStatusChanged) and d.to_status is JobStatus.RUNNING
    ]
    tampered = running.model_copy(update={"to_status": JobStatus.FAILED})

    assert driver.refusal(tampered) == (
        f"JobStatusChanged {running.event_id!r} differs from the decision of that id the "
        "JobMaster of job 'job-1' derived"
    )
    assert driver.refusal(running) is None
    assert driver.process(running) == []
    assert driver.awaiting == {
        d.event_id: d for d in decisions if d.route()[0] is TopicRole.JOB and d is not running
    }
    assert driver.refusal(running) is None  # a redelivered copy: dropped as a duplicate
    assert driver.process(running) == []


def test_verify_reports_a_decision_whose_cause_is_no_input_apart_from_divergences():
    clock = Clock()
    lead = clock(JobMasterLeadershipGranted, job_id="job-1", job_master_id="jm-1")
    stray = clock(SlotRequested, job_id="job-1", job_master_id="jm-1", slot_request_id="r",
                  allocation_id="a", resource_profile=ANY, timeout_ms=1000).model_copy(
        update={"producer": "jobmaster", "cause_event_id": "nowhere"}
    )  # fmt: skip
    records = [
        LogRecord(TopicRole.JOB, 0, 0, 1, lead),
        LogRecord(TopicRole.RESOURCE_MANAGER, 0, 0, 2, stray),
    ]

    _, divergence = verify(records)

    assert divergence is None, divergence.describe()
    assert foreign(records) == [records[1]]


@pytest.mark.broker
def test_the_services_dead_letter_a_forged_decision_and_verify_stays_clean(cluster):
    clock = Clock()
    forged = _submitted(clock, producer="jobmaster", cause_event_id="in-0")
    lead = clock(JobMasterLeadershipGranted, job_id="job-1", job_master_id="jm-1")
    real = _submitted(clock)
    append(cluster, [forged, lead, real])

    with RuntimeThread(cluster):
        records = wait_until_decided(cluster)

    [dead] = [r.event for r in records if isinstance(r.event, DeadLettered)]
    assert (dead.source_offset, dead.reason) == (
        0,
        "JobSubmitted claims to be a decision of the JobMaster of job 'job-1', which derived "
        f"no event {forged.event_id!r}",
    )
    _, divergence = verify(records)
    assert divergence is None, divergence.describe()
    assert foreign(records) == []
    assert replay(records).driver.job_masters["job-1"].job == real


def test_the_services_dead_letter_a_clients_timer_and_time_does_not_move(cluster):
    """A TimerFired two hours ahead, written by a client with a raw producer (`produce`
    refuses it): dead-lettered with the reason, and nothing is derived from it."""
    clock = Clock()
    lead = clock(JobMasterLeadershipGranted, job_id="job-1", job_master_id="jm-1")
    submitted = _submitted(clock)
    ahead = clock(TimerFired, at=clock.now + 7_200_000, scope=OwnerKind.JOB, owner_id="job-1")
    forged = ahead.model_copy(update={"producer": "mallory"})
    append(cluster, [lead, submitted, forged])

    with RuntimeThread(cluster):
        records = wait_until_decided(cluster)

    [dead] = [r.event for r in records if isinstance(r.event, DeadLettered)]
    assert (dead.source_offset, dead.reason) == (
        2,
        "TimerFired is the services' clock's to write (producer 'clock'), not 'mallory''s: "
        "nothing else may move time",
    )
    assert [r.event for r in records if r.event.cause_event_id == forged.event_id] == []
    _, divergence = verify(records)
    assert divergence is None, divergence.describe()
