"""jobledger's single-object encoding against Apache Avro's reference implementation (Java).

Both directions, for every event of the catalog, with hypothesis-generated values (unions,
enums, nested records, arrays, maps, bytes): Avro Java's `BinaryMessageEncoder` writes and
jobledger reads an equal event; jobledger writes and `BinaryMessageDecoder` (a `SchemaStore`
of the published `.avsc` files) reads an equal record. The record crosses between the two
languages in Avro's own JSON encoding, so neither side interprets the other's objects.
"""

from __future__ import annotations

import io
import json

import pytest
from fastavro import parse_schema
from fastavro.json_read import json_reader
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobledger.schemas import EVENT_TYPES, EventSerde, SchemaCatalog
from jobledger.schemas.catalog import (
    HISTORY_DIR,
    SCHEMA_DIR,
    fingerprint_number,
    schema_fingerprint,
)
from jobledger.schemas.cluster import TaskManagerRegistered
from jobledger.schemas.json_form import event_from_json
from jobledger.schemas.records import event_from_avro_dict
from jobledger.schemas.serde import SINGLE_OBJECT_MAGIC

from ..support.avro_java import AvroJava, missing_java, to_avro_json
from ..support.strategies import models

pytestmark = pytest.mark.skipif(missing_java() is not None, reason=str(missing_java()))

CATALOG = SchemaCatalog()
SERDE = EventSerde(CATALOG)
GOLDEN = SCHEMA_DIR.parent / "tests" / "golden"
EXAMPLES = settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture(scope="module")
def java(tmp_path_factory):
    peer = AvroJava(SCHEMA_DIR, tmp_path_factory.mktemp("avro-java"))
    yield peer
    peer.close()


def _to_avro_json(cls, event) -> str:
    return to_avro_json(CATALOG.reader(cls), event.model_dump())


def _from_avro_json(cls, text: str):
    (record,) = list(json_reader(io.StringIO(text), CATALOG.reader(cls)))
    return event_from_avro_dict(cls, record)


def test_the_issue_s_fingerprint_is_what_both_sides_compute(java):
    """The worked example of the wire-contract issue: Java's fingerprint of
    TaskManagerRegistered as it was then (now in `history/`), and the header bytes it writes,
    little-endian; a record written with it still decodes."""
    old = json.loads((HISTORY_DIR / "jobledger.TaskManagerRegistered.v1.avsc").read_text())
    fp = schema_fingerprint(parse_schema(old))
    assert fp == bytes.fromhex("34f3898b0711f49e")
    assert fingerprint_number(fp) == 0x9EF411078B89F334
    assert CATALOG.writer(fp).event_type is TaskManagerRegistered
    current = CATALOG.current_fingerprint(TaskManagerRegistered)
    assert java.fingerprint("jobledger.TaskManagerRegistered") == fingerprint_number(current)


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda c: c.__name__)
def test_every_fingerprint_equals_avro_java_s(java, cls):
    fp = schema_fingerprint(CATALOG.reader(cls))
    assert fp == java.fingerprint(cls.full_name()).to_bytes(8, "little")


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda c: c.__name__)
@EXAMPLES
@given(data=st.data())
def test_avro_java_reads_what_jobledger_writes(java, cls, data):
    event = data.draw(models(cls))
    encoded = SERDE.encode(event, "t")
    assert encoded[:2] == SINGLE_OBJECT_MAGIC
    assert _from_avro_json(cls, java.decode(cls.full_name(), encoded)) == event


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda c: c.__name__)
@EXAMPLES
@given(data=st.data())
def test_jobledger_reads_what_avro_java_writes(java, cls, data):
    event = data.draw(models(cls))
    written = java.encode(cls.full_name(), _to_avro_json(cls, event))
    decoded = SERDE.decode(written, "t")
    assert decoded == event
    # byte for byte: re-encoding keeps map entries in the order Java wrote them
    assert SERDE.encode(decoded, "t") == written


def test_a_log_written_in_the_old_byte_order_stays_readable():
    """Before the wire-contract fix jobledger wrote the fingerprint big-endian. The checked-in
    event is such a record, byte for byte; it decodes, and is written back in the standard
    order."""
    old = (GOLDEN / "legacy-big-endian-fingerprint.TaskManagerRegistered.bin").read_bytes()
    expected = event_from_json(
        (GOLDEN / "legacy-big-endian-fingerprint.TaskManagerRegistered.json").read_text()
    )
    assert old[:10].hex(" ") == "c3 01 9e f4 11 07 8b 89 f3 34"

    event = SERDE.decode(old, "t")

    assert event == expected
    # written back under today's schema: its fingerprint, then the fields added since (a null
    # instance id, an empty slot report)
    current = CATALOG.current_fingerprint(TaskManagerRegistered)
    assert SERDE.encode(event, "t") == b"\xc3\x01" + current + old[10:] + b"\x00\x00"


def test_avro_java_refuses_the_old_byte_order(java):
    """Why the old order had to go: the reference decoder cannot find its schema."""
    old = (GOLDEN / "legacy-big-endian-fingerprint.TaskManagerRegistered.bin").read_bytes()
    with pytest.raises(Exception, match="MissingSchemaException"):
        java.decode("jobledger.TaskManagerRegistered", old)


def test_avro_json_is_one_line_per_record():
    """The harness protocol is line based: Avro JSON of a record must not span lines."""
    event = event_from_json(
        (GOLDEN / "legacy-big-endian-fingerprint.TaskManagerRegistered.json").read_text()
    ).model_copy(update={"address": "a\nb"})
    assert "\n" not in _to_avro_json(TaskManagerRegistered, event)
