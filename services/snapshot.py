"""Snapshots of one partition's reducers plus the input offset they reflect.

The bytes start with a magic and a version; anything else (an older version, a torn or
foreign record) is ignored and the partition is rebuilt from the beginning of its log
instead, so a bad snapshot costs time, never correctness. Snapshots are pickled: the snapshot
topic must be writable by the services only.
"""

from __future__ import annotations

import gc
import pickle
from dataclasses import dataclass

from .driver import ReducerDriver

MAGIC = b"JLSNAP"
VERSION = 2


@dataclass(frozen=True)
class Snapshot:
    driver: ReducerDriver
    next_offset: int
    """The first input offset the state does not reflect."""


def encode(snapshot: Snapshot) -> bytes:
    return MAGIC + bytes([VERSION]) + pickle.dumps(snapshot, protocol=pickle.HIGHEST_PROTOCOL)


def decode(data: bytes | None) -> Snapshot | None:
    if not data or not data.startswith(MAGIC) or data[len(MAGIC)] != VERSION:
        return None
    collecting = gc.isenabled()
    gc.disable()  # a snapshot is millions of objects: collecting while loading them cost 80%
    try:
        snapshot = pickle.loads(data[len(MAGIC) + 1 :])
    except Exception:  # a torn or foreign record: rebuild from the log instead
        return None
    finally:
        if collecting:
            gc.enable()
    return snapshot if isinstance(snapshot, Snapshot) else None
