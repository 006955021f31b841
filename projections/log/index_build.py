"""Building an export file's index (log_index.py reads it): two reads of the file, the first
for where each record is and what it names, the second to replay the log and keep the
reducers' state every CHECKPOINT records; and the layout both sides share (its version, its
columns, the hashes that name records), so neither can change it alone.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import os
import shutil
import zlib
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from jobledger.schemas.topics import TopicRole
from jobledger.services.control.driver import ReducerDriver
from jobledger.services.host.gc_policy import bulk_replay
from jobledger.services.host.snapshot import Snapshot, encode

from .log_file import LOG_ROLES, ExportFile, ExportUnreadable, record_of
from .replay import dead_lettered

VERSION = 5
"""Of the index's layout: an index of another version is rebuilt."""
CHECKPOINT = 50_000
"""Log records between two snapshots of the reducers: a cut replays at most this many."""
COLUMNS = (
    "partition_key", "offset", "timestamp", "event_time", "kind", "job", "belongs",
    "event_id", "allocation", "resource", "request", "request2", "rejected", "block", "in_block",
)  # fmt: skip
DERIVED = ("by_event_id", "by_partition", "ranks")
"""Orders worked out from the columns once, at build: the records by event id hash, by
partition, and each record's place in its partition."""
REQUESTS = ("SlotRequested", "NewAllocatedSlotRequested")
"""The events that ask for a slot: `slots` ages a pending request from the first of them."""

T = TypeVar("T")
Progress = Callable[[Iterable[T], str, int | None], Iterable[T]]


def digest(text: str) -> int:
    """A stable 64-bit hash, never 0 (0 marks "names none")."""
    value = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(value, "little") or 1


def request_digest(job: str, request: str) -> tuple[int, int]:
    """A slot request's (job, request) as two 64-bit halves of one 128-bit hash."""
    text = f"{job}\0{request}".encode("utf-8", "surrogatepass")
    value = hashlib.blake2b(text, digest_size=16).digest()
    return int.from_bytes(value[:8], "little") or 1, int.from_bytes(value[8:], "little")


def _belongs(kind: str, data: dict[str, Any]) -> str | None:
    """The job `history.belongs_to` counts the event of, from its Avro record."""
    if kind in ("TimerFired", "EventRejected"):
        return data["owner_id"] if data.get("scope") == "JOB" else None
    if kind == "DeadLettered":
        key = data.get("original_key")
        try:
            return key.decode("utf-8") if isinstance(key, bytes) else None
        except UnicodeDecodeError:
            return None
    return data.get("job_id")


def meta_check(meta: dict[str, Any]) -> int:
    """The CRC-32 of meta.json's fields but `crc`: a flipped digit of a refused offset or a
    snapshot's rank still reads as JSON, and would answer wrongly."""
    return zlib.crc32(json.dumps({k: v for k, v in meta.items() if k != "crc"},
                                 sort_keys=True).encode())  # fmt: skip


@dataclass
class _Columns:
    """The index's columns in file order, as they are read."""

    role: array = field(default_factory=lambda: array("b"))
    partition: array = field(default_factory=lambda: array("q"))
    values: dict[str, array] = field(default_factory=dict)

    def __post_init__(self) -> None:
        types = {
            "event_id": "Q", "allocation": "Q", "resource": "Q", "request": "Q", "request2": "Q",
            "rejected": "Q",
            "kind": "h", "job": "l", "belongs": "l", "block": "l", "in_block": "l",
        }  # fmt: skip
        for name in ("offset", "timestamp", "event_time", *types):
            self.values[name] = array(types.get(name, "q"))


def _name(names: dict[str, int], value: str | None) -> int:
    return -1 if value is None else names.setdefault(value, len(names))


def build(export: Path, directory: Path, now: dict[str, Any], progress: Progress) -> None:
    """Read the file twice: once for where each record is and what it names, once to replay
    it and keep the reducers' state every CHECKPOINT records of the log."""
    columns, kinds, jobs, refused, block_offsets = _first_read(export, progress)
    keys = sorted({(r, p) for r, p in zip(columns.role, columns.partition, strict=True)})
    key_of = {k: i for i, k in enumerate(keys)}
    file_key = np.array([key_of[k] for k in zip(columns.role, columns.partition, strict=True)],
                        np.int64)  # fmt: skip
    v = {name: np.frombuffer(a, a.typecode).copy() if len(a) else np.zeros(0, a.typecode)
         for name, a in columns.values.items()}  # fmt: skip
    order = _log_order(file_key, v["offset"], v["timestamp"], len(keys))
    ranks = _checkpoint_ranks(file_key[order], len(keys))
    staging = directory.with_name(directory.name + f".building-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:  # a build that fails (no room, a concurrent build kept first) leaves nothing
        staging.mkdir(parents=True)
        partitions = [[LOG_ROLES[r].value, p] for r, p in keys]
        snapshots = _second_read(
            export, staging, file_key, order, ranks, refused, partitions, progress
        )
        np.save(staging / "partition_key.npy", file_key[order], allow_pickle=False)
        for name, values in v.items():
            np.save(staging / f"{name}.npy", values[order], allow_pickle=False)
        np.save(
            staging / "block_offsets.npy", np.array(block_offsets, np.int64), allow_pickle=False
        )
        for name, values in _derived(v["event_id"][order], file_key[order], len(keys)).items():
            np.save(staging / f"{name}.npy", values, allow_pickle=False)
        meta = {
            "version": VERSION, "export": now, "count": len(order),
            "kinds": list(kinds), "jobs": list(jobs), "partitions": partitions,
            "refused": sorted(list(r) for r in refused), "snapshots": snapshots,
            "files": {p.name: zlib.crc32(p.read_bytes()) for p in staging.iterdir()},
        }  # fmt: skip
        meta["crc"] = meta_check(meta)
        (staging / "meta.json").write_text(json.dumps(meta))
        old = directory.with_name(directory.name + f".old-{os.getpid()}")
        if directory.exists():
            directory.rename(old)
        staging.rename(directory)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _derived(event_id: np.ndarray, key: np.ndarray, keys: int) -> dict[str, np.ndarray]:
    """The DERIVED orders of the columns (log order)."""
    by_partition = np.argsort(key, kind="stable")
    starts = np.concatenate([[0], np.cumsum(np.bincount(key, minlength=keys))])
    ranks = np.empty(len(key), np.int64)
    ranks[by_partition] = np.arange(len(key)) - np.repeat(starts[:-1], np.diff(starts))
    return {
        "by_event_id": np.argsort(event_id, kind="stable"),
        "by_partition": by_partition,
        "ranks": ranks,
    }


def _first_read(
    export: Path, progress: Progress
) -> tuple[_Columns, dict[str, int], dict[str, int], set[tuple[str, int, int]], list[int]]:
    columns = _Columns()
    v = columns.values
    kinds: dict[str, int] = {}
    jobs: dict[str, int] = {}
    letters = []
    block_offsets = []
    with ExportFile(export) as opened, bulk_replay():

        def rows() -> Iterable[tuple[int, int, dict[str, Any]]]:
            for b, block in enumerate(opened.blocks()):
                block_offsets.append(block.offset)
                for i, row in enumerate(opened.rows(block)):
                    yield b, i, row

        for b, i, row in progress(rows(), f"indexing {export}", None):
            name, data = row["event"]
            kind = name.rsplit(".", 1)[-1]
            try:
                role = LOG_ROLES.index(TopicRole(row["role"]))
            except ValueError as exc:
                raise ExportUnreadable(f"{export}: a record of topic role {row['role']!r}, "
                                       "which is no part of a log") from exc  # fmt: skip
            if role == LOG_ROLES.index(TopicRole.DEAD_LETTER):
                letters.append(record_of(row))
            columns.role.append(role)
            columns.partition.append(row["partition"])
            v["offset"].append(row["offset"])
            v["timestamp"].append(row["timestamp"])
            v["event_time"].append(data["event_time"])
            v["kind"].append(_name(kinds, kind))
            v["job"].append(_name(jobs, data.get("job_id")))
            v["belongs"].append(_name(jobs, _belongs(kind, data)))
            v["event_id"].append(digest(data["event_id"]))
            for column, attr in (("allocation", "allocation_id"), ("resource", "resource_id")):
                value = data.get(attr)
                v[column].append(digest(value) if isinstance(value, str) else 0)
            first, second = (
                request_digest(data["job_id"], data["slot_request_id"])
                if kind in REQUESTS else (0, 0)
            )  # fmt: skip
            v["request"].append(first)
            v["request2"].append(second)
            refuses = kind == "EventRejected" and (
                data.get("rejected_event_type") == "TaskExecutionStateChanged"
            )
            v["rejected"].append(digest(data["rejected_event_id"]) if refuses else 0)
            v["block"].append(b)
            v["in_block"].append(i)
    return columns, kinds, jobs, dead_lettered(letters), block_offsets


def _log_order(key: np.ndarray, offset: np.ndarray, timestamp: np.ndarray, keys: int) -> np.ndarray:
    """File positions in log order (positions.log_order): each partition by offset, merged
    by timestamp, ties to the earlier partition."""
    by_offset = np.lexsort((offset, key))  # stable: equal offsets keep file order
    grouped = key[by_offset]
    starts = np.searchsorted(grouped, np.arange(keys + 1))
    partitions = [by_offset[starts[k] : starts[k + 1]] for k in range(keys)]
    if all((np.diff(timestamp[rows]) >= 0).all() for rows in partitions):
        ranks = np.empty(len(key), np.int64)
        for rows in partitions:
            ranks[rows] = np.arange(len(rows))
        return np.lexsort((ranks, key, timestamp))
    stamps = timestamp.tolist()
    merged = heapq.merge(*(rows.tolist() for rows in partitions), key=stamps.__getitem__)
    return np.fromiter(merged, np.int64, len(key))


def _checkpoint_ranks(key_in_log: np.ndarray, keys: int) -> list[set[int]]:
    """Per partition, how many of its records the log holds at every CHECKPOINT-th record
    and at its end: where that partition's state is kept."""
    n = len(key_in_log)
    points = [*range(CHECKPOINT, n, CHECKPOINT), n]
    wanted: list[set[int]] = [set() for _ in range(keys)]
    for k in range(keys):
        positions = np.nonzero(key_in_log == k)[0]
        wanted[k] = {int(r) for r in np.searchsorted(positions, points) if r}
    return wanted


def _second_read(
    export: Path, staging: Path, file_key: np.ndarray, order: np.ndarray,
    ranks: list[set[int]], refused: set[tuple[str, int, int]], partitions: list[list[Any]],
    progress: Progress,
) -> dict[str, list[int]]:  # fmt: skip
    """Replay the file in its own order (a partition's records in offset order, which is its
    log order: else that partition keeps no snapshots) and keep each partition's state at
    its checkpoint ranks."""
    in_log = np.empty(len(order), np.int64)
    in_log[order] = np.arange(len(order))
    drivers: dict[int, ReducerDriver] = {}
    seen = [0] * len(partitions)
    last_log = [-1] * len(partitions)
    ordered = [True] * len(partitions)
    kept: dict[str, list[int]] = {}
    dead = LOG_ROLES.index(TopicRole.DEAD_LETTER)
    with ExportFile(export) as opened, bulk_replay():
        records = (r for block in opened.blocks() for r in opened.records(opened.rows(block)))
        for i, record in enumerate(progress(records, "replaying for the index", len(file_key))):
            k = int(file_key[i])
            if not ordered[k]:
                continue
            if in_log[i] < last_log[k]:
                ordered[k] = False
                kept.pop(str(k), None)
                continue
            last_log[k] = int(in_log[i])
            seen[k] += 1
            role = LOG_ROLES.index(record.role)
            if role != dead and (record.role.value, record.partition, record.offset) not in refused:
                if k not in drivers:
                    drivers[k] = ReducerDriver()
                drivers[k].process(record.event)
            if seen[k] in ranks[k] and k in drivers:
                data = zlib.compress(encode(Snapshot(drivers[k], seen[k])), 1)
                (staging / f"snap-{k}-{seen[k]}").write_bytes(data)
                kept.setdefault(str(k), []).append(seen[k])
    return kept
