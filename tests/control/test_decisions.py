"""Derived ids are uuid5 of the cause and the position, computed without `uuid.UUID`."""

import json
import uuid

from hypothesis import given
from hypothesis import strategies as st

from jobledger.schemas.jobs import JobMasterLeadershipGranted
from jobledger.services.control.decisions import _NAMESPACE, Decisions, derived_id


@given(st.text(), st.text())
def test_derived_id_is_the_uuid5_of_cause_and_tag(cause: str, tag: str) -> None:
    assert derived_id(cause, tag) == uuid.uuid5(_NAMESPACE, f"{cause}/{tag}").hex


def test_a_decision_id_basis_cannot_be_forged_from_a_key_and_an_id_that_read_alike():
    """Keys and ids are chosen by clients: job "A" with input "x/y" and job "A/x" with input
    "y" once derived one SlotRequested id and one AllocationID, and the second job's request
    was dropped as a duplicate."""
    first = JobMasterLeadershipGranted(event_id="x/y", event_time=1, producer="t", job_id="A",
                                       job_master_id="jm")  # fmt: skip
    second = JobMasterLeadershipGranted(event_id="y", event_time=1, producer="t", job_id="A/x",
                                        job_master_id="jm")  # fmt: skip
    again = JobMasterLeadershipGranted(event_id="x#1", event_time=1, producer="t", job_id="A",
                                       job_master_id="jm")  # fmt: skip

    ids = {
        Decisions(first, "jobmaster").derive("0"),
        Decisions(second, "jobmaster").derive("0"),
        Decisions(first.model_copy(update={"event_id": "x"}), "jobmaster", 1).derive("0"),
        Decisions(again, "jobmaster").derive("0"),
    }

    assert len(ids) == 4


@given(st.text(), st.text(), st.integers(0, 10**6), st.text(max_size=8))
def test_a_decision_id_is_the_uuid5_of_the_json_of_its_cause(
    key: str, event_id: str, incarnation: int, tag: str
) -> None:
    """The basis is built by hand and its SHA-1 prefix reused: byte for byte what
    `json.dumps` and `uuid.uuid5` give, for any key and id (quotes, non-ASCII, separators)."""
    cause = JobMasterLeadershipGranted(event_id=event_id, event_time=1, producer="t",
                                       job_id=key, job_master_id="jm")  # fmt: skip
    out = Decisions(cause, "jobmaster", incarnation)
    basis = json.dumps(["job", key, event_id, incarnation])
    assert out.basis == basis
    assert out.derive(tag) == uuid.uuid5(_NAMESPACE, f"{basis}/{tag}").hex
    assert out.derive("1") == derived_id(basis, "1")
