"""Hypothesis strategies that build any catalog model with every field populated at random."""

from __future__ import annotations

import types
import typing
from typing import Any

from hypothesis import strategies as st

from jobledger.schemas.model import AvroInt, CatalogEnum, Record

_INT32 = st.integers(-(2**31), 2**31 - 1)
_INT64 = st.integers(-(2**63), 2**63 - 1)
_TEXT = st.text(max_size=12)


def _is_int32(metadata: typing.Iterable[Any]) -> bool:
    return any(isinstance(meta, AvroInt) for meta in metadata)


def _for(annotation: Any, int32: bool = False) -> st.SearchStrategy[Any]:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _for(args[0], _is_int32(args[1:]))
    if origin in (typing.Union, types.UnionType):
        inner = next(a for a in args if a is not type(None))
        return st.none() | _for(inner, int32)
    if origin is list:
        return st.lists(_for(args[0]), max_size=3)
    if origin is dict:
        return st.dictionaries(_TEXT, _for(args[1]), max_size=3)
    if isinstance(annotation, type) and issubclass(annotation, CatalogEnum):
        return st.sampled_from(list(annotation))
    if isinstance(annotation, type) and issubclass(annotation, Record):
        return models(annotation)
    if annotation is int:
        return _INT32 if int32 else _INT64
    if annotation is float:
        return st.floats(allow_nan=False, allow_infinity=False)
    if annotation is bool:
        return st.booleans()
    if annotation is str:
        return _TEXT
    if annotation is bytes:
        return st.binary(max_size=16)
    raise TypeError(f"no strategy for {annotation!r}")


def models(cls: type[Record]) -> st.SearchStrategy[Record]:
    fields = {
        name: _for(info.annotation, _is_int32(info.metadata))
        for name, info in cls.model_fields.items()
    }
    return st.fixed_dictionaries(fields).map(lambda values: cls.model_validate(values))
