"""Signed checkpoints and `jobledger audit`, offline: RFC 6962 hashing
against the published test vectors, the C2SP signed-note layout, and the auditor as the
security boundary it is: a clean signed export passes, and each tampering (a record dropped,
reordered, duplicated or altered; a checkpoint forged or rolled back; two logs spliced) is
caught, in one line naming its position."""

from __future__ import annotations

import base64
import hashlib
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobledger.cli.main import main
from jobledger.projections.log.audit import AuditFailed, audit
from jobledger.projections.log.checkpoints import (
    CheckpointRecord,
    export_metadata,
    record_leaf,
)
from jobledger.projections.log.log_file import LogRecord, read_export, write_export
from jobledger.projections.log.provenance import Provenance
from jobledger.schemas import EventSerde, topic_name
from jobledger.schemas.deadletters import DeadLettered
from jobledger.schemas.jobs import JobCancellationRequested
from jobledger.schemas.topics import TopicRole
from jobledger.services.control.driver import DECIDING_PRODUCERS
from jobledger.services.signing import TYPE_HEADER, Keyring, SigningKey
from jobledger.services.transparency import (
    EMPTY_ROOT,
    Checkpoint,
    CompactRange,
    leaf_hash,
    node_hash,
    open_note,
    origin_of,
)

from ..support.golden_logs import LOGS

SERDE = EventSerde()
SERVICES, CLIENT, TM = SigningKey.generate(), SigningKey.generate(), SigningKey.generate()
TASK_EXECUTOR_SAYS = {"TaskManagerRegistered", "TaskExecutionStateChanged",
                      "JobMasterRegistrationRequested"}  # fmt: skip
CLUSTER = "c1"
EVERY = 4
"""The test checkpointer's interval: a checkpoint per 4 records of a partition."""


# -- RFC 6962 and the note -----------------------------------------------------------------

CT_LEAVES = [bytes.fromhex(h) for h in ("", "00", "10", "2021", "3031", "40414243",
             "5051525354555657", "606162636465666768696a6b6c6d6e6f")]  # fmt: skip
"""The leaf inputs of the Certificate Transparency test vectors, and their published roots."""
CT_ROOTS = {
    0: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    1: "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    8: "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
}


def reference_root(leaves: list[bytes]) -> bytes:
    """RFC 6962's MTH, as the RFC defines it (recursively, split at the largest power of two
    below n): what the streaming `CompactRange` must agree with."""
    if not leaves:
        return EMPTY_ROOT
    if len(leaves) == 1:
        return leaf_hash(leaves[0])
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return node_hash(reference_root(leaves[:k]), reference_root(leaves[k:]))


def test_roots_are_the_published_rfc_6962_test_vectors():
    for size, root in CT_ROOTS.items():
        tree = CompactRange()
        for leaf in CT_LEAVES[:size]:
            tree.append(leaf_hash(leaf))
        assert tree.root().hex() == root


@given(st.lists(st.binary(max_size=3), max_size=70))
def test_a_compact_range_has_the_rfc_root_at_every_size_and_survives_packing(leaves):
    tree = CompactRange()
    for i, leaf in enumerate(leaves):
        tree.append(leaf_hash(leaf))
        assert tree.root() == reference_root(leaves[: i + 1])
    again = CompactRange.unpacked(tree.size, tree.packed())
    assert again == tree


def test_a_checkpoint_is_a_c2sp_signed_note(keyring):
    root = bytes(range(32))
    note = Checkpoint("c1/jobledger.job/0", 12, root, 40).signed(SERVICES, "services")
    body, signature = note.split("\n\n")
    assert body == f"c1/jobledger.job/0\n12\n{base64.b64encode(root).decode()}\noffset 40"
    dash, name, stamp = signature.rstrip("\n").split(" ")
    assert (dash, name) == ("\u2014", "services")
    raw = base64.b64decode(stamp)
    public = base64.b64decode(Keyring.load(keyring).entries[SERVICES.key_id].public_key)
    assert raw[:4] == hashlib.sha256(b"services\n\x01" + public).digest()[:4]
    SERVICES.private.public_key().verify(raw[4:], (body + "\n").encode())
    opened = open_note(note, Keyring.load(keyring), 0)
    assert opened.checkpoint == Checkpoint("c1/jobledger.job/0", 12, root, 40)


# -- a signed log, its checkpoints, its export -----------------------------------------------


def signed(record: LogRecord, key: SigningKey, prefix: str = "jobledger.") -> LogRecord:
    topic = topic_name(record.role, prefix)
    value = SERDE.encode(record.event, topic)
    owner = record.event.route()[1].encode()
    name = record.event.type_name()
    headers = ((TYPE_HEADER, name.encode()), *key.headers(topic, owner, value, name).items())
    return replace(record, provenance=Provenance.of(topic, owner, value, headers))


def writer_of(record: LogRecord) -> SigningKey:
    if record.event.producer in DECIDING_PRODUCERS:
        return SERVICES
    return TM if record.event.type_name() in TASK_EXECUTOR_SAYS else CLIENT


@pytest.fixture(scope="module")
def log() -> list[LogRecord]:
    """The stale-leader golden log (29 records on three partitions) as a cluster whose
    writers all sign writes it (its clients' records by an admin, alice: she may write them
    all)."""
    return [signed(r, writer_of(r)) for r in read_export(LOGS / "stale-leader.avro")]


KEYS = Keyring({})
KEYS.add(SERVICES, "services", "services")
KEYS.add(CLIENT, "alice", "admin")
KEYS.add(TM, "tm", "runner", ("tm-0", "tm-1"))


@pytest.fixture
def keyring(tmp_path) -> Path:
    path = tmp_path / "keyring.json"
    KEYS.save(path)
    return path


def checkpoints_of(records: list[LogRecord], key: SigningKey = SERVICES,
                   cluster: str = CLUSTER) -> list[CheckpointRecord]:  # fmt: skip
    """What the checkpointer writes for `records`: a checkpoint of each partition every
    EVERY records and at its end, in the order a pass over the partitions writes them."""
    notes: list[CheckpointRecord] = []
    by_partition: dict[tuple[TopicRole, int], list[LogRecord]] = {}
    for record in records:
        by_partition.setdefault((record.role, record.partition), []).append(record)
    for (role, partition), found in sorted(by_partition.items()):
        tree = CompactRange()
        for i, record in enumerate(found):
            tree.append(record_leaf(record))
            if (i + 1) % EVERY == 0 or i + 1 == len(found):
                origin = origin_of(cluster, topic_name(role), partition)
                note = Checkpoint(origin, tree.size, tree.root(), record.offset + 1)
                notes.append(CheckpointRecord(len(notes), 0, note.signed(key, "services")))
    return notes


def audited(capsys, tmp_path, records, checkpoints, keyring, *options) -> tuple[int, str]:
    export = tmp_path / "log.avro"
    with export.open("wb") as out:
        write_export(records, out, export_metadata(checkpoints))
    status = main(["audit", str(export), "--keyring", str(keyring), *options])
    return status, capsys.readouterr().out.strip()


def where(record: LogRecord) -> str:
    return f"{record.role.value}/{record.partition}@{record.offset}"


def test_a_clean_export_audits_clean_and_says_what_it_covered(capsys, tmp_path, log, keyring):
    status, out = audited(capsys, tmp_path, log, checkpoints_of(log), keyring)
    assert (status, out) == (0, "audit passed: 29 records, 29 of them under 8 signed "
                                "checkpoints; 21 decisions derived again")  # fmt: skip


def test_records_after_the_last_checkpoint_are_counted_as_unattested(
    capsys, tmp_path, log, keyring
):
    status, out = audited(capsys, tmp_path, log, checkpoints_of(log)[:3], keyring)
    assert (status, out) == (0, "audit passed: 29 records, 12 of them under 3 signed "
                                "checkpoints, 17 after the last checkpoint of their partition; "
                                "21 decisions derived again")  # fmt: skip


# -- each tampering, caught at its position --------------------------------------------------


def job(log: list[LogRecord]) -> list[int]:
    """Indexes in `log` of the job partition's records (18, checkpointed at 4, 8, .., 18)."""
    return [i for i, r in enumerate(log) if r.role is TopicRole.JOB]


def test_a_dropped_record_is_caught_between_the_checkpoints_around_it(
    capsys, tmp_path, log, keyring
):
    checkpoints = checkpoints_of(log)
    i = job(log)[5]  # the sixth: under the second checkpoint (size 8), not the first
    tampered = log[:i] + log[i + 1 :]
    status, out = audited(capsys, tmp_path, tampered, checkpoints, keyring)
    assert (status, out) == (1, root_differs(tampered, 1, 8, 4))


def checkpoints_origin(partition: int, role: TopicRole = TopicRole.JOB) -> str:
    return origin_of(CLUSTER, topic_name(role), partition)


def root_differs(exported: list[LogRecord], checkpoint: int, size: int, first: int) -> str:
    """The audit's line for the job partition's checkpoint at `size` whose root the exported
    records from its `first` on do not make."""
    rows = [exported[j] for j in job(exported)]
    return (f"audit failed: checkpoint@{checkpoint}: {checkpoints_origin(0)} at size {size}: "
            f"its root is not the records': one of {where(rows[first])} .. "
            f"{where(rows[size - 1])} was dropped, added, moved or altered")  # fmt: skip


@pytest.mark.parametrize("how", ["swap", "duplicate"])
def test_a_record_moved_or_duplicated_is_caught_at_it(capsys, tmp_path, log, keyring, how):
    i, j = job(log)[6], job(log)[7]
    tampered = list(log)
    if how == "swap":
        tampered[i], tampered[j] = log[j], log[i]
        moved = log[i]
    else:
        tampered.insert(j, log[i])
        moved = log[i]
    status, out = audited(capsys, tmp_path, tampered, checkpoints_of(log), keyring)
    after = log[j].offset if how == "swap" else log[i].offset
    assert (status, out) == (1, f"audit failed: {where(moved)}: after offset {after} of its "
                                "partition: a record moved or duplicated")  # fmt: skip


def test_an_event_altered_beside_its_intact_signed_bytes_is_caught_at_it(
    capsys, tmp_path, log, keyring
):
    i = next(k for k in job(log) if log[k].event.type_name() == "JobSubmitted")
    altered = replace(log[i], event=log[i].event.model_copy(update={"job_name": "other"}))
    tampered = [*log[:i], altered, *log[i + 1 :]]
    status, out = audited(capsys, tmp_path, tampered, checkpoints_of(log), keyring)
    assert (status, out) == (1, f"audit failed: {where(log[i])}: the exported JobSubmitted is "
                                "not the event its signed bytes hold")  # fmt: skip


def test_altered_signed_bytes_or_a_moved_timestamp_are_caught(capsys, tmp_path, log, keyring):
    i = job(log)[2]
    parts = log[i].provenance.record()
    value = parts.value[:-1] + bytes([parts.value[-1] ^ 1])
    flipped = replace(log[i], provenance=Provenance.of(parts.topic, parts.key, value,
                                                       parts.headers))  # fmt: skip
    status, out = audited(capsys, tmp_path, [*log[:i], flipped, *log[i + 1 :]],
                          checkpoints_of(log), keyring)  # fmt: skip
    assert status == 1
    assert out.startswith(f"audit failed: {where(log[i])}: bad signature for key ")
    later = replace(log[i], timestamp=log[i].timestamp + 1)
    status, out = audited(capsys, tmp_path, [*log[:i], later, *log[i + 1 :]],
                          checkpoints_of(log), keyring)  # fmt: skip
    assert (status, out) == (1, root_differs(log, 0, 4, 0))


def test_a_forged_checkpoint_is_caught_at_it(capsys, tmp_path, log, keyring):
    checkpoints = checkpoints_of(log)
    body, _, signature = checkpoints[2].note.partition("\n\n")
    lines = body.split("\n")
    bigger = "\n".join([lines[0], "99", *lines[2:]]) + "\n\n" + signature
    for forged, why in [
        (bigger, f"checkpoint of {checkpoints_origin(0)} at size 99: no signature by a "
                 "services key"),
        (checkpoints_of(log, key=CLIENT)[2].note,
         f"checkpoint of {checkpoints_origin(0)} at size 12: no signature by a services key"),
        ("c1/jobledger.job/0\n12\n", "not a signed note (no blank line before its signature "
                                      "lines)"),
    ]:  # fmt: skip
        tampered = [*checkpoints[:2], replace(checkpoints[2], note=forged), *checkpoints[3:]]
        status, out = audited(capsys, tmp_path, log, tampered, keyring)
        assert (status, out) == (1, f"audit failed: checkpoint@2: {why}")


def test_a_checkpoint_rolled_back_is_caught(capsys, tmp_path, log, keyring):
    checkpoints = checkpoints_of(log)
    older = replace(checkpoints[1], offset=len(checkpoints))
    status, out = audited(capsys, tmp_path, log, [*checkpoints, older], keyring)
    assert (status, out) == (1, f"audit failed: checkpoint@{len(checkpoints)}: "
                                f"{checkpoints_origin(0)} at size 8 after size 18: rolled back "
                                "or forked")  # fmt: skip


def test_a_log_rolled_back_with_its_checkpoints_is_caught_by_a_trusted_one(
    capsys, tmp_path, log, keyring
):
    """Records and checkpoints cut back together agree with each other; only a checkpoint
    kept from before (`--trusted`) shows what was lost."""
    checkpoints = checkpoints_of(log)
    cut = job(log)[-1]
    shorter = log[:cut] + log[cut + 1 :]
    kept = tmp_path / "seen.note"
    kept.write_text(checkpoints[4].note)  # the job partition's last: size 18
    status, out = audited(capsys, tmp_path, shorter, checkpoints_of(shorter), keyring)
    assert status == 0, "alone, a consistent rollback is undetectable offline"
    status, out = audited(capsys, tmp_path, shorter, checkpoints_of(shorter), keyring,
                          "--trusted", str(kept))  # fmt: skip
    assert (status, out) == (1, f"audit failed: trusted checkpoint 1: {checkpoints_origin(0)} "
                                "has 18 records, the export 17: records dropped or the log "
                                "rolled back")  # fmt: skip


def test_two_logs_spliced_are_caught(capsys, tmp_path, log, keyring):
    checkpoints = checkpoints_of(log)
    other = checkpoints_of(log, cluster="c2")
    spliced = [*checkpoints[:3], replace(other[3], offset=3), *checkpoints[4:]]
    status, out = audited(capsys, tmp_path, log, spliced, keyring)
    assert (status, out) == (1, "audit failed: checkpoint@3: of cluster c2, the others of c1: "
                                "two logs spliced")  # fmt: skip
    i = job(log)[9]
    foreign = signed(log[i], writer_of(log[i]), prefix="other.")
    status, out = audited(capsys, tmp_path, [*log[:i], foreign, *log[i + 1 :]], checkpoints,
                          keyring)  # fmt: skip
    assert (status, out) == (1, root_differs(log, 2, 12, 8))


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_any_drop_duplicate_or_swap_fails_the_audit(log, data):
    """Whatever record is dropped, duplicated or swapped with the next of its partition, the
    audit fails (a generated tampering of the whole clean log)."""
    how = data.draw(st.sampled_from(["drop", "duplicate", "swap"]))
    if how == "swap":
        i = data.draw(st.sampled_from([
            k for k in range(len(log) - 1) if log[k].role == log[k + 1].role
        ]))  # fmt: skip
    else:
        i = data.draw(st.integers(0, len(log) - 1))
    tampered = list(log)
    if how == "drop":
        del tampered[i]
    elif how == "duplicate":
        tampered.insert(i, log[i])
    else:
        tampered[i], tampered[i + 1] = log[i + 1], log[i]
    with pytest.raises(AuditFailed):
        audit(tampered, checkpoints_of(log), KEYS)


def test_an_export_without_checkpoints_or_with_unreadable_ones_says_so(
    capsys, tmp_path, log, keyring
):
    """An export of a log never checkpointed is checked but attested by nothing; one whose
    checkpoints cannot be read, or name no partition of a log, fails in one line."""
    status, out = audited(capsys, tmp_path, log, [], keyring)
    assert (status, out) == (0, "audit passed: 29 records, 0 of them under 0 signed "
                                "checkpoints, 29 after the last checkpoint of their partition; "
                                "21 decisions derived again")  # fmt: skip
    export = tmp_path / "bad.avro"
    with export.open("wb") as out:
        write_export(log, out, {"jobledger.checkpoints": "{not json"})
    assert main(["audit", str(export), "--keyring", str(keyring)]) == 1
    assert capsys.readouterr().out.startswith(
        "audit failed: the export's checkpoints are unreadable (JSONDecodeError("
    )
    origin = origin_of(CLUSTER, "jobledger.snapshot", 0)
    note = Checkpoint(origin, 1, bytes(32), 1).signed(SERVICES, "services")
    status, out = audited(capsys, tmp_path, log, [CheckpointRecord(0, 0, note)], keyring)
    assert (status, out) == (1, f"audit failed: checkpoint@0: origin {origin} names no "
                                "partition of a log")  # fmt: skip


def with_refused_input(log: list[LogRecord], letter_key: SigningKey) -> list[LogRecord]:
    """`log` and an unsigned cancel on the job's partition, dead-lettered by a dead letter
    `letter_key` signs."""
    last = log[-1].timestamp
    job = next(r for r in log if r.event.type_name() == "JobSubmitted")
    offset = 1 + max(r.offset for r in log if r.role is job.role)
    cancel = JobCancellationRequested(event_id="cancel-1", event_time=last + 1,
                                      producer="eve", job_id=job.event.job_id)  # fmt: skip
    unsigned = signed(LogRecord(job.role, job.partition, offset, last + 1, cancel), CLIENT)
    parts = unsigned.provenance.record()
    unsigned = replace(unsigned, provenance=Provenance.of(
        parts.topic, parts.key, parts.value, parts.headers[:1]))  # fmt: skip
    dead = DeadLettered(
        event_id="dead-1", event_time=last + 2, producer="the service runtime",
        source_topic=topic_name(job.role), source_partition=job.partition,
        source_offset=offset, reason="unsigned record",
    )  # fmt: skip
    letter = signed(LogRecord(TopicRole.DEAD_LETTER, 0, 0, last + 2, dead), letter_key)
    return [*log, unsigned, letter]


def test_a_refused_input_is_a_leaf_but_its_dead_letter_must_be_the_services(
    capsys, tmp_path, log, keyring
):
    """An unsigned input the services dead-lettered changed nothing: the audit checks no
    signature of it, yet it is a leaf of its partition's tree. A dead letter takes its input
    out of replay and out of the signature check, so one signed by anyone but the services
    would hide an input nobody may have written."""
    refused = with_refused_input(log, SERVICES)
    status, out = audited(capsys, tmp_path, refused, checkpoints_of(refused), keyring)
    assert (status, out) == (0, "audit passed: 31 records, 31 of them under 9 signed "
                                "checkpoints; 21 decisions derived again")  # fmt: skip
    forged = with_refused_input(log, CLIENT)
    status, out = audited(capsys, tmp_path, forged, [], keyring)
    assert (status, out) == (1, f"audit failed: {where(forged[-1])}: a dead letter signed by "
                                "alice (admin): only the services dead-letter")  # fmt: skip
