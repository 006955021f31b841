"""The whole-event expectations of tests/support/events.py: what passes, and each failure
message."""

from __future__ import annotations

import re

import pytest

from jobledger.schemas.cluster import JobMasterHeartbeat
from jobledger.schemas.slots import (
    NewAllocatedSlotRequested,
    SlotOfferAccepted,
    SlotRequestCancelled,
    SlotRequested,
)
from jobledger.schemas.types import AllocatedSlotInfo
from jobledger.services.control.decisions import Decisions

from .events import (
    ANY_VALUE,
    UNKNOWN,
    Capture,
    Clock,
    Derived,
    assert_derived,
    decision_id,
    expect,
    profile,
)

JOB = "job-1"


def decide(*derivations: tuple[type, dict]) -> Derived:
    """Events derived from one input the way a reducer derives them."""
    cause = Clock()(NewAllocatedSlotRequested, job_id=JOB, slot_request_id="r1")
    out = Decisions(cause, "slotpool")
    for cls, fields in derivations:
        out.emit(cls, **fields)
    return Derived(out.events, cause, "slotpool")


REQUESTED = dict(
    job_id=JOB, job_master_id="jm", slot_request_id="r1", allocation_id="a1",
    resource_profile=UNKNOWN, timeout_ms=5_000,
)  # fmt: skip
CANCELLED = dict(job_id=JOB, slot_request_id="r1", allocation_id="a1", cause="gone")


def fails(actual, expected, **kwargs) -> str:
    with pytest.raises(AssertionError) as failure:
        assert_derived(actual, expected, **kwargs)
    return str(failure.value)


def test_whole_events_in_order_pass_with_headers_from_the_cause():
    events = decide((SlotRequested, REQUESTED), (SlotRequestCancelled, CANCELLED))
    assert_derived(events, [expect(SlotRequested, **REQUESTED),
                            expect(SlotRequestCancelled, **CANCELLED)])  # fmt: skip
    assert events[1].event_id == decision_id(events.cause, 1)


def test_a_left_out_field_with_a_default_is_expected_at_its_default():
    events = decide((SlotRequested, REQUESTED | {"batch_request": True}))
    message = fails(events, [expect(SlotRequested, **REQUESTED)])
    assert message.endswith("[0] SlotRequested: batch_request: expected False, got True")


def test_a_differing_field_is_reported_with_both_values():
    events = decide((SlotRequested, REQUESTED), (SlotRequestCancelled, CANCELLED))
    message = fails(events, [
        expect(SlotRequested, **REQUESTED | {"timeout_ms": 10_000, "resource_profile": profile(1)}),
        expect(SlotRequestCancelled, **CANCELLED),
    ])  # fmt: skip
    assert message.splitlines() == [
        f"derived events differ (2 expected, 2 derived, from NewAllocatedSlotRequested "
        f"{events.cause.event_id}):",
        "  [0] SlotRequested: resource_profile: expected "
        f"{profile(1)!r}, got {UNKNOWN!r}; timeout_ms: expected 10000, got 5000",
    ]


def test_a_missing_event_is_reported_with_its_position():
    events = decide((SlotRequested, REQUESTED))
    message = fails(
        events, [expect(SlotRequested, **REQUESTED), expect(SlotRequestCancelled, **CANCELLED)]
    )
    assert message.splitlines()[1:] == [
        "  [1] missing: SlotRequestCancelled(job_id='job-1', slot_request_id='r1', "
        "allocation_id='a1', cause='gone')",
    ]


def test_an_unexpected_event_is_reported_with_its_fields():
    events = decide((SlotRequested, REQUESTED), (SlotRequestCancelled, CANCELLED))
    message = fails(events, [expect(SlotRequestCancelled, **CANCELLED)])
    assert message.splitlines()[1:] == [
        "  [0] unexpected: SlotRequested(job_id='job-1', job_master_id='jm', "
        "slot_request_id='r1', allocation_id='a1', resource_profile="
        f"{UNKNOWN!r}, batch_request=False, timeout_ms=5000, blocked_resource_ids=[], "
        "principal=None)",
    ], "the event after it is not reported again"
    message = fails(events, [expect(SlotRequestCancelled, **CANCELLED | {"cause": "x"})])
    assert message.splitlines()[2] == (
        "  [0] (derived at [1]) SlotRequestCancelled: cause: expected 'x', got 'gone'"
    )


def test_events_of_another_type_are_missing_and_unexpected():
    accepted = dict(job_id=JOB, resource_id="tm", slot_index=0, allocation_id="a1")
    events = decide((SlotOfferAccepted, accepted))
    message = fails(events, [expect(SlotRequestCancelled, **CANCELLED)])
    assert message.splitlines()[1:] == [
        "  [0] missing: SlotRequestCancelled(job_id='job-1', slot_request_id='r1', "
        "allocation_id='a1', cause='gone')",
        "  [0] unexpected: SlotOfferAccepted(job_id='job-1', job_master_id=None, "
        "resource_id='tm', slot_index=0, allocation_id='a1')",
    ]


def test_events_out_of_order_are_reported():
    events = decide((SlotRequested, REQUESTED), (SlotRequestCancelled, CANCELLED))
    message = fails(
        events, [expect(SlotRequestCancelled, **CANCELLED), expect(SlotRequested, **REQUESTED)]
    )
    assert [line.split(":")[0] for line in message.splitlines()[1:]] == [
        "  [0] unexpected", "  [1] missing",
    ]  # fmt: skip
    assert message.splitlines()[1].startswith("  [0] unexpected: SlotRequested(")


def test_headers_are_compared_too():
    events = decide((SlotRequestCancelled, CANCELLED))
    message = fails(events, [expect(SlotRequestCancelled, **CANCELLED)], producer="jobmaster")
    assert message.splitlines()[1] == (
        "  [0] SlotRequestCancelled: producer: expected 'jobmaster', got 'slotpool'"
    )
    other = Clock(5_000)(NewAllocatedSlotRequested, job_id=JOB, slot_request_id="r1")
    other = other.model_copy(update={"event_id": "another"})
    message = fails(events, [expect(SlotRequestCancelled, **CANCELLED)], cause=other)
    for header in ("event_id", "event_time", "cause_event_id"):
        assert f" {header}: expected" in message


def test_without_a_cause_the_headers_must_be_named():
    events = decide((SlotRequestCancelled, CANCELLED))
    with pytest.raises(TypeError, match="names no event_id, event_time, producer"):
        assert_derived(list(events), [expect(SlotRequestCancelled, **CANCELLED)])
    assert_derived(list(events), [expect(
        SlotRequestCancelled, event_id=ANY_VALUE, event_time=events.cause.event_time,
        producer="slotpool", cause_event_id=events.cause.event_id, **CANCELLED,
    )])  # fmt: skip


def test_a_required_field_left_unnamed_is_an_error_in_the_test_not_a_pass():
    events = decide((SlotRequested, REQUESTED))
    fields = {k: v for k, v in REQUESTED.items() if k != "allocation_id"}
    with pytest.raises(TypeError, match=re.escape("expect(SlotRequested) names no allocation_id")):
        assert_derived(events, [expect(SlotRequested, **fields)])
    with pytest.raises(TypeError, match="SlotRequested has no field allocation"):
        expect(SlotRequested, allocation="a1")


def test_any_value_matches_anything_and_a_capture_keeps_what_it_matched():
    events = decide((SlotRequested, REQUESTED), (SlotRequestCancelled, CANCELLED))
    alloc = Capture("alloc")
    assert_derived(events, [
        expect(SlotRequested, **REQUESTED | {"allocation_id": alloc, "timeout_ms": ANY_VALUE}),
        expect(SlotRequestCancelled, **CANCELLED | {"allocation_id": alloc}),
    ])  # fmt: skip
    assert alloc.value == "a1"


def test_a_capture_matches_only_its_first_value_afterwards():
    events = decide((SlotRequested, REQUESTED), (SlotRequestCancelled, CANCELLED | {
        "allocation_id": "a2"}))  # fmt: skip
    alloc = Capture("alloc")
    message = fails(events, [
        expect(SlotRequested, **REQUESTED | {"allocation_id": alloc}),
        expect(SlotRequestCancelled, **CANCELLED | {"allocation_id": alloc}),
    ])  # fmt: skip
    assert message.splitlines()[1] == (
        "  [1] SlotRequestCancelled: allocation_id: expected Capture(alloc='a1'), got 'a2'"
    )
    with pytest.raises(AssertionError, match="Capture unused matched nothing yet"):
        _ = Capture("unused").value


def test_nested_records_compare_whole_and_may_hold_matchers():
    slots = [AllocatedSlotInfo(slot_index=1, allocation_id="a1"),
             AllocatedSlotInfo(slot_index=3, allocation_id="spare")]  # fmt: skip
    beat = dict(job_id=JOB, job_master_id="jm", resource_id="tm")
    events = decide((JobMasterHeartbeat, beat | {"allocated_slots": slots}))
    assert_derived(events, [expect(JobMasterHeartbeat, **beat, allocated_slots=slots)])
    alloc = Capture()
    assert_derived(events, [expect(JobMasterHeartbeat, **beat, allocated_slots=[
        expect(AllocatedSlotInfo, slot_index=1, allocation_id=alloc), slots[1],
    ])])  # fmt: skip
    assert alloc.value == "a1"
    message = fails(events, [expect(JobMasterHeartbeat, **beat, allocated_slots=slots[::-1])])
    assert message.splitlines()[1].startswith(
        "  [0] JobMasterHeartbeat: allocated_slots: expected [AllocatedSlotInfo(slot_index=3"
    )


def test_a_bool_never_matches_an_int():
    events = decide((SlotRequested, REQUESTED | {"batch_request": True}))
    message = fails(events, [expect(SlotRequested, **REQUESTED | {"batch_request": 1})])
    assert "batch_request: expected 1, got True" in message


def test_the_event_id_is_the_one_derived_for_its_position():
    events = decide((SlotRequestCancelled, CANCELLED))
    forged = Derived(
        [events[0].model_copy(update={"event_id": "forged"})], events.cause, "slotpool"
    )
    message = fails(forged, [expect(SlotRequestCancelled, **CANCELLED)])
    assert message.splitlines()[1] == (
        "  [0] SlotRequestCancelled: event_id: expected "
        f"{decision_id(events.cause, 0)!r}, got 'forged'"
    )
