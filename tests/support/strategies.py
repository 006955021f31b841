"""Hypothesis strategies that build any catalog model with every field populated at random:
`models(cls)` from plain random values, `models(cls, at_edges(names, fields))` leaning on the
values where arithmetic and encodings break (the ends of a long and of an int, empty and huge
strings) and on the values a test's state knows for a field of a given name, so that inputs
reach live owners instead of being refused at the door."""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from jobledger.schemas.model import AvroInt, CatalogEnum, Record

_INT32 = st.integers(-(2**31), 2**31 - 1)
_INT64 = st.integers(-(2**63), 2**63 - 1)
_TEXT = st.text(max_size=12)

HUGE_TEXT = "x" * 100_000
"""A string far beyond any name, and well within the 512 KiB an event may be."""


@dataclass(frozen=True)
class Palette:
    """Where the values of each primitive kind come from."""

    int64: st.SearchStrategy[int] = _INT64
    int32: st.SearchStrategy[int] = _INT32
    text: st.SearchStrategy[str] = _TEXT
    fields: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    """Values a field of that name takes three times in four (a live job's id as `job_id`)."""


def _ends(low: int, high: int) -> list[int]:
    return [low, low + 1, -1, 0, 1, high - 1, high]


def at_edges(names: Sequence[str], fields: Mapping[str, Sequence[Any]]) -> Palette:
    """Each kind's extremes half the time, random values otherwise; strings from `names`
    (the ids a state holds), empty or huge, or random; and `fields` by name."""
    return Palette(
        int64=st.sampled_from(_ends(-(2**63), 2**63 - 1)) | _INT64,
        int32=st.sampled_from(_ends(-(2**31), 2**31 - 1)) | _INT32,
        text=st.sampled_from(list(names)) | st.sampled_from(["", HUGE_TEXT]) | _TEXT,
        fields=fields,
    )


def _is_int32(metadata: typing.Iterable[Any]) -> bool:
    return any(isinstance(meta, AvroInt) for meta in metadata)


def _for(annotation: Any, palette: Palette, int32: bool = False) -> st.SearchStrategy[Any]:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _for(args[0], palette, _is_int32(args[1:]))
    if origin in (typing.Union, types.UnionType):
        inner = next(a for a in args if a is not type(None))
        return st.none() | _for(inner, palette, int32)
    if origin is list:
        return st.lists(_for(args[0], palette), max_size=3)
    if origin is dict:
        return st.dictionaries(palette.text, _for(args[1], palette), max_size=3)
    if isinstance(annotation, type) and issubclass(annotation, CatalogEnum):
        return st.sampled_from(list(annotation))
    if isinstance(annotation, type) and issubclass(annotation, Record):
        return models(annotation, palette)
    if annotation is int:
        return palette.int32 if int32 else palette.int64
    if annotation is float:
        return st.floats(allow_nan=False, allow_infinity=False)
    if annotation is bool:
        return st.booleans()
    if annotation is str:
        return palette.text
    if annotation is bytes:
        return st.binary(max_size=16)
    raise TypeError(f"no strategy for {annotation!r}")


def _mostly(usual: st.SearchStrategy[Any], other: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`usual` three times in four, else `other` (`one_of` draws its branches unevenly)."""
    return st.integers(0, 3).flatmap(lambda k: other if k == 3 else usual)


def models(cls: type[Record], palette: Palette = Palette()) -> st.SearchStrategy[Record]:
    fields = {}
    for name, info in cls.model_fields.items():
        drawn = _for(info.annotation, palette, _is_int32(info.metadata))
        known = palette.fields.get(name)
        fields[name] = drawn if known is None else _mostly(st.sampled_from(known), drawn)
    return st.fixed_dictionaries(fields).map(lambda values: cls.model_validate(values))
