"""The catalog's contract: the .avsc files, the models and the docs say the same thing."""

from __future__ import annotations

import json

import pytest
from fastavro.schema import load_schema

from jobledger.schemas import docs
from jobledger.schemas.catalog import (
    EVENT_TYPES,
    NAMED_TYPES,
    SCHEMA_DIR,
    avsc_path,
    generated_files,
    stray_files,
)
from jobledger.schemas.model import CatalogEnum, Event
from jobledger.schemas.topics import TopicRole

ISSUE_EVENTS = {
    "TaskManagerRegistered", "TaskManagerHeartbeat", "TaskManagerLost",
    "ResourceManagerConnected", "ResourceManagerDisconnected",
    "SlotRequested", "SlotAllocationRequested", "SlotAllocated", "SlotAllocationFailed",
    "SlotOffered", "SlotOfferAccepted", "SlotOfferRejected", "AllocationFailed", "SlotFreed",
    "SlotRequestTimedOut", "SlotRequestCancelled", "IdleSlotTimedOut",
    "JobSubmitted", "JobMasterLeadershipGranted", "JobMasterLeadershipRevoked",
    "JobStatusChanged", "JobCancellationRequested", "RescaleRequested",
    "TaskDeploymentRequested", "TaskSubmissionRejected", "TaskExecutionStateChanged",
    "TaskCancellationRequested",
    "KvStateRegistered", "KvStateUnregistered", "KvStateRegistrationRejected",
    "TimerFired",
}  # fmt: skip


def test_catalog_has_every_event_the_foundation_issue_names():
    assert {cls.type_name() for cls in EVENT_TYPES} >= ISSUE_EVENTS


@pytest.mark.parametrize("path", sorted(generated_files()), ids=lambda p: p.name)
def test_checked_in_avsc_equals_what_the_models_generate(path):
    assert path.exists(), f"{path.name} missing: run `jobledger schemas write`"
    assert json.loads(path.read_text()) == generated_files()[path]


def test_no_stray_avsc_files():
    assert stray_files() == []
    assert {p.name for p in SCHEMA_DIR.glob("*.avsc")} == {p.name for p in generated_files()}


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda c: c.__name__)
def test_every_event_starts_with_the_header_and_loads_standalone(cls):
    schema = load_schema(str(avsc_path(cls)), _write_hint=False)
    assert schema["name"] == f"jobledger.{cls.__name__}"
    names = [f["name"] for f in schema["fields"]]
    assert tuple(names[: len(Event.HEADER_FIELDS)]) == Event.HEADER_FIELDS
    assert len(names) > len(Event.HEADER_FIELDS), "an event with no fields of its own"


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda c: c.__name__)
def test_every_event_routes_to_a_topic_by_a_string_key_field(cls):
    assert isinstance(cls.topic_role, TopicRole)
    assert cls.model_fields[cls.key_field].annotation is str
    assert cls.produced_by and cls.__doc__


@pytest.mark.parametrize(
    "cls", [t for t in NAMED_TYPES if issubclass(t, CatalogEnum)], ids=lambda c: c.__name__
)
def test_every_enum_defaults_to_unknown_so_newer_symbols_resolve(cls):
    schema = json.loads(avsc_path(cls).read_text())
    assert schema["default"] == "UNKNOWN" and "UNKNOWN" in schema["symbols"]


def test_fields_added_with_defaults_only_where_optional_or_defaulted():
    """Every optional field is a null-first union defaulting to null (Avro's requirement)."""
    for path, schema in generated_files().items():
        for field in schema.get("fields", []):
            if isinstance(field["type"], list):
                assert field["type"][0] == "null" and field["default"] is None, path.name


def test_schemas_readme_documents_every_event_with_its_topic_and_key():
    text = docs.README.read_text()
    assert docs.readme_with_table(text) == text, "run `jobledger schemas write`"
    for cls in EVENT_TYPES:
        row = next(line for line in text.splitlines() if line.startswith(f"| `{cls.__name__}`"))
        assert f"`{cls.key_field}`" in row
        assert cls.produced_by in row
