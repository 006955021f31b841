"""Serde: every model round-trips through its schema in both wire formats and as JSON;
older writer schemas still decode; bad bytes give a reason, never a crash."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
from fastavro import parse_schema, schemaless_writer
from hypothesis import given, settings
from hypothesis import strategies as st

from jobledger.schemas import (
    EVENT_TYPES,
    DecodeError,
    EventSerde,
    SchemaCatalog,
    UnknownSchemaError,
    event_from_json,
    event_to_json,
)
from jobledger.schemas.catalog import avsc_path, schema_fingerprint
from jobledger.schemas.cluster import TaskManagerRegistered
from jobledger.schemas.serde import SINGLE_OBJECT_MAGIC
from jobledger.schemas.tasks import TaskExecutionStateChanged
from jobledger.schemas.types import ExecutionState, ResourceProfile

from ..support.strategies import models

CATALOG = SchemaCatalog()
SINGLE = EventSerde(CATALOG)
CONFLUENT = EventSerde(CATALOG, registry_url="mock://serde-tests")


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda c: c.__name__)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_every_model_round_trips_through_its_schema(cls, data):
    event = data.draw(models(cls))
    single = SINGLE.encode(event, "t")
    assert single.startswith(SINGLE_OBJECT_MAGIC)
    assert SINGLE.decode(single, "t") == event
    confluent = CONFLUENT.encode(event, "t")
    assert confluent[0] == 0
    assert CONFLUENT.decode(confluent, "t") == event
    assert event_from_json(event_to_json(event)) == event


def test_single_object_header_is_the_crc64_fingerprint_of_the_writer_schema():
    event = _state_change()
    data = SINGLE.encode(event, "t")
    expected = schema_fingerprint(CATALOG.reader(TaskExecutionStateChanged))
    assert data[2:10] == expected == CATALOG.current_fingerprint(TaskExecutionStateChanged)


def _old_version(cls, drop: set[str]) -> dict:
    """The standalone schema of `cls` minus some defaulted fields: what v1 would have been."""
    schema = json.loads(CATALOG.schema_json(cls))
    schema["fields"] = [f for f in schema["fields"] if f["name"] not in drop]
    return schema


def test_events_written_with_an_older_schema_decode_with_the_newer_one():
    old = _old_version(TaskExecutionStateChanged, drop={"error", "resource_id", "job_master_id"})
    catalog = SchemaCatalog()
    writer = catalog.register_writer_schema(old)
    assert not writer.is_current
    body = io.BytesIO()
    schemaless_writer(
        body,
        writer.parsed,
        {
            "event_id": "e-1", "event_time": 5, "producer": "old-runner",
            "cause_event_id": None, "job_id": "job-1",
            "execution_attempt_id": "att-1", "execution_state": "RUNNING",
        },
    )  # fmt: skip
    data = SINGLE_OBJECT_MAGIC + writer.fingerprint + body.getvalue()

    event = EventSerde(catalog).decode(data, "t")

    assert event == TaskExecutionStateChanged(
        event_id="e-1", event_time=5, producer="old-runner", job_id="job-1",
        execution_attempt_id="att-1", execution_state=ExecutionState.RUNNING,
    )  # fmt: skip
    assert event.error is None and event.resource_id is None


def test_history_directory_schemas_are_registered_on_load(tmp_path):
    old = _old_version(TaskManagerRegistered, drop={"cause_event_id"})
    (tmp_path / "jobledger.TaskManagerRegistered.v1.avsc").write_text(json.dumps(old))
    fp = schema_fingerprint(parse_schema(old, _write_hint=False))

    catalog = SchemaCatalog(history_dirs=(tmp_path,))

    assert catalog.writer(fp).event_type is TaskManagerRegistered
    assert not catalog.writer(fp).is_current
    assert fp != catalog.current_fingerprint(TaskManagerRegistered)
    with pytest.raises(UnknownSchemaError):
        SchemaCatalog(history_dirs=()).writer(fp)


def test_history_schemas_must_be_standalone():
    with pytest.raises(UnknownSchemaError, match="not standalone"):
        SchemaCatalog().register_writer_schema(
            json.loads(avsc_path(TaskManagerRegistered).read_text())
        )


def test_a_newer_enum_symbol_reads_as_unknown():
    newer = _old_version(TaskExecutionStateChanged, drop=set())
    state_field = next(f for f in newer["fields"] if f["name"] == "execution_state")
    state_field["type"]["symbols"].append("SUSPENDED_BY_FUTURE_FLINK")
    catalog = SchemaCatalog()
    writer = catalog.register_writer_schema(newer)
    body = io.BytesIO()
    schemaless_writer(
        body,
        writer.parsed,
        {
            "event_id": "e", "event_time": 1, "producer": "future",
            "job_id": "j", "execution_attempt_id": "a",
            "execution_state": "SUSPENDED_BY_FUTURE_FLINK",
        },
    )  # fmt: skip
    event = EventSerde(catalog).decode(
        SINGLE_OBJECT_MAGIC + writer.fingerprint + body.getvalue(), "t"
    )
    assert event.execution_state is ExecutionState.UNKNOWN


def test_a_writer_schema_whose_values_do_not_resolve_is_a_decode_error():
    """A registered schema that changed a field's type (not only added one) cannot be read as
    the current event: every record written with it is refused with the reason."""
    changed = _old_version(TaskManagerRegistered, drop=set())
    slots = next(f for f in changed["fields"] if f["name"] == "number_of_slots")
    slots["type"] = "string"
    catalog = SchemaCatalog()
    writer = catalog.register_writer_schema(changed)
    data = SINGLE_OBJECT_MAGIC + writer.fingerprint + b"\x00" * 16

    with pytest.raises(
        DecodeError, match=r"TaskManagerRegistered schema 0x[0-9a-f]+ does not resolve"
    ):
        EventSerde(catalog).decode(data, "t")


def test_registering_a_schema_that_is_no_event_is_refused():
    with pytest.raises(UnknownSchemaError, match="not an event"):
        SchemaCatalog().register_writer_schema({"type": "record", "name": "Stranger", "fields": []})


def _state_change() -> TaskExecutionStateChanged:
    return TaskExecutionStateChanged(
        event_id="e-1", event_time=1, producer="test", job_id="job-1",
        execution_attempt_id="att-1", execution_state=ExecutionState.FAILED, error="boom",
    )  # fmt: skip


GOOD = SINGLE.encode(_state_change(), "t")


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty message value"),
        (None, "empty message value"),
        (b"garbage bytes", "not Avro single-object encoded"),
        (b"\xc3\x01" + b"\x00" * 8 + b"\x02", "no schema with fingerprint 0000000000000000"),
        (GOOD[:-2], "TaskExecutionStateChanged body is corrupt"),
        (GOOD + b"\x00", "TaskExecutionStateChanged body is followed by bytes"),
        (b"\x00\x00\x00\x00\x07body", "no schema registry is configured"),
    ],
    ids=["empty", "none", "garbage", "unknown-fingerprint", "truncated", "trailing", "confluent"],
)
def test_bad_bytes_are_a_decode_error_with_the_reason(data, reason):
    with pytest.raises(DecodeError, match=reason):
        SINGLE.decode(data, "t")


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\x00\x00\x00\x03\xe7body", "schema id 999 not in the registry"),
        (b"\x00\x00", "not in the Confluent wire format"),
    ],
)
def test_bad_confluent_bytes_are_a_decode_error_with_the_reason(data, reason):
    with pytest.raises(DecodeError, match=reason):
        CONFLUENT.decode(data, "t")


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=40))
def test_a_body_followed_by_any_bytes_is_refused(suffix):
    """The decoder reads a body inside a record ending in 8 random bytes of its own: any
    bytes after a whole body, even ones that decode as more fields, are found."""
    with pytest.raises(DecodeError, match="body is followed by bytes"):
        SINGLE.decode(GOOD + suffix, "t")


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_random_bytes_never_crash_the_decoder(data):
    """Whatever follows a valid header decodes to an event or is a DecodeError, nothing else."""
    with contextlib.suppress(DecodeError):
        SINGLE.decode(SINGLE_OBJECT_MAGIC + GOOD[2:10] + data, "t")


def test_resource_profile_defaults_to_unknown():
    assert ResourceProfile().kind.value == "UNKNOWN"


def test_a_deployment_written_before_outputs_existed_decodes_with_no_outputs():
    from jobledger.schemas.catalog import HISTORY_DIR
    from jobledger.schemas.tasks import TaskDeploymentRequested

    v1 = parse_schema(
        json.loads((HISTORY_DIR / "jobledger.TaskDeploymentRequested.v1.avsc").read_text())
    )
    record = {
        "event_id": "e1", "event_time": 1, "producer": "jobmaster", "cause_event_id": None,
        "job_id": "j", "job_master_id": "jm", "execution_attempt_id": "a", "vertex_id": "v",
        "subtask_index": 0, "attempt_number": 0, "number_of_subtasks": 1, "max_parallelism": 128,
        "allocation_id": "x", "resource_id": "tm", "slot_index": 0,
        "invokable_class_name": "noop", "operators": [], "inputs": [],
    }  # fmt: skip
    body = io.BytesIO()
    schemaless_writer(body, v1, record)
    data = SINGLE_OBJECT_MAGIC + schema_fingerprint(v1) + body.getvalue()
    event = EventSerde().decode(data, "t")
    assert isinstance(event, TaskDeploymentRequested)
    assert event.outputs == [] and event.vertex_id == "v"
