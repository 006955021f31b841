"""Snapshots of one partition's reducers plus the input offset they reflect.

A snapshot is versioned data (services/host/snapshot_format.py): the magic `JLSNAP`, the format
version (one byte), the CRC-64-AVRO fingerprint of the Avro schema it was written with (8
bytes, little-endian, as Avro's single-object encoding writes it), then the Avro body. The
schema is `snapshot.avsc` beside this module; earlier ones are kept in `snapshot-history/`,
and a snapshot written with one of them is upcast by Avro schema resolution.

Anything else is refused with the reason: another magic, another format version (version 4
and older were pickles, never unpickled now), a schema this version does not know, a torn
body, values that do not build the state. A refused snapshot is answered by rebuilding the
partition from the beginning of its log, so a bad snapshot costs time, never correctness;
and nothing read from the snapshot topic can run code: reading builds only the classes the
state declares.
"""

from __future__ import annotations

import gc
import io
import json
import logging
import struct
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from fastavro import parse_schema, schemaless_writer

from jobledger.schemas.avro_body import BodyError, BodyReader
from jobledger.schemas.catalog import fingerprint_number, schema_fingerprint

from ..control.driver import ReducerDriver
from .snapshot_format import SnapshotDataError, state_schema

log = logging.getLogger("jobledger.snapshot")

MAGIC = b"JLSNAP"
VERSION = 5
"""5: Avro data with the schema's fingerprint (1-4 were pickles)."""
SCHEMA_FILE = Path(__file__).with_name("snapshot.avsc")
HISTORY = Path(__file__).with_name("snapshot-history")
_HEADER = len(MAGIC) + 1 + 8
CHUNK_MAGIC = b"JLCHNK"
CHUNK_HEADER = struct.Struct(">QII")
"""A chunk's snapshot id (its input offset), index and count."""
CHUNK_BYTES = 256 * 1024
"""A snapshot is written in records of at most this many bytes, so one of any size fits
under the broker's message limit (a state larger than the limit once killed the service
at every snapshot, and again after every restart)."""


class SnapshotRefused(ValueError):
    """A snapshot record that is not a snapshot this version can safely read; says why."""


@dataclass(frozen=True)
class Snapshot:
    driver: ReducerDriver
    next_offset: int
    """The first input offset the state does not reflect."""


def current_schema() -> dict[str, Any]:
    """The Avro schema snapshots are written with, derived from the state's type hints."""
    return state_schema(Snapshot).schema


@cache
def _parsed_current() -> tuple[bytes, Any]:
    schema = current_schema()
    return schema_fingerprint(parse_schema(schema)), parse_schema(schema)


@cache
def _known_writers() -> dict[bytes, dict[str, Any]]:
    """Earlier schemas by fingerprint: the snapshots this version can upcast."""
    writers = {}
    for path in sorted(HISTORY.glob("*.avsc")):
        schema = json.loads(path.read_text())
        writers[schema_fingerprint(parse_schema(schema))] = schema
    return writers


@cache
def _body_reader(written_with: bytes) -> BodyReader:
    """The reader of bodies written with a known schema, resolved to the current one;
    BodyError if its values do not resolve to the current schema's."""
    if written_with == _parsed_current()[0]:
        return BodyReader(current_schema())
    return BodyReader(_known_writers()[written_with], current_schema())


def schema_file_text() -> str:
    return json.dumps(current_schema(), indent=2) + "\n"


def write_schema_file() -> list[Path]:
    """Rewrite `snapshot.avsc` from the state's types, keeping the schema it replaces in the
    history so that snapshots written with it are still read (upcast), not rebuilt."""
    written = []
    text = schema_file_text()
    if SCHEMA_FILE.exists() and SCHEMA_FILE.read_text() != text:
        old = parse_schema(json.loads(SCHEMA_FILE.read_text()))
        HISTORY.mkdir(exist_ok=True)
        kept = HISTORY / f"{fingerprint_number(schema_fingerprint(old)):016x}.avsc"
        kept.write_text(SCHEMA_FILE.read_text())
        written.append(kept)
    if not SCHEMA_FILE.exists() or SCHEMA_FILE.read_text() != text:
        SCHEMA_FILE.write_text(text)
        written.append(SCHEMA_FILE)
    return written


def warm() -> None:
    """Build the schema and its codecs now: a forked child (`snapshot_fork`) then finds
    them built, instead of building them again in every child."""
    _parsed_current()


def encode(snapshot: Snapshot) -> bytes:
    fingerprint, parsed = _parsed_current()
    out = io.BytesIO()
    out.write(MAGIC + bytes([VERSION]) + fingerprint)
    schemaless_writer(out, parsed, state_schema(Snapshot).encode(snapshot))
    return out.getvalue()


def decode(data: bytes | None) -> Snapshot | None:
    """The snapshot in `data`; None where there is none; SnapshotRefused with the reason
    where the record is not one this version reads."""
    if not data:
        return None
    if not data.startswith(MAGIC) or len(data) <= len(MAGIC):
        raise SnapshotRefused("it does not start with the snapshot magic")
    if data[len(MAGIC)] != VERSION:
        raise SnapshotRefused(f"it is version {data[len(MAGIC)]}, this reads version {VERSION}")
    if len(data) < _HEADER:
        raise SnapshotRefused("it ends inside its header")
    written_with = bytes(data[len(MAGIC) + 1 : _HEADER])
    if written_with != _parsed_current()[0] and written_with not in _known_writers():
        raise SnapshotRefused(
            f"it was written with state schema 0x{fingerprint_number(written_with):016x}, "
            "which this version does not know"
        )
    try:
        reader = _body_reader(written_with)
    except BodyError as exc:  # a field whose type changed, not only added
        raise SnapshotRefused(
            f"it was written with state schema 0x{fingerprint_number(written_with):016x}, "
            f"whose values do not upcast to this version's: {exc}"
        ) from None
    collecting = gc.isenabled()
    gc.disable()  # a snapshot is millions of objects: collecting while building them is waste
    try:
        snapshot = state_schema(Snapshot).decode(reader.read(bytes(data[_HEADER:])))
    except BodyError as exc:
        raise SnapshotRefused(f"its body is {exc}") from None
    except SnapshotDataError as exc:
        raise SnapshotRefused(str(exc)) from None
    except Exception as exc:  # values no check foresaw: still a snapshot not to build on
        raise SnapshotRefused(f"its values do not build the state: {exc!r}") from None
    finally:
        if collecting:
            gc.enable()
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
    latest_id: int = -1
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
        if snapshot_id <= self.latest_id:
            return  # older than the snapshot already assembled: never needed again
        parts = self._parts.setdefault(snapshot_id, {})
        parts[index] = value[head:]
        if count and len(parts) == count and set(parts) == set(range(count)):
            self.latest = b"".join(parts[i] for i in range(count))
            self.latest_id = snapshot_id
            # snapshots older than this one, torn or compacted away, are never completed
            for stale in [i for i in self._parts if i <= snapshot_id]:
                del self._parts[stale]


def decode_or_rebuild(data: bytes | None, where: str) -> Snapshot | None:
    """`decode`, with a refusal logged as an error and answered by a rebuild from the log."""
    try:
        return decode(data)
    except SnapshotRefused as exc:
        log.error("snapshot of %s refused, rebuilding it from the log instead: %s", where, exc)
        return None
