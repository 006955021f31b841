"""Bad input to the reducers: any event of the catalog, with any field values, in any state,
is answered with decisions (a rejection with a reason where it breaks a state machine), never
an exception, and leaves the slot invariants intact."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobledger.schemas import EVENT_TYPES
from jobledger.schemas.rejections import EventRejected
from jobledger.schemas.slots import AllocationFailed, SlotOffered, SlotRequestReleased
from jobledger.services.control.driver import ReducerDriver

from ..support import scenario
from ..support.events import ANY, Clock
from ..support.strategies import models
from .test_slot_properties import check_invariants


def running_cluster() -> ReducerDriver:
    driver = ReducerDriver()
    driver.run(scenario.start_cluster(Clock()))
    return driver


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda c: c.__name__)
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_event_with_any_values_never_raises(cls, data):
    driver = running_cluster()
    event = data.draw(models(cls))
    driver.run([event])
    check_invariants(driver)


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        (SlotOffered(event_id="e", event_time=1, producer="x", job_id="no-such-job",
                     resource_id="tm-1", slot_index=0, allocation_id="a", resource_profile=ANY),
         "job no-such-job has no JobMaster leader"),
        (SlotOffered(event_id="e", event_time=1, producer="x", job_id="job-b",
                     job_master_id="jm-job-b", resource_id="tm-9", slot_index=0,
                     allocation_id="a", resource_profile=ANY),
         "TaskManager tm-9 is not registered at the job"),
        (AllocationFailed(event_id="e", event_time=1, producer="x", job_id="job-b",
                          allocation_id="no-such-allocation", cause="x"),
         "allocation no-such-allocation is unknown to the pool"),
        (SlotRequestReleased(event_id="e", event_time=1, producer="x", job_id="job-b",
                             slot_request_id="no-such-request"),
         "slot request no-such-request is unknown to the pool"),
    ],
    ids=["offer-unknown-job", "offer-unknown-tm", "failure-unknown-allocation",
         "release-unknown-request"],
)  # fmt: skip
def test_inputs_about_unknown_things_are_rejected_with_a_reason(event, reason):
    driver = running_cluster()
    before = driver.pools["job-b"].to_dict()
    [answer] = driver.process(event)
    assert answer.reason == reason
    assert isinstance(answer, EventRejected) or answer.type_name() == "SlotOfferRejected"
    assert driver.pools["job-b"].to_dict() == before
