"""Signed records offline (issue 31 item 6): an export keeps what a record's signature is
over, and an export written before it still reads."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from fastavro import parse_schema, writer

from jobledger.cli.main import main
from jobledger.projections.log.log_file import (
    LogRecord,
    export_schema,
    read_export,
    read_log,
    write_export,
)
from jobledger.projections.log.provenance import Provenance, SignedRecord
from jobledger.schemas import EventSerde, topic_name
from jobledger.schemas.topics import DEFAULT_PREFIX
from jobledger.services import kafka
from jobledger.services.control.driver import DECIDING_PRODUCERS
from jobledger.services.signing import (
    SIGNATURE_HEADER,
    SIGNER_HEADER,
    TYPE_HEADER,
    Keyring,
    SigningKey,
)

from .golden_logs import LOGS

SERDE = EventSerde()
SERVICES, ALICE, BOB = SigningKey.generate(), SigningKey.generate(), SigningKey.generate()
"""The services' key signs the reducers' decisions, alice's every other input; bob's signs
what a test gives him."""


def signed(record: LogRecord, key: SigningKey | None) -> LogRecord:
    """`record` as a producer with `key` writes it to the default prefix's topics (`key`
    None: unsigned, as a producer with no key writes it)."""
    if key is None:
        return replace(record, provenance=None)
    topic = topic_name(record.role, DEFAULT_PREFIX)
    value = SERDE.encode(record.event, topic)
    owner = record.event.route()[1].encode()
    name = record.event.type_name()
    headers = ((TYPE_HEADER, name.encode()), *key.headers(topic, owner, value, name).items())
    return replace(record, provenance=Provenance.of(topic, owner, value, headers))


@pytest.fixture(scope="module")
def log() -> list[LogRecord]:
    """The stale-leader golden log as a cluster whose writers all sign writes it."""
    records = list(read_export(LOGS / "stale-leader.avro"))
    return [signed(r, SERVICES if r.event.producer in DECIDING_PRODUCERS else ALICE)
            for r in records]  # fmt: skip


def exported(records: list[LogRecord], path: Path) -> Path:
    with path.open("wb") as out:
        write_export(records, out)
    return path


# -- the export ------------------------------------------------------------------------------


def test_an_export_keeps_each_signed_record_s_provenance_and_no_other(log, tmp_path):
    mixed = [r if i % 3 else replace(r, provenance=None) for i, r in enumerate(log)]
    export = exported(mixed, tmp_path / "log.avro")
    assert list(read_export(export)) == mixed
    bare = [replace(r, provenance=None) for r in log]
    assert list(read_export(export, provenance=False)) == bare, "a reader checking nothing"


def test_a_provenance_keeps_an_absent_key_and_a_header_given_twice():
    """Packed as they came (a record Kafka holds without a key, or with two signers), judged
    as the services judge them live."""
    headers = ((SIGNER_HEADER, ALICE.key_id.encode()), (SIGNER_HEADER, BOB.key_id.encode()),
               (SIGNATURE_HEADER, b"\x00" * 64), (TYPE_HEADER, b""))  # fmt: skip
    doubled = Provenance.of("jobledger.job", None, b"", headers)
    assert doubled.record() == SignedRecord("jobledger.job", None, b"", headers)
    assert Provenance.of("t", b"", b"v", ()).record() == SignedRecord("t", b"", b"v", ())
    keys = Keyring({})
    keys.add(ALICE, "alice", "client")
    assert doubled.check(keys, 0) == (
        f"two {SIGNER_HEADER} or {SIGNATURE_HEADER} headers: which one signed it?"
    )


def test_an_export_written_before_provenance_reads_as_unsigned_records(log, tmp_path):
    """Exports written before records were signed: with today's events (read as written) and
    with older events (the golden logs, read by Avro schema resolution)."""
    bare = [replace(r, provenance=None) for r in log]
    path = tmp_path / "old.avro"
    with path.open("wb") as out:
        writer(out, parse_schema(export_schema(provenance=False)), [
            {"role": r.role.value, "partition": r.partition, "offset": r.offset,
             "timestamp": r.timestamp, "event": (r.event.full_name(), r.event.model_dump())}
            for r in bare
        ], codec="deflate")  # fmt: skip
    assert list(read_export(path)) == bare
    assert list(read_export(LOGS / "stale-leader.avro")) == bare


# -- from the broker -------------------------------------------------------------------------


@pytest.mark.broker
def test_records_read_from_the_broker_keep_what_their_signature_is_over(cluster, tmp_path):
    """Records written through a signing producer are read back with provenance the keyring
    accepts, exported with it; a producer with no key writes records with none."""
    events = [r.event for r in read_export(LOGS / "stale-leader.avro")][:6]
    for key, batch in ((ALICE, events[:4]), (None, events[4:])):
        producer = kafka.transactional_producer(cluster.bootstrap, "test", signer=key)
        kafka.append_events(producer, cluster.prefix, batch, SERDE)
        producer.flush()
    keys = Keyring({})
    keys.add(ALICE, "alice", "client")
    consumer = kafka.read_committed_consumer(cluster.bootstrap)
    try:
        records = list(read_log(consumer, cluster.prefix, SERDE))
    finally:
        consumer.close()
    by_id = {r.event.event_id: r for r in records}
    assert sorted(by_id) == sorted(e.event_id for e in events)
    for event in events[:4]:
        provenance = by_id[event.event_id].provenance
        written = provenance.record()
        assert (written.topic, written.key, written.value) == (
            topic_name(event.route()[0], cluster.prefix), event.route()[1].encode(),
            SERDE.encode(event, written.topic),
        )  # fmt: skip
        assert provenance.check(keys, by_id[event.event_id].timestamp) is None
    assert [by_id[e.event_id].provenance for e in events[4:]] == [None, None]
    export = tmp_path / "log.avro"
    status = main(["export", str(export), "--bootstrap", cluster.bootstrap,
                   "--topic-prefix", cluster.prefix])  # fmt: skip
    assert status == 0
    assert list(read_export(export)) == records
