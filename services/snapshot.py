"""Snapshots of one partition's reducers plus the input offset they reflect.

The bytes start with a magic and a version; anything else (an older version, a torn or
foreign record) is refused and the partition is rebuilt from the beginning of its log
instead, so a bad snapshot costs time, never correctness.

Snapshots are pickled, and the snapshot topic may be written by anyone who can reach the
broker, so they are read with an unpickler that resolves only the classes of reducer state:
classes defined in `STATE_MODULES` (and `collections.OrderedDict`). Anything else a pickle
names (`os.system`, `builtins.eval`, a function, a module's imported name) refuses the whole
snapshot, so reading one can construct state objects and nothing more.
"""

from __future__ import annotations

import gc
import importlib
import io
import logging
import pickle
import struct
from dataclasses import dataclass, field

from .driver import ReducerDriver

log = logging.getLogger("jobledger.snapshot")

MAGIC = b"JLSNAP"
VERSION = 4
"""4: the JobMaster holds a Scheduler (services/scheduler.py), the SlotPool's listener (3: the
driver remembers the decisions it awaits back and the ids it only rejected)."""
CHUNK_MAGIC = b"JLCHNK"
CHUNK_HEADER = struct.Struct(">QII")
"""A chunk's snapshot id (its input offset), index and count."""
CHUNK_BYTES = 256 * 1024
"""A snapshot is written in records of at most this many bytes, so one of any size fits
under the broker's message limit (a state larger than the limit once killed the service
at every snapshot, and again after every restart)."""

_SCHEMA_STATE = "cluster deadletters jobs kvstate model rejections slots tasks timers types"
_SERVICE_STATE = (
    "driver execution_graph execution_state job_master job_status key_groups "
    "kv_state_location_registry resource_manager resource_profile restart_strategy "
    "scheduler slot_placement slot_pool snapshot task_executor task_slot_table"
)
STATE_MODULES = frozenset(
    [f"jobledger.schemas.{name}" for name in _SCHEMA_STATE.split()]
    + [f"jobledger.services.{name}" for name in _SERVICE_STATE.split()]
)
"""The modules whose classes make up reducer state: the pure core, never the runtime, the CLI,
the Kafka plumbing or the runner."""
CONTAINERS = frozenset({("collections", "OrderedDict"), ("collections", "deque")})


class SnapshotRefused(ValueError):
    """A snapshot record that is not a snapshot this version can safely read; says why."""


@dataclass(frozen=True)
class Snapshot:
    driver: ReducerDriver
    next_offset: int
    """The first input offset the state does not reflect."""


class _StateUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> type:
        if (module, name) in CONTAINERS:
            return super().find_class(module, name)
        if module in STATE_MODULES and name.isidentifier() and not name.startswith("_"):
            found = getattr(importlib.import_module(module), name, None)
            if isinstance(found, type) and found.__module__ == module:
                return found
        raise SnapshotRefused(f"it names {module}.{name}, which is not a class of reducer state")


def encode(snapshot: Snapshot) -> bytes:
    return MAGIC + bytes([VERSION]) + pickle.dumps(snapshot, protocol=pickle.HIGHEST_PROTOCOL)


def decode(data: bytes | None) -> Snapshot | None:
    """The snapshot in `data`; None where there is none; SnapshotRefused with the reason
    where the record is not one this version reads."""
    if not data:
        return None
    if not data.startswith(MAGIC) or len(data) <= len(MAGIC):
        raise SnapshotRefused("it does not start with the snapshot magic")
    if data[len(MAGIC)] != VERSION:
        raise SnapshotRefused(f"it is version {data[len(MAGIC)]}, this reads version {VERSION}")
    collecting = gc.isenabled()
    gc.disable()  # a snapshot is millions of objects: collecting while loading them cost 80%
    try:
        snapshot = _StateUnpickler(io.BytesIO(data[len(MAGIC) + 1 :])).load()
    except SnapshotRefused:
        raise
    except Exception as exc:  # a torn or corrupt record
        raise SnapshotRefused(f"it is corrupt: {exc!r}") from None
    finally:
        if collecting:
            gc.enable()
    if not isinstance(snapshot, Snapshot):
        raise SnapshotRefused(f"it holds a {type(snapshot).__name__}, not a Snapshot")
    return snapshot


def chunk_records(owner: str, snapshot_id: int, data: bytes) -> list[tuple[bytes, bytes]]:
    """(key, value) records that carry `data` in chunks; written in one transaction, so a
    reader sees all of them or none. Keys name the chunk's index, so compaction keeps each
    index's latest chunk; a reader assembles the latest snapshot whose chunks are all there."""
    pieces = [data[i : i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)] or [b""]
    return [
        (
            f"{owner}#{index}".encode(),
            CHUNK_MAGIC + CHUNK_HEADER.pack(snapshot_id, index, len(pieces)) + piece,
        )
        for index, piece in enumerate(pieces)
    ]


@dataclass
class SnapshotAssembler:
    """Reassembles one owner's latest complete snapshot from the records of its partition of
    the snapshot topic, read in offset order."""

    owner: str
    latest: bytes | None = None
    _parts: dict[int, dict[int, bytes]] = field(default_factory=dict)

    def add(self, key: bytes | None, value: bytes | None) -> None:
        if key is None or value is None:
            return
        name = key.decode("utf-8", "replace")
        if name == self.owner:  # a whole snapshot in one record, as written before chunks
            self.latest = value
            return
        if not name.startswith(f"{self.owner}#") or not value.startswith(CHUNK_MAGIC):
            return
        head = len(CHUNK_MAGIC) + CHUNK_HEADER.size
        if len(value) < head:
            return
        snapshot_id, index, count = CHUNK_HEADER.unpack(value[len(CHUNK_MAGIC) : head])
        parts = self._parts.setdefault(snapshot_id, {})
        parts[index] = value[head:]
        if count and len(parts) == count and set(parts) == set(range(count)):
            self.latest = b"".join(parts[i] for i in range(count))
            del self._parts[snapshot_id]


def decode_or_rebuild(data: bytes | None, where: str) -> Snapshot | None:
    """`decode`, with a refusal logged as an error and answered by a rebuild from the log."""
    try:
        return decode(data)
    except SnapshotRefused as exc:
        log.error("snapshot of %s refused, rebuilding it from the log instead: %s", where, exc)
        return None
