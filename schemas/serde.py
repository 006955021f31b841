"""Event <-> bytes in the two wire formats jobledger speaks.

- Avro single-object encoding (default): `C3 01`, the writer schema's CRC-64-AVRO fingerprint
  (8 bytes, little-endian), then the Avro body. Needs no registry: any client holding the
  `.avsc` files can compute the fingerprints itself.
- Confluent wire format (`00`, 4-byte schema id, body) through confluent-kafka's schema
  registry Avro serdes, when a registry URL is configured. Subjects are named after the
  record (`record_subject_name_strategy`) because one topic carries many event types.

Decoding recognizes both by their first byte, so a topic may hold a mix.
"""

from __future__ import annotations

import io
from typing import Any

from fastavro import schemaless_writer

from .avro_body import BodyError, BodyReader, standalone
from .catalog import SchemaCatalog, UnknownSchemaError, WriterSchema
from .construct import from_avro
from .model import Event
from .records import CONFLUENT_MAGIC, DecodeError

SINGLE_OBJECT_MAGIC = b"\xc3\x01"
_FINGERPRINT_END = len(SINGLE_OBJECT_MAGIC) + 8


class SingleObjectSerde:
    """Avro single-object encoding with writer schemas looked up in the catalog."""

    def __init__(self, catalog: SchemaCatalog) -> None:
        self.catalog = catalog
        self._plans: dict[bytes, tuple[WriterSchema, BodyReader, Any]] = {}
        """Per header seen (magic and fingerprint): the writer, its bodies' reader (resolving
        them to the current schema) and the model builder, looked up once per schema."""

    def encode(self, event: Event) -> bytes:
        cls = type(event)
        out = io.BytesIO()
        out.write(SINGLE_OBJECT_MAGIC)
        out.write(self.catalog.current_fingerprint(cls))
        schemaless_writer(out, self.catalog.reader(cls), event.model_dump())
        return out.getvalue()

    def _plan(self, header: bytes) -> tuple[WriterSchema, BodyReader, Any]:
        """The plan of a header not seen yet, kept under it; DecodeError if it is no
        single-object header or names a schema the catalog does not know."""
        if len(header) < _FINGERPRINT_END or not header.startswith(SINGLE_OBJECT_MAGIC):
            raise DecodeError("not Avro single-object encoded (no C3 01 header)")
        fp = header[len(SINGLE_OBJECT_MAGIC) :]
        try:
            writer = self.catalog.writer(fp)
        except UnknownSchemaError as exc:
            raise DecodeError(str(exc)) from exc
        current = None if writer.is_current else self.catalog.reader(writer.event_type)
        try:
            body = BodyReader(standalone(writer.parsed), current and standalone(current))
        except BodyError as exc:
            raise DecodeError(
                f"{writer.event_type.type_name()} schema 0x{fp.hex()} does not resolve to "
                f"the current one: {exc}"
            ) from exc
        plan = self._plans[header] = (writer, body, from_avro(writer.event_type))
        return plan

    def event_type(self, data: bytes) -> type[Event] | None:
        """The event a record holds, by its header alone; None if the header names none."""
        try:
            plan = self._plans.get(data[:_FINGERPRINT_END]) or self._plan(data[:_FINGERPRINT_END])
        except DecodeError:
            return None
        return plan[0].event_type

    def decode(self, data: bytes) -> Event:
        if type(data) is not bytes:  # a bytearray (a Spark row's binary), a memoryview
            data = bytes(data)
        # the plans are kept under the whole header, magic and fingerprint: one slice and one
        # lookup per record (a header that is not one is never kept)
        header = data[:_FINGERPRINT_END]
        writer, body, build = self._plans.get(header) or self._plan(header)
        try:
            record = body.read(data[_FINGERPRINT_END:])
        except BodyError as exc:
            raise DecodeError(f"{writer.event_type.type_name()} body is {exc}") from exc
        try:
            return build(record)
        except (KeyError, TypeError, ValueError) as exc:
            raise DecodeError(
                f"{writer.event_type.type_name()} does not fit its model: {exc!r}"
            ) from exc


class EventSerde:
    """Encodes in the configured format; decodes either format by its magic byte."""

    def __init__(self, catalog: SchemaCatalog | None = None, registry_url: str | None = None):
        self.catalog = catalog or SchemaCatalog()
        self.single_object = SingleObjectSerde(self.catalog)
        self.confluent = None
        if registry_url:
            from .confluent_serde import ConfluentSerde  # the registry client: a second to import

            self.confluent = ConfluentSerde(self.catalog, registry_url)

    def encode(self, event: Event, topic: str) -> bytes:
        if self.confluent is not None:
            return self.confluent.encode(event, topic)
        return self.single_object.encode(event)

    def decode(self, data: bytes | None, topic: str) -> Event:
        if not data:
            raise DecodeError("empty message value")
        if data[0] == CONFLUENT_MAGIC:
            if self.confluent is None:
                raise DecodeError("Confluent wire format but no schema registry is configured")
            return self.confluent.decode(data, topic)
        return self.single_object.decode(data)

    def event_type(self, data: bytes | None, topic: str) -> type[Event] | None:
        """The event a record holds, read from its header without decoding its body (a
        question that reads a few types counts the rest); None if the header names none
        (decoding it says why)."""
        if not data:
            return None
        if data[0] == CONFLUENT_MAGIC:
            return self.confluent.event_type(data) if self.confluent is not None else None
        return self.single_object.event_type(data)
