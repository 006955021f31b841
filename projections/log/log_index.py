"""An export file's index: where each record of the log is and what it names, so a question
decodes only the records it needs; and its reducers' state at points along the log, so a cut
restores the nearest and replays only what comes after.

Built on first use (two reads of the file, shown as progress) and kept beside the file (or
under $JOBLEDGER_HOME/indexes where the file's directory is not writable); reused while the
file is unchanged (its size, modification time and Avro sync marker, which is random per
file written), rebuilt, said in one line, when stale or unreadable (every file it holds is
checked against the CRC-32 its meta.json keeps, and meta.json against its own: a flipped
byte in an array mostly still loads, and answers wrongly). It holds data only:
numpy arrays (read without pickle), JSON, and the reducers' state in the snapshot format
(services/host/snapshot.py, which builds only the classes the state declares), so reading an
index runs no code from it.

Per record, in log order (positions.log_order): its partition, offset, timestamp and event
time, its event type, its job (by `job_id`, and as `history.belongs_to` counts it), 64-bit
hashes of its event id, allocation, TaskExecutor and slot request (a hash only finds
candidates: each is decoded and compared), and the block of the file it is in. Per partition
of the reducers' inputs (partitions replay independently, replay.py): snapshots of that
partition's reducers where the log reaches every CHECKPOINT-th record. Every cut is a prefix
of each partition, so it is answered by how many records of each partition it holds.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import weakref
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from jobledger.schemas.topics import TopicRole
from jobledger.services.control.driver import PartitionedDriver, ReducerDriver
from jobledger.services.home import home
from jobledger.services.host.gc_policy import bulk_replay
from jobledger.services.host.snapshot import SnapshotRefused, decode

from .index_build import (
    COLUMNS,
    DERIVED,
    VERSION,
    Progress,
    build,
    digest,
    meta_check,
    request_digest,
)
from .log_file import LOG_ROLES, ExportFile, LogRecord
from .positions import Cut, Position, PositionError
from .replay import dead_lettered


@dataclass
class IndexedCut(Cut):
    """A cut the index resolved: `limits` says how many records of each partition it holds;
    its `records` are only those the question reads."""

    limits: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


class LogIndex:
    """The index of one export file, opened (built or rebuilt first where needed)."""

    def __init__(self, export: Path, directory: Path, meta: dict[str, Any]) -> None:
        self.export = export
        self.directory = directory
        if meta.get("crc") != meta_check(meta):
            raise ValueError("its meta.json is not the one written")
        self.meta = meta
        self.checks: dict[str, int] = meta["files"]
        self.count: int = meta["count"]
        self.kinds: list[str] = meta["kinds"]
        self.jobs = {name: i for i, name in enumerate(meta["jobs"])}
        self.partitions = [(TopicRole(role), p) for role, p in meta["partitions"]]
        self.key_of = {(r.value, p): k for k, (r, p) in enumerate(self.partitions)}
        self.refused = {tuple(r) for r in meta["refused"]}
        self.block_offsets = self._load("block_offsets")
        self.columns = {name: self._load(name) for name in COLUMNS}
        if any(len(c) != self.count for c in self.columns.values()):
            raise ValueError("its arrays are not one per record")
        derived = {name: self._load(name) for name in DERIVED}
        if any(len(d) != self.count for d in derived.values()):
            raise ValueError("its orders are not one per record")
        bounds = {"partition_key": len(self.partitions), "block": len(self.block_offsets),
                  "by_event_id": self.count, "by_partition": self.count}  # fmt: skip
        for name, bound in bounds.items():
            values = self.columns.get(name, derived.get(name))
            if values.dtype.kind not in "iu" or (
                len(values) and (values.min() < 0 or values.max() >= bound)
            ):
                raise ValueError(f"its {name} array names what is not there")
        self.by_event_id = derived["by_event_id"]
        self.sorted_ids = self.columns["event_id"][self.by_event_id]
        key = self.columns["partition_key"]
        self.by_partition = derived["by_partition"]
        """Log positions grouped by partition, each partition's in log (offset) order."""
        self.starts = np.concatenate(
            [[0], np.cumsum(np.bincount(key, minlength=len(self.partitions)))]
        )
        self.ranks = derived["ranks"]
        """Each record's place in its partition."""
        self.partition_offsets = self.columns["offset"][self.by_partition]
        """The offsets of `by_partition`: each partition's ascending (log order is offset
        order in a partition), so a record is found by its offset in log(n)."""
        self.admitted = self._admitted()
        self._file: ExportFile | None = None
        self._decoded: dict[int, LogRecord] = {}

    def _load(self, name: str) -> np.ndarray:
        data = self._checked(f"{name}.npy")
        return np.load(io.BytesIO(data), allow_pickle=False)

    def _checked(self, name: str) -> bytes:
        """A file of the index, if it holds what was written (its CRC-32 in meta.json)."""
        data = (self.directory / name).read_bytes()
        if zlib.crc32(data) != self.checks.get(name):
            raise ValueError(f"its {name} is not the one written")
        return data

    def _admitted(self) -> np.ndarray:
        """Whether each record reaches a reducer: an input the services did not refuse."""
        c = self.columns
        roles = np.array([LOG_ROLES.index(role) for role, _ in self.partitions], np.int8)
        self.letters = roles[c["partition_key"]] == LOG_ROLES.index(TopicRole.DEAD_LETTER)
        admitted = ~self.letters
        for where in self.refused:
            admitted[self._at(*where)] = False
        return admitted

    def _key(self, role: str, partition: int) -> int | None:
        return self.key_of.get((role, partition))

    def _at(self, role: str, partition: int, offset: int) -> np.ndarray:
        """The log positions of the records at `offset` of a partition (none if not here)."""
        key = self._key(role, partition)
        if key is None:
            return np.zeros(0, np.int64)
        start, end = self.starts[key], self.starts[key + 1]
        offsets = self.partition_offsets[start:end]
        first, last = (
            np.searchsorted(offsets, offset, "left"),
            np.searchsorted(offsets, offset, "right"),
        )
        return self.by_partition[start + first : start + last]

    def _export(self) -> ExportFile:
        """The export, opened once for every question's reads (closed with the index)."""
        if self._file is None:
            self._file = ExportFile(self.export)
            weakref.finalize(self, self._file.close)
        return self._file

    # -- cuts --------------------------------------------------------------------------

    def cut(self, position: Position) -> IndexedCut | None:
        """The cut `position` names, or None where it names nothing here (the unindexed
        path then says what exists, in its own words)."""
        if position.kind == "end":
            return self._prefix(position, self.count)
        if position.kind == "count":
            if position.value > self.count:
                raise PositionError(f"{position.text!r}: this log has {self.count} records")
            return self._prefix(position, position.value)
        if position.kind == "time":
            limits = np.array([self._until(k, position.value) for k in range(len(self.partitions))],
                              np.int64)  # fmt: skip
            return self._made(position, limits)
        found = self._record_at(position) if position.kind == "record" else self._event(position)
        return None if found is None else self._prefix(position, found + 1)

    def _rows_of(self, key: int) -> np.ndarray:
        return self.by_partition[self.starts[key] : self.starts[key + 1]]

    def _until(self, key: int, time: int) -> int:
        after = np.nonzero(self.columns["timestamp"][self._rows_of(key)] > time)[0]
        return int(after[0]) if len(after) else int(self.starts[key + 1] - self.starts[key])

    def _record_at(self, position: Position) -> int | None:
        key = self._key(position.role, position.partition)
        if key is None:
            return None
        rows = self._rows_of(key)
        # an offset that holds no record (a transaction marker) names the next one
        hits = np.nonzero(self.columns["offset"][rows] >= position.offset)[0]
        return int(rows[hits[0]]) if len(hits) else None

    def _event(self, position: Position) -> int | None:
        found = self._with_id(position.event_id, np.ones(self.count, bool))
        return found[0] if len(found) == 1 else None

    def _prefix(self, position: Position, n: int) -> IndexedCut:
        every = range(len(self.partitions))
        limits = np.array([np.searchsorted(self._rows_of(k), n) for k in every], np.int64)
        return self._made(position, limits)

    def _made(self, position: Position, limits: np.ndarray) -> IndexedCut:
        offsets = {}
        for key, limit in enumerate(limits):
            if limit:
                role, partition = self.partitions[key]
                last = self._rows_of(key)[limit - 1]
                offsets[f"{role.value}/{partition}"] = int(self.columns["offset"][last])
        held = self.mask(limits)
        latest = int(self.columns["event_time"][held].max()) if held.any() else None
        return IndexedCut(position.text, [], set(self.refused), offsets, int(limits.sum()),
                          latest, limits)  # fmt: skip

    def mask(self, limits: np.ndarray) -> np.ndarray:
        """Whether each record (log order) is in the cut `limits` describes."""
        return self.ranks < limits[self.columns["partition_key"]]

    # -- records -----------------------------------------------------------------------

    def records(self, positions: Iterable[int]) -> list[LogRecord]:
        """The records at these log positions, in log order, decoding each block once."""
        wanted = sorted(set(int(p) for p in positions) - set(self._decoded))
        block, in_block = self.columns["block"], self.columns["in_block"]
        by_block: dict[int, list[int]] = {}
        for p in wanted:
            by_block.setdefault(int(block[p]), []).append(p)
        for b, ps in sorted(by_block.items()):
            export = self._export()
            rows = export.block_at(int(self.block_offsets[b]))
            for p in ps:
                self._decoded[p] = next(export.records([rows[in_block[p]]]))
        return [self._decoded[int(p)] for p in sorted(set(int(p) for p in positions))]

    def _with_id(self, event_id: str, held: np.ndarray) -> list[int]:
        """Positions of the cut's records carrying `event_id`, in log order."""
        h = np.uint64(digest(event_id))
        lo, hi = (
            np.searchsorted(self.sorted_ids, h, "left"),
            np.searchsorted(self.sorted_ids, h, "right"),
        )
        candidates = [int(p) for p in sorted(self.by_event_id[lo:hi]) if held[p]]
        return [p for p, r in zip(candidates, self.records(candidates), strict=True)
                if r.event.event_id == event_id]  # fmt: skip

    def _named(self, column: str, value: str, held: np.ndarray) -> np.ndarray:
        return np.nonzero(held & (self.columns[column] == np.uint64(digest(value))))[0]

    def job_records(self, cut: IndexedCut, job: str) -> list[LogRecord] | None:
        """Every record of `job` in the cut (naming it, or counted to it by `belongs_to`),
        the refusals of its task state reports (`refused_reports`), and the dead letters
        naming its records (`failovers` skips what they name, whatever their key); None if
        no record belongs to it."""
        j = self.jobs.get(job)
        held = self.mask(cut.limits)
        c = self.columns
        if j is None or not (held & (c["belongs"] == j)).any():
            return None
        own = held & ((c["job"] == j) | (c["belongs"] == j))
        refusals = held & (c["rejected"] != 0) & np.isin(c["rejected"], c["event_id"][own])
        letters = np.nonzero(held & self.letters & ~own)[0]
        naming = [
            p for p, letter in zip(letters, self.records(letters), strict=True)
            if any(own[self._at(*named)].any() for named in dead_lettered([letter]))
        ]  # fmt: skip
        return self.records([*np.nonzero(own | refusals)[0], *naming])

    def submitted(self, cut: IndexedCut, job: str) -> bool:
        """Whether the cut holds the job's JobSubmitted."""
        c = self.columns
        kind = self.kinds.index("JobSubmitted") if "JobSubmitted" in self.kinds else -1
        j = self.jobs.get(job, -2)
        return bool((self.mask(cut.limits) & (c["kind"] == kind) & (c["job"] == j)).any())

    def history_records(self, cut: IndexedCut, job: str) -> list[LogRecord] | None:
        """The records of `job` (`belongs_to`) in the cut, and each one's cause (the latest
        record before it with the cause's id); None if no record belongs to it."""
        j = self.jobs.get(job)
        held = self.mask(cut.limits)
        if j is None:
            return None
        own = np.nonzero(held & (self.columns["belongs"] == j))[0]
        if not len(own):
            return None
        causes = []
        for p, record in zip(own, self.records(own), strict=True):
            if cause := record.event.cause_event_id:
                causes += [f for f in self._with_id(cause, held) if f < p][-1:]
        return self.records([*own, *causes])

    def explain_records(self, cut: IndexedCut, target: str) -> list[LogRecord] | None:
        """What `explain` reads for an event id (its chain of causes), an allocation or a
        TaskExecutor (their records and their causes); None if the target names nothing."""
        held = self.mask(cut.limits)
        first = self._with_id(target, held)[:1]
        if first:
            chain, seen = first, {target}
            while (cause := self.records(chain[-1:])[0].event.cause_event_id) and cause not in seen:
                seen.add(cause)
                found = self._with_id(cause, held)
                if not found:
                    break
                chain.append(found[0])
            return self.records(chain)
        for column, name in (("allocation", "allocation_id"), ("resource", "resource_id")):
            named = [r for r in self.records(self._named(column, target, held))
                     if getattr(r.event, name, None) == target]  # fmt: skip
            if named:
                causes = {r.event.cause_event_id for r in named if r.event.cause_event_id}
                firsts = [found[0] for c in causes if (found := self._with_id(c, held))]
                return self.records([*(self._position(r) for r in named), *firsts])
        return None

    def _position(self, record: LogRecord) -> int:
        return next(p for p, r in self._decoded.items() if r is record)

    def request_times(self, cut: IndexedCut, wanted: set[tuple[str, str]]) -> dict[
        tuple[str, str], int
    ]:  # fmt: skip
        """When each (job, slot request) in `wanted` was first asked for in the cut (the
        event time of its first SlotRequested or NewAllocatedSlotRequested), found by a
        128-bit hash of the pair, which no two pairs of one log share in practice."""
        c = self.columns
        halves = {request_digest(*key): key for key in wanted}
        times: dict[tuple[str, str], int] = {}
        asked = np.nonzero(self.mask(cut.limits) & (c["request"] != 0))[0]
        firsts, seconds = c["request"][asked].tolist(), c["request2"][asked].tolist()
        for p, first, second in zip(asked.tolist(), firsts, seconds, strict=True):
            key = halves.get((first, second))
            if key is not None and key not in times:
                times[key] = int(c["event_time"][p])
        return times

    def job_partitions(self, cut: IndexedCut, job: str) -> list[int]:
        """The partitions whose reducers hold `job` (its records' job-topic partitions) and
        the ResourceManager's."""
        c = self.columns
        j = self.jobs.get(job, -2)
        keys = set(np.unique(c["partition_key"][(c["job"] == j) | (c["belongs"] == j)]).tolist())
        return [
            k for k, (role, _) in enumerate(self.partitions)
            if role is TopicRole.RESOURCE_MANAGER or (role is TopicRole.JOB and k in keys)
        ]  # fmt: skip

    # -- state -------------------------------------------------------------------------

    def state(self, cut: IndexedCut, keys: list[int] | None = None) -> ReducerDriver:
        """The reducers' state at the cut (of the partitions `keys`, default all): each
        partition's nearest snapshot at or before the cut, and its records after it."""
        drivers: dict[tuple[TopicRole, int], ReducerDriver] = {}
        rest: list[int] = []
        for key in range(len(self.partitions)) if keys is None else keys:
            limit = int(cut.limits[key])
            start, restored = self._restored(key, limit)
            if restored is not None:
                drivers[self.partitions[key]] = restored
            rows = self._rows_of(key)[start:limit]
            rest.extend(int(p) for p in rows[self.admitted[rows]])
        with bulk_replay():
            for record in self._stream(sorted(rest)):
                where = (record.role, record.partition)
                if where not in drivers:
                    drivers[where] = ReducerDriver()
                drivers[where].process(record.event)
        return PartitionedDriver(ReducerDriver, dict(sorted(drivers.items()))).merged()

    def _restored(self, key: int, limit: int) -> tuple[int, ReducerDriver | None]:
        """The partition's latest kept state at or before `limit` records of it, and how
        many records it reflects; a snapshot that does not read is passed over (replaying
        from an earlier one costs time, never correctness)."""
        ranks = sorted((r for r in self.meta["snapshots"].get(str(key), []) if r <= limit),
                       reverse=True)  # fmt: skip
        for rank in ranks:
            try:
                data = zlib.decompress(self._checked(f"snap-{key}-{rank}"))
                snapshot = decode(data)
            except (OSError, ValueError, zlib.error, SnapshotRefused):
                continue
            if snapshot is not None:
                return rank, snapshot.driver
        return 0, None

    def _stream(self, positions: list[int]) -> Iterable[LogRecord]:
        """The records at these positions in log order, a block at a time, none kept."""
        export = self._export()
        block, in_block = self.columns["block"], self.columns["in_block"]
        by_block: dict[int, list[int]] = {}
        for p in positions:
            by_block.setdefault(int(block[p]), []).append(p)
        rows_of: dict[int, list[dict[str, Any]]] = {}
        remaining = {b: len(ps) for b, ps in by_block.items()}
        for p in positions:
            b = int(block[p])
            if b not in rows_of:
                rows_of[b] = export.block_at(int(self.block_offsets[b]))
            yield next(export.records([rows_of[b][in_block[p]]]))
            remaining[b] -= 1
            if not remaining[b]:
                del rows_of[b]


# -- where an index lives, and whether it is the file's ------------------------------------


def index_directory(export: Path) -> Path:
    """Beside the file if its directory is writable, else under $JOBLEDGER_HOME."""
    if os.access(export.resolve().parent, os.W_OK):
        return export.resolve().with_name(export.name + ".index")
    name = hashlib.blake2b(str(export.resolve()).encode(), digest_size=8).hexdigest()
    return home() / "indexes" / f"{export.name}-{name}"


def identity(export: Path) -> dict[str, Any]:
    """What says the file is the one indexed: its size, modification time and sync marker."""
    stat = export.stat()
    with ExportFile(export) as opened:
        marker = opened.sync_marker.hex()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sync": marker}


def open_index(export: Path, progress: Progress, say: Callable[[str], None]) -> LogIndex | None:
    """The index of `export`: the one kept for it if it is the file's and readable, else
    built anew (with progress) and kept; None, said in one line, where it cannot be kept
    (the question is then answered from the whole file)."""
    directory = index_directory(export)
    now = identity(export)
    why = "missing"
    if (directory / "meta.json").exists():
        try:
            meta = json.loads((directory / "meta.json").read_text())
            if meta.get("version") != VERSION:
                why = f"of version {meta.get('version')}, not {VERSION}"
            elif meta.get("export") != now:
                why = "stale (the file changed since)"
            else:
                return LogIndex(export, directory, meta)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            why = f"unreadable ({exc})"
        say(f"the index of {export} is {why}: rebuilding it")
    try:
        build(export, directory, now, progress)
        return LogIndex(export, directory, json.loads((directory / "meta.json").read_text()))
    except OSError as exc:
        say(f"cannot keep an index of {export} ({exc}): reading the whole file")
        return None
