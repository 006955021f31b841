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
import json
import struct
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient, record_subject_name_strategy
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from fastavro import schemaless_writer

from .avro_body import BodyError, BodyReader, standalone
from .catalog import EVENTS_BY_NAME, SchemaCatalog, UnknownSchemaError, WriterSchema
from .construct import from_avro
from .model import Event

SINGLE_OBJECT_MAGIC = b"\xc3\x01"
CONFLUENT_MAGIC = 0
_FINGERPRINT_END = len(SINGLE_OBJECT_MAGIC) + 8


class DecodeError(ValueError):
    """Bytes that are not a decodable event; the message says why (for the dead-letter topic)."""


def event_from_avro_dict(cls: type[Event], record: dict[str, Any]) -> Event:
    """Build the model from a decoded Avro record. The schema typed every value already (the
    schemas are generated from the models), so it is built without validating it again
    (`construct.from_avro`); a record that is not one of `cls` is a DecodeError."""
    try:
        return from_avro(cls)(record)
    except (KeyError, TypeError, ValueError) as exc:
        raise DecodeError(f"{cls.type_name()} does not fit its model: {exc!r}") from exc


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


class ConfluentSerde:
    """Confluent wire format through confluent-kafka's schema-registry Avro serdes."""

    def __init__(self, catalog: SchemaCatalog, registry_url: str) -> None:
        self.catalog = catalog
        self.client = SchemaRegistryClient.new_client({"url": registry_url})
        self._serializers: dict[type[Event], AvroSerializer] = {}
        self._deserializers: dict[type[Event], AvroDeserializer] = {}
        self._event_types: dict[int, type[Event]] = {}

    def encode(self, event: Event, topic: str) -> bytes:
        cls = type(event)
        if cls not in self._serializers:
            self._serializers[cls] = AvroSerializer(
                self.client,
                self.catalog.schema_json(cls),
                to_dict=lambda ev, _ctx: ev.model_dump(),
                conf={"subject.name.strategy": record_subject_name_strategy},
            )
        return self._serializers[cls](event, SerializationContext(topic, MessageField.VALUE))

    def decode(self, data: bytes, topic: str) -> Event:
        if len(data) < 5 or data[0] != CONFLUENT_MAGIC:
            raise DecodeError("not in the Confluent wire format (no 00 + schema id header)")
        (schema_id,) = struct.unpack(">I", data[1:5])
        cls = self._event_type_of(schema_id)
        if cls not in self._deserializers:
            self._deserializers[cls] = AvroDeserializer(self.client, self.catalog.schema_json(cls))
        try:
            record = self._deserializers[cls](data, SerializationContext(topic, MessageField.VALUE))
        except Exception as exc:  # fastavro / serde errors on corrupt bodies
            raise DecodeError(f"corrupt {cls.type_name()} body: {exc!r}") from exc
        return event_from_avro_dict(cls, record)

    def event_type(self, data: bytes) -> type[Event] | None:
        """The event a record holds, by its schema id alone; None if the id names none."""
        try:
            return self._event_type_of(struct.unpack(">I", data[1:5])[0])
        except (DecodeError, struct.error):
            return None

    def _event_type_of(self, schema_id: int) -> type[Event]:
        """The event a registry schema id stands for, looked up once per id."""
        if schema_id not in self._event_types:
            try:
                writer = self.client.get_schema(schema_id)
            except Exception as exc:  # the registry client raises its own error types
                raise DecodeError(f"schema id {schema_id} not in the registry: {exc}") from exc
            schema = json.loads(writer.schema_str)
            name = schema.get("name", "") if isinstance(schema, dict) else ""
            cls = EVENTS_BY_NAME.get(name.rsplit(".", 1)[-1])
            if cls is None:
                raise DecodeError(f"registry schema {name!r} is not an event of the catalog")
            self._event_types[schema_id] = cls
        return self._event_types[schema_id]


class EventSerde:
    """Encodes in the configured format; decodes either format by its magic byte."""

    def __init__(self, catalog: SchemaCatalog | None = None, registry_url: str | None = None):
        self.catalog = catalog or SchemaCatalog()
        self.single_object = SingleObjectSerde(self.catalog)
        self.confluent = ConfluentSerde(self.catalog, registry_url) if registry_url else None

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
