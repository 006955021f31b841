"""Derive Avro schemas from the pydantic models.

The checked-in `.avsc` files are the public contract; this module is how they are written and
how a test proves they still match the models. Nested records and enums are named types of
their own, referenced by full name, each in its own `<full name>.avsc` file: the layout
fastavro's `load_schema` resolves, so a client holding only the files can load any event.
"""

from __future__ import annotations

import inspect
import types
import typing
from enum import Enum
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from .model import NAMESPACE, AvroInt, CatalogEnum, Record

_PRIMITIVES: dict[type, str] = {
    str: "string",
    int: "long",
    float: "double",
    bool: "boolean",
    bytes: "bytes",
}


def full_name(cls: type) -> str:
    return f"{NAMESPACE}.{cls.__name__}"


def _doc(cls: type) -> str:
    return inspect.cleandoc(cls.__doc__ or cls.__name__)


def enum_schema(cls: type[CatalogEnum]) -> dict[str, Any]:
    """An Avro enum whose default is UNKNOWN, so unknown symbols from newer writers resolve."""
    return {
        "type": "enum",
        "name": cls.__name__,
        "namespace": NAMESPACE,
        "doc": _doc(cls),
        "symbols": [member.value for member in cls],
        "default": cls.UNKNOWN.value,
    }


def record_schema(cls: type[Record]) -> dict[str, Any]:
    """An Avro record with one field per model field, nested named types by reference."""
    return {
        "type": "record",
        "name": cls.__name__,
        "namespace": NAMESPACE,
        "doc": _doc(cls),
        "fields": [_field_schema(name, info) for name, info in cls.model_fields.items()],
    }


def named_schema(cls: type) -> dict[str, Any]:
    if issubclass(cls, CatalogEnum):
        return enum_schema(cls)
    return record_schema(cls)


def referenced_types(cls: type[Record]) -> list[type]:
    """Every named type (record or enum) reachable from `cls`'s fields, depth first."""
    found: list[type] = []

    def visit(annotation: Any) -> None:
        for named in _named_types_in(annotation):
            if named not in found:
                found.append(named)
                if issubclass(named, Record):
                    for info in named.model_fields.values():
                        visit(info.annotation)

    for info in cls.model_fields.values():
        visit(info.annotation)
    return found


def _named_types_in(annotation: Any) -> list[type]:
    if isinstance(annotation, type) and issubclass(annotation, (Record, CatalogEnum)):
        return [annotation]
    return [named for arg in typing.get_args(annotation) for named in _named_types_in(arg)]


def _field_schema(name: str, info: FieldInfo) -> dict[str, Any]:
    is_int32 = any(isinstance(meta, AvroInt) for meta in info.metadata)
    field: dict[str, Any] = {"name": name, "type": _avro_type(info.annotation, is_int32)}
    if info.description:
        field["doc"] = info.description
    if not info.is_required():
        field["default"] = _avro_default(info.get_default(call_default_factory=True))
    return field


def _avro_type(annotation: Any, is_int32: bool = False) -> Any:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        inner_int32 = any(isinstance(meta, AvroInt) for meta in args[1:])
        return _avro_type(args[0], inner_int32)
    if origin in (typing.Union, types.UnionType):
        members = [arg for arg in args if arg is not type(None)]
        if len(members) != 1 or len(args) != 2:
            raise TypeError(f"only `X | None` unions map to Avro, got {annotation!r}")
        return ["null", _avro_type(members[0], is_int32)]
    if origin is list:
        return {"type": "array", "items": _avro_type(args[0])}
    if origin is dict:
        if args[0] is not str:
            raise TypeError(f"Avro maps need string keys, got {annotation!r}")
        return {"type": "map", "values": _avro_type(args[1])}
    if isinstance(annotation, type) and issubclass(annotation, (Record, CatalogEnum)):
        return full_name(annotation)
    if annotation is int and is_int32:
        return "int"
    if annotation in _PRIMITIVES:
        return _PRIMITIVES[annotation]
    raise TypeError(f"no Avro mapping for {annotation!r}")


def _avro_default(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return value


def inline_named_types(schemas: list[dict[str, Any]], named: dict[str, type]) -> list[Any]:
    """`schemas` with every named type reference replaced by its definition at its first
    use and left as a reference after that, so they can stand together (in one union)."""
    defined: set[str] = set()

    def expand(node: Any) -> Any:
        if isinstance(node, str):
            if node in named and node not in defined:
                defined.add(node)
                return expand(named_schema(named[node]))
            return node
        if isinstance(node, list):
            return [expand(item) for item in node]
        if isinstance(node, dict):
            if node.get("type") in ("record", "enum"):
                defined.add(f"{node.get('namespace', NAMESPACE)}.{node['name']}")
            return {key: expand(value) if key in ("type", "items", "values", "fields") else value
                    for key, value in node.items()}  # fmt: skip
        return node

    return [expand(schema) for schema in schemas]
