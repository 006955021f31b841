"""Derived ids are uuid5 of the cause and the position, computed without `uuid.UUID`."""

import uuid

from hypothesis import given
from hypothesis import strategies as st

from jobledger.services.decisions import _NAMESPACE, derived_id


@given(st.text(), st.text())
def test_derived_id_is_the_uuid5_of_cause_and_tag(cause: str, tag: str) -> None:
    assert derived_id(cause, tag) == uuid.uuid5(_NAMESPACE, f"{cause}/{tag}").hex
