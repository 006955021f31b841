"""Models built without validation (schemas/construct.py) are the models validation builds:
decoded from Avro, for every event class, current and older writer schemas, and derived by the
reducers, for every decision of the golden scenarios. Bad records still fail, as DecodeError."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from hypothesis import given, reject, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from jobledger.projections.log.log_file import read_export
from jobledger.projections.log.replay import replay
from jobledger.schemas import EVENT_TYPES, DecodeError, EventSerde, SchemaCatalog
from jobledger.schemas.catalog import HISTORY_DIR, schema_fingerprint
from jobledger.schemas.construct import from_avro, trusted
from jobledger.schemas.records import event_from_avro_dict
from jobledger.schemas.serde import SINGLE_OBJECT_MAGIC
from jobledger.schemas.tasks import TaskDeploymentRequested, TaskExecutionStateChanged
from jobledger.schemas.types import ExecutionState
from jobledger.services.control.driver import DECIDING_PRODUCERS, ReducerDriver

from ..support.golden_logs import LOGS
from ..support.scheduler_golden import SCENARIOS
from ..support.strategies import models

CATALOG = SchemaCatalog()
SERDE = EventSerde(CATALOG)


def assert_same(built: Any, validated: Any, where: str = "", fields_set: bool = True) -> None:
    """Equal, and of the same type at every depth: field order, nested records, enum members,
    list and map items (== alone takes 1 for 1.0 and a str for a StrEnum member)."""
    assert type(built) is type(validated), f"{where}: {type(built)} != {type(validated)}"
    if isinstance(validated, BaseModel):
        assert list(built.__dict__) == list(validated.__dict__), where
        if fields_set:
            assert built.model_fields_set == validated.model_fields_set, where
        assert built.__pydantic_extra__ is None and built.__pydantic_private__ is None
        for name, value in validated.__dict__.items():
            assert_same(built.__dict__[name], value, f"{where}.{name}", fields_set)
    elif isinstance(validated, list):
        assert len(built) == len(validated), where
        for n, (a, b) in enumerate(zip(built, validated, strict=True)):
            assert_same(a, b, f"{where}[{n}]", fields_set)
    elif isinstance(validated, dict):
        assert list(built) == list(validated), where
        for key, value in validated.items():
            assert_same(built[key], value, f"{where}[{key!r}]", fields_set)
    else:
        assert built == validated, where


def _record(data: bytes, writer: dict[str, Any], reader: dict[str, Any] | None) -> dict:
    return schemaless_reader(io.BytesIO(data), writer, reader)


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda c: c.__name__)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_avro_decode_builds_what_validation_builds(cls, data):
    event = data.draw(models(cls))
    decoded = SERDE.decode(SERDE.encode(event, "t"), "t")
    record = _record(SERDE.encode(event, "t")[10:], CATALOG.reader(cls), None)
    assert_same(decoded, cls.model_validate(record, strict=False), cls.__name__)
    assert_same(decoded, event, cls.__name__)
    assert hash(decoded) == hash(event) if _hashable(event) else True
    assert decoded.model_dump() == event.model_dump()


def _hashable(event: BaseModel) -> bool:
    try:
        hash(event)
    except TypeError:
        return False
    return True


def _history_writers() -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted(HISTORY_DIR.glob("*.avsc"))]


@pytest.mark.parametrize("writer", _history_writers(), ids=lambda s: s["name"])
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_an_old_writer_schema_is_upcast_to_what_validation_builds(writer, data):
    parsed = parse_schema(writer)
    cls = next(c for c in EVENT_TYPES if c.full_name() == parsed["name"])
    event = data.draw(models(cls))
    body = io.BytesIO()
    try:
        schemaless_writer(body, parsed, event.model_dump())
    except ValueError:  # a value the old writer has no symbol for (an enum member added since)
        reject()
    decoded = SERDE.decode(SINGLE_OBJECT_MAGIC + schema_fingerprint(parsed) + body.getvalue(), "t")
    upcast = _record(body.getvalue(), parsed, CATALOG.reader(cls))
    assert_same(decoded, cls.model_validate(upcast, strict=False), cls.__name__)


def test_the_history_holds_an_upcast_to_prove():
    assert any(w["name"].endswith("TaskDeploymentRequested") for w in _history_writers())
    assert TaskDeploymentRequested.model_fields["outputs"].default_factory is not None


def test_a_record_that_is_not_its_model_is_a_decode_error():
    record = {"event_id": "e", "event_time": 1, "producer": "p", "cause_event_id": None,
              "job_id": "j", "job_master_id": None, "execution_attempt_id": "a",
              "execution_state": "RUNNING", "error": None, "resource_id": None}  # fmt: skip
    built = event_from_avro_dict(TaskExecutionStateChanged, record)
    assert built.execution_state is ExecutionState.RUNNING
    with pytest.raises(DecodeError, match="does not fit its model"):
        event_from_avro_dict(TaskExecutionStateChanged, {**record, "execution_state": "NOPE"})
    del record["execution_attempt_id"]
    with pytest.raises(DecodeError, match="execution_attempt_id"):
        event_from_avro_dict(TaskExecutionStateChanged, record)


def test_bad_bytes_are_still_a_decode_error():
    good = SERDE.encode(_state_change(), "t")
    for bad in (good[:-3], good[:11], good + b"\x00", good[:10] + b"\xff" * 12):
        with pytest.raises(DecodeError):
            SERDE.decode(bad, "t")


def _state_change() -> TaskExecutionStateChanged:
    return TaskExecutionStateChanged(
        event_id="e", event_time=1, producer="runner", job_id="j", execution_attempt_id="a",
        execution_state=ExecutionState.RUNNING,
    )  # fmt: skip


def test_a_builder_is_compiled_once_per_class():
    assert from_avro(TaskDeploymentRequested) is from_avro(TaskDeploymentRequested)


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda c: c.__name__)
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_trusted_construction_builds_what_the_constructor_builds(cls, data):
    event = data.draw(models(cls))
    given_fields = {name: event.__dict__[name] for name in event.model_fields_set}
    built = trusted(cls, dict(given_fields))
    assert_same(built, cls(**given_fields), cls.__name__)
    for name, value in built.__dict__.items():
        if isinstance(value, list | dict) and name in given_fields:
            assert value is not given_fields[name], f"{name} aliases the caller's container"


def test_trusted_construction_refuses_unknown_and_missing_fields():
    fields = {"event_id": "e", "event_time": 1, "producer": "p", "job_id": "j",
              "execution_attempt_id": "a", "execution_state": ExecutionState.RUNNING}  # fmt: skip
    with pytest.raises(TypeError, match="no field"):
        trusted(TaskExecutionStateChanged, {**fields, "nope": 1})
    del fields["job_id"]
    with pytest.raises(TypeError, match="job_id"):
        trusted(TaskExecutionStateChanged, fields)


def _decisions_of_the_golden_logs() -> list:
    decisions = []

    def factory() -> ReducerDriver:
        driver = ReducerDriver()
        process = driver.process
        driver.process = lambda event: _kept(process(event), decisions)  # type: ignore[method-assign]
        return driver

    for path in sorted(Path(LOGS).glob("*.avro")):
        replay(read_export(path), driver_factory=factory)
    return decisions


def _kept(derived: list, into: list) -> list:
    into.extend(derived)
    return derived


def test_every_decision_of_the_golden_scenarios_validates_through_its_model():
    """Decisions are built without validation: the reducers' values must be the types the
    models declare. Every decision of the scheduler golden's scenarios and of the golden logs,
    dumped and validated strictly, gives the decision back, field for field and type for type."""
    decisions = [e for play in SCENARIOS.values() for e in play()[0]]
    decisions = [e for e in decisions if e.producer in DECIDING_PRODUCERS]
    decisions += _decisions_of_the_golden_logs()
    assert len({type(e) for e in decisions}) > 20
    for event in decisions:
        validated = type(event).model_validate(event.model_dump(), strict=True)
        assert_same(event, validated, f"{type(event).__name__} {event.event_id}", False)
