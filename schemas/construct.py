"""Models built without validation, from values already known to have the right types.

Validation belongs where values are untyped: JSON, the CLI, a client's dict. An Avro record
is typed by its schema (and the schemas are generated from the models, a test holding them
together), and a reducer's decisions are built by trusted code: validating those again cost
more than decoding them (pydantic's validated construction ~2 µs per event, against ~0.9 µs
for the direct one here). So the replay and service path builds models directly:

- `from_avro(cls)` is a function compiled once per class from its field annotations that
  turns a record decoded from Avro (`avro_body`) into the model: enum symbols into members, nested
  records into their models, lists, maps and optionals item by item, primitives as they are.
- `trusted(cls, fields)` builds a model from keyword values a reducer passes, filling the
  defaults and copying lists and maps as validation would.

Both set exactly what pydantic's own construction sets (`__dict__` in field order, the set
fields, no extra, no private attributes), so the models compare, dump and hash the same;
`tests/schemas/test_construct.py` proves it for every event class with random values.
"""

from __future__ import annotations

import copy
import types
import typing
from collections.abc import Callable
from functools import cache
from typing import Any

from pydantic import BaseModel

from .model import CatalogEnum, Record

_new = object.__new__
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__
"""BaseModel's own attribute descriptors, called directly: a frozen model refuses
`setattr`, and `object.__setattr__` looks each of them up again on every call."""


def _assemble(cls: type[Record], values: dict[str, Any], fields_set: set[str]) -> Any:
    """The instance pydantic's constructor would make from these (valid) values."""
    model = _new(cls)
    _set_dict(model, values)
    _set_fields_set(model, fields_set)
    _set_extra(model, None)
    _set_private(model, None)
    return model


def _converter(annotation: Any, namespace: dict[str, Any]) -> str | None:
    """Python source turning a decoded Avro value `$` of `annotation` into the model's value
    (`$` stands for the value's expression), or None when the value is already right."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _converter(args[0], namespace)
    if origin in (typing.Union, types.UnionType):
        inner = _converter(next(a for a in args if a is not type(None)), namespace)
        return None if inner is None else f"(None if $ is None else {inner})"
    if origin is list:
        inner = _converter(args[0], namespace)
        return None if inner is None else f"[{inner.replace('$', '_v')} for _v in $]"
    if origin is dict:
        inner = _converter(args[1], namespace)
        return (
            None if inner is None else f"{{_k: {inner.replace('$', '_v')} for _k, _v in $.items()}}"
        )
    if isinstance(annotation, type) and issubclass(annotation, CatalogEnum):
        name = f"_enum_{annotation.__name__}"
        namespace[name] = annotation._value2member_map_
        return f"{name}[$]"
    if isinstance(annotation, type) and issubclass(annotation, Record):
        name = f"_record_{annotation.__name__}"
        namespace[name] = from_avro(annotation)
        return f"{name}($)"
    if annotation is float:
        return "float($)"  # an int or long writer promoted to double stays a float
    return None


@cache
def from_avro(cls: type[Record]) -> Callable[[dict[str, Any]], Any]:
    """The builder of `cls` from a record decoded and resolved to `cls`'s current
    schema (every field present). Raises KeyError or TypeError if the record is not one.
    A class with an `__upcast__(record) -> record` has its records passed through it first:
    a value an older writer put in a form today's writers no longer use is read in today's.
    Its source is written from the model's own field names and types, never from anything
    read: data only ever reaches it as the argument."""
    namespace: dict[str, Any] = {"_assemble": _assemble, "_cls": cls}
    items = []
    for name, info in cls.model_fields.items():
        convert = _converter(info.annotation, namespace) or "$"
        items.append(f"{name!r}: {convert.replace('$', f'_r[{name!r}]')}")
    namespace["_all"] = frozenset(cls.model_fields)
    upcast = ""
    if hasattr(cls, "__upcast__"):
        namespace["_upcast"] = cls.__upcast__
        upcast = "    _r = _upcast(_r)\n"
    source = (
        f"def build_{cls.__name__}(_r):\n"
        f"{upcast}"
        f"    return _assemble(_cls, {{{', '.join(items)}}}, set(_all))\n"
    )
    exec(compile(source, f"<from_avro {cls.__name__}>", "exec"), namespace)
    return namespace[f"build_{cls.__name__}"]


def _copied(value: Any) -> Any:
    return None if value is None else value.copy()


@cache
def _from_fields(cls: type[Record]) -> Callable[[dict[str, Any]], Any]:
    """The builder of `cls` from keyword values, compiled once: each field taken from them
    or its default (a fresh copy of a mutable one, or its factory's value), and lists and
    maps copied as validation copies them, so a reducer's list never aliases an event's. The
    set of the given names is both checked against the fields and kept as the set fields:
    checking `_f.keys()` as well cost 0.36 µs a decision, against 0.23 µs for the one set."""
    namespace: dict[str, Any] = {"_assemble": _assemble, "_cls": cls, "_copied": _copied}
    items = []
    for name, info in cls.model_fields.items():
        annotation = info.annotation
        if typing.get_origin(annotation) in (typing.Union, types.UnionType):
            annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
        given = f"_f[{name!r}]"
        if typing.get_origin(annotation) in (list, dict):
            given = f"_copied({given})"
        if info.is_required():
            items.append(f"{name!r}: {given}")
        elif info.default_factory is None and not isinstance(info.default, list | dict | set):
            namespace[f"_default_{name}"] = info.default
            items.append(f"{name!r}: {given} if {name!r} in _f else _default_{name}")
        else:
            namespace[f"_default_{name}"] = info.default_factory or (
                lambda value=info.default: copy.deepcopy(value)
            )
            items.append(f"{name!r}: {given} if {name!r} in _f else _default_{name}()")
    namespace["_names"] = frozenset(cls.model_fields)
    namespace["_unknown"] = _unknown
    source = (
        f"def trusted_{cls.__name__}(_f):\n"
        f"    _given = set(_f)\n"
        f"    if not _given <= _names:\n"
        f"        raise _unknown(_cls, _f, _names)\n"
        f"    return _assemble(_cls, {{{', '.join(items)}}}, _given)\n"
    )
    exec(compile(source, f"<trusted {cls.__name__}>", "exec"), namespace)
    return namespace[f"trusted_{cls.__name__}"]


def _unknown(cls: type[Record], fields: dict[str, Any], names: frozenset[str]) -> TypeError:
    return TypeError(f"{cls.__name__} has no field(s) {', '.join(sorted(fields.keys() - names))}")


def trusted(cls: type[Record], fields: dict[str, Any]) -> Any:
    """`cls(**fields)` without validation, for values from trusted code whose types tests
    check (`tests/schemas/test_construct.py` validates every decision of the golden scenarios).
    A missing or unknown field is a TypeError, as it is for the constructor."""
    try:
        return _from_fields(cls)(fields)
    except KeyError as exc:
        raise TypeError(f"{cls.__name__} needs field {exc.args[0]}") from None
