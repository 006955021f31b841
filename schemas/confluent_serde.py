"""The Confluent wire format (a zero byte, the registry's schema id, the Avro body) through
confluent-kafka's schema-registry Avro serdes. Apart from `serde.py` because the registry
client's import (an HTTP stack, JOSE, OAuth) took a quarter of a second from every command,
while only a command given a registry URL uses it."""

from __future__ import annotations

import json
import struct

from confluent_kafka.schema_registry import SchemaRegistryClient, record_subject_name_strategy
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from .catalog import EVENTS_BY_NAME, SchemaCatalog
from .model import Event
from .records import CONFLUENT_MAGIC, DecodeError, event_from_avro_dict


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
