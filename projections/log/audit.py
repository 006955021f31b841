"""`jobledger audit`: an export checked offline, with nothing but it and a keyring.

An auditor trusts the keyring's public keys and nothing in the file. The checks, each
reporting its first failure with its position, in this order:

1. each partition's records come in strictly increasing offsets (none moved or duplicated);
2. every record the services did not dead-letter is signed by a key of the keyring,
   unrevoked when it was appended (what they refused changed nothing, and is still a leaf),
   every dead letter by a services key (a dead letter takes its input out of replay),
   and every record's event is what its bytes decode to (an export holds both: an event
   edited beside intact bytes would replay as something nobody signed);
3. every checkpoint the export carries is a note signed by a services key, all of one
   cluster (no two logs spliced), and per partition their sizes never shrink and one size
   has one root (none rolled back or forked);
4. every checkpoint's root, and every trusted one's (notes the auditor kept from earlier),
   is the root of the tree over the partition's exported records up to its size: nothing
   dropped, added, reordered or altered. Both roots of two successive checkpoints are
   recomputed from one sequence of leaves, which proves the smaller tree a prefix of the
   larger: RFC 6962 consistency, checked from the records rather than from a proof;
5. every input was written by a principal allowed to, and every decision is derived again
   (`replay.verify`, with the keyring).

Records after a partition's last checkpoint are checked by 1, 2 and 5 but attested by no
tree head yet: the summary counts them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from jobledger.schemas import DecodeError, EventSerde
from jobledger.schemas.topics import TopicRole
from jobledger.services.control.driver import ReducerDriver
from jobledger.services.signing import UNSIGNED, Keyring, Signer
from jobledger.services.transparency import Checkpoint, CompactRange, open_note

from .checkpoints import CheckpointRecord, record_leaf
from .log_file import LOG_ROLES, LogRecord
from .replay import SignatureCheck, dead_lettered, position, verify

Partition = tuple[TopicRole, int]


class AuditFailed(Exception):
    """The first check that fails: its position and reason, one line."""


@dataclass
class AuditReport:
    records: int = 0
    checkpoints: int = 0
    covered: int = 0
    """Records under some checkpoint."""
    decisions: int = 0
    uncovered: dict[str, int] = field(default_factory=dict)
    """Per partition, its records after its last checkpoint."""

    def summary(self) -> str:
        after = sum(self.uncovered.values())
        tail = f", {after} after the last checkpoint of their partition" if after else ""
        return (f"audit passed: {self.records} records, {self.covered} of them under "
                f"{self.checkpoints} signed checkpoints{tail}; {self.decisions} decisions "
                "derived again")  # fmt: skip


def audit(
    records: list[LogRecord],
    checkpoints: list[CheckpointRecord],
    keyring: Keyring,
    driver_factory: Callable[[], ReducerDriver] = ReducerDriver,
    trusted: Iterable[str] = (),
) -> AuditReport:
    """Every check of the module docstring; AuditFailed at the first that fails."""
    partitions = _partitions(records)
    signers = _check_records(records, keyring)
    heads = _check_checkpoints(checkpoints, keyring)
    for i, note in enumerate(trusted):
        opened = open_note(note, keyring, 0)
        if isinstance(opened, str):
            raise AuditFailed(f"trusted checkpoint {i + 1}: {opened}")
        heads.append((f"trusted checkpoint {i + 1}", opened.checkpoint))
    report = AuditReport(records=len(records), checkpoints=len(checkpoints))
    _check_roots(partitions, heads, report)
    matched, divergence = verify(records, driver_factory, signatures=_Checked(keyring, signers))
    if divergence is not None:
        raise AuditFailed(divergence.describe().split("\n")[0])
    report.decisions = matched
    return report


def _partitions(records: list[LogRecord]) -> dict[Partition, list[LogRecord]]:
    by_partition: dict[Partition, list[LogRecord]] = {}
    for record in records:
        found = by_partition.setdefault((record.role, record.partition), [])
        if found and record.offset <= found[-1].offset:
            raise AuditFailed(f"{position(record)}: after offset {found[-1].offset} of its "
                              "partition: a record moved or duplicated")  # fmt: skip
        found.append(record)
    return by_partition


class _Checked(SignatureCheck):
    """`replay.verify`'s check of who may write what, over the signers `_check_records`
    found (checking each signature again cost the audit as much as the rest of it)."""

    def __init__(self, keyring: Keyring, signers: dict[int, Signer]) -> None:
        super().__init__(keyring)
        self.signers = signers

    def signer(self, record: LogRecord) -> Signer | str:
        found = self.signers.get(id(record))
        return super().signer(record) if found is None else found


def _check_records(records: list[LogRecord], keyring: Keyring) -> dict[int, Signer]:
    """Each admitted record's signer, by the record's id(); AuditFailed at the first record
    refused."""
    serde = EventSerde()
    refused = dead_lettered(records)
    signers: dict[int, Signer] = {}
    for record in records:
        judged = (record.role.value, record.partition, record.offset) not in refused
        signed = record.provenance
        if signed is None:
            why = UNSIGNED if judged else "the export holds none of its bytes"
            raise AuditFailed(f"{position(record)}: {why}")
        if judged:
            signer = signed.check(keyring, record.timestamp)
            if isinstance(signer, str):
                raise AuditFailed(f"{position(record)}: {signer}")
            if record.role is TopicRole.DEAD_LETTER and signer.role != "services":
                raise AuditFailed(f"{position(record)}: a dead letter signed by {signer.principal} "
                                  f"({signer.role}): only the services dead-letter")  # fmt: skip
            signers[id(record)] = signer
        parts = signed.record()
        if _role_of(parts.topic) is not record.role:
            raise AuditFailed(f"{position(record)}: signed for topic {parts.topic}, exported "
                              f"as a record of {record.role.value}")  # fmt: skip
        try:
            event = serde.decode(parts.value, parts.topic)
        except DecodeError as exc:
            raise AuditFailed(f"{position(record)}: its signed bytes are no event: {exc}") from None
        if event != record.event:
            raise AuditFailed(f"{position(record)}: the exported {record.event.type_name()} is "
                              "not the event its signed bytes hold")  # fmt: skip
    return signers


def _role_of(topic: str) -> TopicRole | None:
    return next((role for role in LOG_ROLES if topic.endswith(role.value)), None)


def _check_checkpoints(
    checkpoints: list[CheckpointRecord], keyring: Keyring
) -> list[tuple[str, Checkpoint]]:
    heads: list[tuple[str, Checkpoint]] = []
    clusters: set[str] = set()
    latest: dict[str, Checkpoint] = {}
    for found in checkpoints:
        where = f"checkpoint@{found.offset}"
        opened = open_note(found.note, keyring, found.timestamp)
        if isinstance(opened, str):
            raise AuditFailed(f"{where}: {opened}")
        checkpoint = opened.checkpoint
        cluster = checkpoint.origin.partition("/")[0]
        if clusters and cluster not in clusters:
            raise AuditFailed(f"{where}: of cluster {cluster}, the others of "
                              f"{clusters.pop()}: two logs spliced")  # fmt: skip
        clusters.add(cluster)
        before = latest.get(checkpoint.origin)
        if before is not None and (
            checkpoint.size < before.size
            or (checkpoint.size == before.size and checkpoint.root != before.root)
        ):
            raise AuditFailed(f"{where}: {checkpoint.origin} at size {checkpoint.size} after "
                              f"size {before.size}: rolled back or forked")  # fmt: skip
        latest[checkpoint.origin] = checkpoint
        heads.append((where, checkpoint))
    return heads


def _check_roots(
    partitions: dict[Partition, list[LogRecord]],
    heads: list[tuple[str, Checkpoint]],
    report: AuditReport,
) -> None:
    wanted: dict[Partition, list[tuple[str, Checkpoint]]] = {}
    for where, checkpoint in heads:
        wanted.setdefault(_partition_of(where, checkpoint), []).append((where, checkpoint))
    for key, records in sorted(partitions.items()):
        if key not in wanted:
            report.uncovered[f"{key[0].value}/{key[1]}"] = len(records)
    for key, due in sorted(wanted.items()):
        records = partitions.get(key, [])
        due.sort(key=lambda head: head[1].size)
        tree, verified = CompactRange(), 0
        for where, checkpoint in due:
            if checkpoint.size > len(records):
                raise AuditFailed(f"{where}: {checkpoint.origin} has {checkpoint.size} records, "
                                  f"the export {len(records)}: records dropped or the log "
                                  "rolled back")  # fmt: skip
            while tree.size < checkpoint.size:
                tree.append(record_leaf(records[tree.size]) or b"")  # none: refused above
            if tree.root() != checkpoint.root:
                span = _span(records, verified, checkpoint.size)
                raise AuditFailed(f"{where}: {checkpoint.origin} at size {checkpoint.size}: "
                                  f"its root is not the records': one of {span} was dropped, "
                                  "added, moved or altered")  # fmt: skip
            last = records[checkpoint.size - 1].offset if checkpoint.size else -1
            beyond = records[checkpoint.size].offset if checkpoint.size < len(records) else None
            if last >= checkpoint.next_offset or (
                beyond is not None and beyond < checkpoint.next_offset
            ):
                raise AuditFailed(f"{where}: {checkpoint.origin} ends before offset "
                                  f"{checkpoint.next_offset}; the export's records do "
                                  "not")  # fmt: skip
            verified = checkpoint.size
        report.covered += verified
        if verified < len(records):
            report.uncovered[f"{key[0].value}/{key[1]}"] = len(records) - verified


def _partition_of(where: str, checkpoint: Checkpoint) -> Partition:
    topic, _, partition = checkpoint.origin.partition("/")[2].rpartition("/")
    role = _role_of(topic)
    if role is None or not partition.isdecimal():
        raise AuditFailed(f"{where}: origin {checkpoint.origin} names no partition of a log")
    return role, int(partition)


def _span(records: list[LogRecord], start: int, end: int) -> str:
    """The records of leaves [start, end) by position: those no earlier checkpoint vouched
    for, among which the difference is."""
    if end <= start:
        return f"the first {end} records"
    return f"{position(records[start])} .. {position(records[end - 1])}"
