"""Signed records offline: an export keeps what a record's signature
is over, an export written before it still reads, and `replay --verify --keyring` judges
every input the services admitted as they judged it live, naming the first it refuses."""

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
from jobledger.projections.log.replay import verify
from jobledger.schemas import EventSerde, topic_name
from jobledger.schemas.deadletters import DeadLettered
from jobledger.schemas.jobs import JobCancellationRequested
from jobledger.schemas.topics import DEFAULT_PREFIX, TopicRole
from jobledger.services import kafka
from jobledger.services.control.driver import DECIDING_PRODUCERS, OWN_PRODUCERS
from jobledger.services.signing import (
    SIGNATURE_HEADER,
    SIGNER_HEADER,
    TYPE_HEADER,
    UNSIGNED,
    Keyring,
    Signer,
    SigningKey,
)

from ..support.golden_logs import LOGS

SERDE = EventSerde()
SERVICES, ALICE, BOB = SigningKey.generate(), SigningKey.generate(), SigningKey.generate()
TM = SigningKey.generate()
"""The services' key signs the reducers' decisions; the runner `tm`'s what TaskExecutor tm-0
says (the keyring states tm-0 and tm-1 as tm's); alice's (a client) the job's submission;
bob's (an admin) the second leadership grant, and what a test gives him."""
TASK_EXECUTOR_SAYS = {"TaskManagerRegistered", "TaskExecutionStateChanged",
                      "JobMasterRegistrationRequested"}  # fmt: skip


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


def own_decision(record: LogRecord) -> bool:
    """An owner's decision read back on its own topic: the services never check its signature
    (their reducer derived it), nor does replay."""
    return record.event.producer in OWN_PRODUCERS.get(record.role, ())


@pytest.fixture(scope="module")
def log() -> list[LogRecord]:
    """The stale-leader golden log as a cluster whose writers all sign writes it."""
    records = list(read_export(LOGS / "stale-leader.avro"))
    second_grant = [r for r in records if r.event.type_name() == "JobMasterLeadershipGranted"][1]
    return [signed(r, writer_of(r, second_grant)) for r in records]


def writer_of(record: LogRecord, second_grant: LogRecord) -> SigningKey:
    if record.event.producer in DECIDING_PRODUCERS:
        return SERVICES
    if record.event.type_name() in TASK_EXECUTOR_SAYS:
        return TM
    return BOB if record is second_grant else ALICE


@pytest.fixture
def keyring(tmp_path) -> Path:
    keys = Keyring({})
    keys.add(SERVICES, "services", "services")
    keys.add(ALICE, "alice", "client")
    keys.add(BOB, "bob", "admin")
    keys.add(TM, "tm", "runner", ("tm-0", "tm-1"))
    path = tmp_path / "keyring.json"
    keys.save(path)
    return path


def exported(records: list[LogRecord], path: Path) -> Path:
    with path.open("wb") as out:
        write_export(records, out)
    return path


def replay_verify(capsys, export: Path, *options: str) -> tuple[int, list[str]]:
    status = main(["replay", "--verify", "--file", str(export), *options])
    return status, capsys.readouterr().out.splitlines()


def at(log: list[LogRecord], type_name: str, nth: int = 0) -> int:
    """The index in `log` of its `nth` record of `type_name`."""
    return [i for i, r in enumerate(log) if r.event.type_name() == type_name][nth]


def position(record: LogRecord) -> str:
    return f"{record.role.value}/{record.partition}@{record.offset}"


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


# -- replay --verify --keyring ---------------------------------------------------------------


def test_a_log_signed_throughout_verifies(log, keyring, tmp_path, capsys):
    matched, _ = verify(log)
    checked = sum(1 for r in log if not own_decision(r))
    export = exported(log, tmp_path / "log.avro")
    assert replay_verify(capsys, export, "--keyring", str(keyring)) == (
        0, [f"verified {matched} decisions and the signatures of {checked} inputs: no difference"],
    )  # fmt: skip


def test_an_owner_s_own_decisions_need_no_signature_as_live(log, keyring, tmp_path, capsys):
    """The services admit an owner's decision coming back to it by what it is, not by a
    signature (`ServiceRuntime._admit`); a decision sent to another owner is checked."""
    unsigned_own = [replace(r, provenance=None) if own_decision(r) else r for r in log]
    status, _ = replay_verify(capsys, exported(unsigned_own, tmp_path / "own.avro"),
                              "--keyring", str(keyring))  # fmt: skip
    assert status == 0
    sent = next(i for i, r in enumerate(log) if r.event.producer in DECIDING_PRODUCERS
                and not own_decision(r))  # fmt: skip
    unsigned_sent = [replace(r, provenance=None) if i == sent else r for i, r in enumerate(log)]
    assert replay_verify(capsys, exported(unsigned_sent, tmp_path / "sent.avro"),
                         "--keyring", str(keyring)) == (1, [
        f"{position(log[sent])}: admitted, but the keyring refuses its signature: {UNSIGNED}"
    ])  # fmt: skip


def _altered(log: list[LogRecord]) -> tuple[list[LogRecord], LogRecord]:
    """The log with its JobSubmitted's job name changed after alice signed it."""
    i = at(log, "JobSubmitted")
    record = log[i]
    event = record.event.model_copy(update={"job_name": "not what alice submitted"})
    written = record.provenance.record()
    value = SERDE.encode(event, written.topic)
    forged = replace(record, event=event, provenance=Provenance.of(
        written.topic, written.key, value, written.headers
    ))  # fmt: skip
    return [*log[:i], forged, *log[i + 1 :]], forged


def _unsigned(log: list[LogRecord]) -> tuple[list[LogRecord], LogRecord]:
    """The log with the second leadership grant written with no key."""
    i = at(log, "JobMasterLeadershipGranted", 1)
    return [*log[:i], signed(log[i], None), *log[i + 1 :]], log[i]


def _revoked(log: list[LogRecord]) -> tuple[list[LogRecord], LogRecord]:
    """The log with bob (an admin) signing the first input and the second leadership grant:
    his key was revoked between them (`keyring`, below, revokes it just before the grant)."""
    i = at(log, "JobMasterLeadershipGranted", 1)
    bobs = {0, i}
    assert not own_decision(log[0])
    return [signed(r, BOB) if n in bobs else r for n, r in enumerate(log)], log[i]


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        (_altered, "bad signature for key {alice} (alice): the record is not what that key "
                   "signed"),
        (_unsigned, UNSIGNED),
        (_revoked, "signed by key {bob} of bob, revoked at {revoked} (the record was appended "
                   "at {timestamp})"),
    ],
    ids=["value-altered-after-signing", "unsigned", "key-revoked-before-it"],
)  # fmt: skip
def test_the_first_admitted_input_the_keyring_refuses_is_one_line_naming_it(
    log, keyring, tmp_path, capsys, tamper, reason
):
    tampered, refused = tamper(log)
    revoked = refused.timestamp - 1
    keys = Keyring.load(keyring)
    keys.revoke("bob", revoked)
    keys.save(keyring)
    assert replay_verify(capsys, exported(tampered, tmp_path / "t.avro"),
                         "--keyring", str(keyring)) == (1, [
        f"{position(refused)}: admitted, but the keyring refuses its signature: "
        + reason.format(alice=ALICE.key_id, bob=BOB.key_id, revoked=revoked,
                        timestamp=refused.timestamp)
    ])  # fmt: skip


def test_an_admitted_input_its_signer_may_not_write_is_one_line_naming_it(
    log, keyring, tmp_path, capsys
):
    """The authorizer runs offline as live, the job's submitter bound by the log: a client
    that grants a new leader to a job that has one should have been refused."""
    i = at(log, "JobMasterLeadershipGranted", 1)
    seized = [*log[:i], signed(log[i], ALICE), *log[i + 1 :]]
    job = log[i].event.job_id
    assert replay_verify(capsys, exported(seized, tmp_path / "s.avro"),
                         "--keyring", str(keyring)) == (1, [
        f"{position(log[i])}: admitted, but its signer may not write it: alice (client) wrote "
        f"JobMasterLeadershipGranted for job {job}, which has a leader: leadership is granted "
        "only by the submission or an admin"
    ])  # fmt: skip


def test_without_a_keyring_replay_checks_no_signature(log, tmp_path, capsys):
    tampered, _ = _unsigned(log)
    status, lines = replay_verify(capsys, exported(tampered, tmp_path / "t.avro"))
    matched, _ = verify(log)
    assert (status, lines) == (0, [f"verified {matched} decisions: no difference"])


def _with_dead_letter(log: list[LogRecord], letter: bool) -> tuple[list[LogRecord], LogRecord]:
    """The log and a cancellation of its job signed by a key no keyring holds, appended to
    the job's partition; and, if `letter`, the services' dead letter of it."""
    last = log[-1].timestamp
    job = next(r for r in log if r.event.type_name() == "JobSubmitted")
    offset = 1 + max(r.offset for r in log if (r.role, r.partition) == (job.role, job.partition))
    cancel = JobCancellationRequested(event_id="cancel-1", event_time=last + 1, producer="eve",
                                      job_id=job.event.job_id)  # fmt: skip
    forged = signed(LogRecord(job.role, job.partition, offset, last + 1, cancel),
                    SigningKey.generate())  # fmt: skip
    dead = DeadLettered(
        event_id="dead-1", event_time=last + 2, producer="the service runtime",
        source_topic=topic_name(job.role, DEFAULT_PREFIX), source_partition=job.partition,
        source_offset=offset, reason="signed by a key not in the keyring",
    )  # fmt: skip
    letters = [signed(LogRecord(TopicRole.DEAD_LETTER, 0, 0, last + 2, dead), SERVICES)]
    return [*log, forged, *(letters if letter else [])], forged


def test_a_dead_lettered_record_is_not_checked(log, keyring, tmp_path, capsys):
    """It reached no reducer and changed nothing; without its dead letter it is refused."""
    matched, _ = verify(log)
    checked = sum(1 for r in log if not own_decision(r))
    lettered, _ = _with_dead_letter(log, letter=True)
    assert replay_verify(capsys, exported(lettered, tmp_path / "dl.avro"),
                         "--keyring", str(keyring)) == (0, [
        f"verified {matched} decisions and the signatures of {checked} inputs: no difference"
    ])  # fmt: skip
    admitted, forged = _with_dead_letter(log, letter=False)
    status, [line] = replay_verify(capsys, exported(admitted, tmp_path / "no-dl.avro"),
                                   "--keyring", str(keyring))  # fmt: skip
    assert status == 1
    assert line.startswith(f"{position(forged)}: admitted, but the keyring refuses its "
                           "signature: signed by key ")  # fmt: skip


def test_a_keyring_without_verify_or_unreadable_is_one_line(log, tmp_path, capsys):
    export = exported(log, tmp_path / "log.avro")
    with pytest.raises(SystemExit) as refused:
        main(["replay", "--file", str(export), "--keyring", str(tmp_path / "k.json")])
    assert refused.value.code == 2
    assert "--keyring checks signatures as --verify replays" in capsys.readouterr().err
    missing = tmp_path / "missing.json"
    assert main(["replay", "--verify", "--file", str(export), "--keyring", str(missing)]) == 1
    assert capsys.readouterr().err.strip() == (
        f"jobledger: cannot read keyring {missing}: No such file or directory"
    )


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
        assert provenance.check(keys, by_id[event.event_id].timestamp) == Signer("alice", "client")
    assert [by_id[e.event_id].provenance for e in events[4:]] == [None, None]
    export = tmp_path / "log.avro"
    status = main(["export", str(export), "--bootstrap", cluster.bootstrap,
                   "--topic-prefix", cluster.prefix])  # fmt: skip
    assert status == 0
    assert list(read_export(export)) == records
