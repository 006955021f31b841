"""The duplicate window forgets inputs that were only rejected (hardening issue, item 8):
copies of a job's slot requests that came before its leader were rejected, and the real
requests arriving later with the same ids were dropped as duplicates without a trace."""

from __future__ import annotations

from jobledger.schemas.cluster import ResourceManagerConnected
from jobledger.schemas.jobs import JobMasterLeadershipGranted
from jobledger.schemas.rejections import EventRejected
from jobledger.schemas.slots import NewAllocatedSlotRequested, SlotRequested
from jobledger.schemas.types import OwnerKind
from jobledger.services.control.driver import ReducerDriver

from ..support.events import ANY, Clock, types


def test_an_input_that_was_only_rejected_is_reduced_when_its_id_comes_again():
    clock = Clock()
    driver = ReducerDriver()
    early = clock(NewAllocatedSlotRequested, job_id="job-1", slot_request_id="req-1",
                  resource_profile=ANY)  # fmt: skip

    [rejected] = driver.process(early)

    assert rejected == EventRejected(
        event_id=rejected.event_id, event_time=early.event_time, producer="slotpool",
        cause_event_id=early.event_id, scope=OwnerKind.JOB, owner_id="job-1",
        rejected_event_id=early.event_id, rejected_event_type="NewAllocatedSlotRequested",
        reason="job job-1 has no started SlotPool (no JobMaster leader)",
    )  # fmt: skip
    driver.process(clock(JobMasterLeadershipGranted, job_id="job-1", job_master_id="jm-1"))
    driver.process(clock(ResourceManagerConnected, job_id="job-1",
                         resource_manager_id="resourcemanager"))  # fmt: skip

    again = driver.process(early.model_copy(update={"event_time": clock.now + 1}))

    assert types(again) == ["SlotRequested"]
    assert isinstance(again[0], SlotRequested) and again[0].cause_event_id == early.event_id
    assert again[0].event_id != rejected.event_id  # one id, one decision in the log


def test_a_redelivered_rejected_input_is_rejected_again_under_an_id_of_its_own():
    clock = Clock()
    driver = ReducerDriver()
    early = clock(NewAllocatedSlotRequested, job_id="job-1", slot_request_id="req-1",
                  resource_profile=ANY)  # fmt: skip

    first, second = driver.process(early), driver.process(early)

    assert types(first) == types(second) == ["EventRejected"]
    assert first[0].event_id != second[0].event_id
    assert first[0].model_copy(update={"event_id": "x"}) == second[0].model_copy(
        update={"event_id": "x"}
    )


def test_an_accepted_input_is_still_dropped_when_it_comes_again():
    clock = Clock()
    driver = ReducerDriver()
    driver.process(clock(JobMasterLeadershipGranted, job_id="job-1", job_master_id="jm-1"))
    driver.process(clock(ResourceManagerConnected, job_id="job-1",
                         resource_manager_id="resourcemanager"))  # fmt: skip
    request = clock(NewAllocatedSlotRequested, job_id="job-1", slot_request_id="req-1",
                    resource_profile=ANY)  # fmt: skip

    assert types(driver.process(request)) == ["SlotRequested"]
    assert driver.process(request) == []
