"""The event catalog: which events exist, their `.avsc` files, and writer schemas by fingerprint.

A reader decodes with the schema the event was *written* with (found by its fingerprint) and
resolves it to the current schema, so events written by any older version stay readable.
Older versions of a schema live in `history/` beside the current files; nothing is rewritten.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastavro import parse_schema
from fastavro.schema import UnknownType, fingerprint, load_schema, to_parsing_canonical_form

from . import cluster, deadletters, jobs, kvstate, rejections, slots, tasks, timers
from .avro import full_name, named_schema, record_schema, referenced_types
from .avro_body import standalone
from .model import Event, Record

SCHEMA_DIR = Path(__file__).resolve().parent
HISTORY_DIR = SCHEMA_DIR / "history"
LOAD_ORDER = SCHEMA_DIR / "load-order.txt"
"""Every `.avsc` file, each after the named types it references: the order a parser that
needs a type defined before its use (Java's `Schema.Parser`, avro-js, ...) loads them in."""

EVENT_TYPES: tuple[type[Event], ...] = tuple(
    cls
    for module in (cluster, slots, jobs, tasks, kvstate, timers, rejections, deadletters)
    for cls in vars(module).values()
    if isinstance(cls, type) and issubclass(cls, Event) and cls.__module__ == module.__name__
)
EVENTS_BY_NAME: dict[str, type[Event]] = {cls.type_name(): cls for cls in EVENT_TYPES}
NAMED_TYPES: tuple[type, ...] = tuple(
    dict.fromkeys(named for cls in EVENT_TYPES for named in referenced_types(cls))
)


def avsc_path(cls: type) -> Path:
    return SCHEMA_DIR / f"{full_name(cls)}.avsc"


def generated_files() -> dict[Path, dict[str, Any]]:
    """What `jobledger schemas write` puts on disk: one file per event and per named type."""
    files = {avsc_path(cls): record_schema(cls) for cls in EVENT_TYPES}
    files.update({avsc_path(cls): named_schema(cls) for cls in NAMED_TYPES})
    return files


def load_order() -> list[str]:
    """File names of every named type and event, each after everything it references."""
    ordered: list[type] = []

    def visit(cls: type) -> None:
        if cls in ordered:
            return
        if issubclass(cls, Record):
            for named in referenced_types(cls):
                visit(named)
        ordered.append(cls)

    for cls in (*NAMED_TYPES, *EVENT_TYPES):
        visit(cls)
    return [avsc_path(cls).name for cls in ordered]


def load_order_text() -> str:
    return "".join(f"{name}\n" for name in load_order())


def stray_files() -> list[Path]:
    """`.avsc` files beside the models that no model generates (a renamed or removed type)."""
    return sorted(set(SCHEMA_DIR.glob("*.avsc")) - set(generated_files()))


def write_files() -> list[Path]:
    """Regenerate the `.avsc` files from the models and delete stray ones (a developer command,
    never run at runtime). Old versions of changed events belong in `history/` first."""
    for path in stray_files():
        path.unlink()
    written = []
    for path, schema in generated_files().items():
        path.write_text(json.dumps(schema, indent=2) + "\n")
        written.append(path)
    LOAD_ORDER.write_text(load_order_text())
    written.append(LOAD_ORDER)
    return written


class UnknownSchemaError(LookupError):
    """No writer schema with this fingerprint is known to the catalog."""


@dataclass(frozen=True)
class WriterSchema:
    """A schema some event was written with, resolved against its current reader schema."""

    event_type: type[Event]
    parsed: dict[str, Any]
    fingerprint: bytes
    is_current: bool


def schema_fingerprint(parsed: dict[str, Any]) -> bytes:
    """CRC-64-AVRO of the Parsing Canonical Form as the 8 little-endian bytes single-object
    encoding writes (Java's `SchemaNormalization.parsingFingerprint64`, least significant byte
    first). fastavro's hex digest already lists the bytes in that order."""
    return bytes.fromhex(fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO"))


def fingerprint_number(fp: bytes) -> int:
    """The fingerprint as the 64-bit number Avro's libraries print (`0x9ef411078b89f334`)."""
    return int.from_bytes(fp, "little")


class SchemaCatalog:
    """Current reader schemas of every event, plus every known writer schema by fingerprint."""

    def __init__(self, history_dirs: tuple[Path, ...] = (HISTORY_DIR,)) -> None:
        self._readers: dict[type[Event], dict[str, Any]] = {}
        self._writers: dict[bytes, WriterSchema] = {}
        self._legacy: dict[bytes, WriterSchema] = {}
        """The same writers under the byte-reversed fingerprint jobledger wrote before it
        followed the specification; such logs stay readable, nothing writes that order."""
        self._current: dict[type[Event], bytes] = {}
        for cls in EVENT_TYPES:
            parsed = load_schema(str(avsc_path(cls)))
            self._readers[cls] = parsed
            self._current[cls] = self._add_writer(cls, parsed, is_current=True).fingerprint
        for directory in history_dirs:
            for path in sorted(directory.glob("*.avsc")) if directory.is_dir() else ():
                self.register_writer_schema(json.loads(path.read_text()))

    def register_writer_schema(self, schema: dict[str, Any]) -> WriterSchema:
        """Make an older (or foreign) version of an event's schema decodable.

        The schema must be standalone (named types inlined, as `schema_json` writes it): nested
        types evolve too, so an old version cannot borrow today's definitions.
        """
        try:
            parsed = parse_schema(schema)
        except UnknownType as exc:
            raise UnknownSchemaError(f"writer schema is not standalone: {exc}") from None
        name = parsed["name"].rsplit(".", 1)[-1]
        if name not in EVENTS_BY_NAME:
            raise UnknownSchemaError(f"schema {parsed['name']!r} is not an event of the catalog")
        return self._add_writer(EVENTS_BY_NAME[name], parsed, is_current=False)

    def _add_writer(
        self, cls: type[Event], parsed: dict[str, Any], is_current: bool
    ) -> WriterSchema:
        fp = schema_fingerprint(parsed)
        writer = self._writers.setdefault(fp, WriterSchema(cls, parsed, fp, is_current))
        self._legacy.setdefault(fp[::-1], writer)
        return writer

    def reader(self, cls: type[Event]) -> dict[str, Any]:
        return self._readers[cls]

    def current_fingerprint(self, cls: type[Event]) -> bytes:
        return self._current[cls]

    def writer(self, fp: bytes) -> WriterSchema:
        """The writer schema of a single-object header's fingerprint bytes. The standard
        (little-endian) order is tried first, so a legacy alias can never shadow a schema."""
        found = self._writers.get(fp) or self._legacy.get(fp)
        if found is None:
            raise UnknownSchemaError(
                f"no schema with fingerprint {fp.hex()} in the catalog "
                f"(CRC-64-AVRO 0x{fingerprint_number(fp):016x})"
            )
        return found

    def schema_json(self, cls: type[Event]) -> str:
        """The event's full schema as one standalone JSON document (for a schema registry)."""
        return json.dumps(standalone(self._readers[cls]))
