"""The event catalog: Avro schemas (the public contract), typed models, serde, JSON form."""

from .catalog import EVENT_TYPES, EVENTS_BY_NAME, SchemaCatalog, UnknownSchemaError
from .json_form import InvalidEventError, event_from_json, event_to_dict, event_to_json
from .model import Event
from .serde import DecodeError, EventSerde
from .topics import DEFAULT_PREFIX, TopicRole, roles_by_topic, topic_name

__all__ = [
    "DEFAULT_PREFIX",
    "EVENTS_BY_NAME",
    "EVENT_TYPES",
    "DecodeError",
    "Event",
    "EventSerde",
    "InvalidEventError",
    "SchemaCatalog",
    "TopicRole",
    "UnknownSchemaError",
    "event_from_json",
    "event_to_dict",
    "event_to_json",
    "roles_by_topic",
    "topic_name",
]
