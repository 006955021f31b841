"""The snapshot's wire form: an Avro schema derived from the type hints of reducer state.

A snapshot is data, not code. Its schema is built by walking the declared types from
`Snapshot` down: a dataclass is an Avro record of its fields, a pydantic record (a
ResourceProfile, a JobVertex, an event of a known type) a record of its model fields, an enum
an Avro enum, `X | None` a union with null, lists and tuples arrays, `dict[str, X]` maps
(other keys: an array of key-value records), a fixed tuple a record of `item0..itemN`, and
an event of any type (`Event`) the bytes of its Avro single-object encoding, which the event
catalog reads. Reading walks the same types, so the only classes a snapshot can build are
the ones the current code declares at that place, from values Avro has already typed: a
forged record can hold wrong values, never new code.

Two layouts keep the bulk of a snapshot few values to read (the decoder's cost is per value):
a list marked `runs()` is written as runs of equal items, and one marked `columns()` (an
ExecutionGraph's subtasks) as a table: its row count, then a column per field, each column
of immutable values as runs, a nested dataclass as a nested table, a list of them ragged.
The driver's dedup windows (OrderedDicts of event ids) are one packed string of their keys
(and nothing for their values where all are None).
Every count, run and width read is checked against the rows it builds, so a forged one is
refused, never allocated. The decoder itself allocates an array's items before any check,
so no array of the schema has items written in no bytes (a null), whose forged count no
bytes would bound (`tests/host/test_snapshot.py` holds the schema to it).

Fields marked `derived()` are left out: indexes a class rebuilds in `__post_init__` from the
fields that are written (the ResourceManager's free-slot index, the ExecutionGraph's attempt
index), and what lives only while one input is reduced. An object with such fields or a
`__post_init__` is rebuilt through its constructor, so `__post_init__` runs as it does for
a new object; a plain dataclass gets its fields set directly, which is a third of the cost.

The schema is checked in as `snapshot.avsc` beside this module; `jobledger schemas write`
rewrites it and keeps the one it replaces in `snapshot-history/`, which is how a snapshot
written by an earlier version is upcast: Avro schema resolution reads it with its own writer
schema into the current one (added fields take their defaults, removed ones are skipped).
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import types
import typing
from collections import OrderedDict
from collections.abc import Callable
from enum import Enum
from functools import cache
from typing import Any

from pydantic import BaseModel

from jobledger.schemas import Event, SchemaCatalog
from jobledger.schemas.construct import from_avro
from jobledger.schemas.model import AvroInt, CatalogEnum
from jobledger.schemas.serde import DecodeError, SingleObjectSerde

from ..control.reducer import columns_at_most, in_snapshot, runs_at_most


class SnapshotDataError(ValueError):
    """A snapshot whose values do not build the declared state (a forged or torn record)."""


_PRIMITIVES: dict[Any, str] = {
    str: "string",
    int: "long",
    float: "double",
    bool: "boolean",
    bytes: "bytes",
    type(None): "null",
}


def _nothing(_values: list[None]) -> None:
    return None


def _nones(_datum: None, count: int) -> list[None]:
    """A window's values where all are None: as many as its keys, cut from its string."""
    return [None] * count


def _identity(value: Any) -> Any:
    return value


@dataclasses.dataclass
class _Codec:
    """How one declared type is written (`encode`: state -> Avro datum) and read back.
    `plain` types are their own Avro datum (str, int, a list of them...): containers of
    them are taken as the decoder returns them, which is most of a snapshot's bulk."""

    name: str
    encode: Callable[[Any], Any] = _identity
    decode: Callable[[Any], Any] = _identity

    @property
    def plain(self) -> bool:
        return self.encode is _identity and self.decode is _identity


class StateSchema:
    """The Avro schema of one root state class, and its converters to and from Avro data."""

    def __init__(self, root: type) -> None:
        self._named: dict[type, _Codec] = {}
        self._defined: set[type] = set()
        self._building: set[type] = set()
        self._tuples: dict[str, _Codec] = {}
        self._tables: dict[str, tuple[Any, Callable[[Any], Any], Callable[[Any, int], Any]]] = {}
        self._serde = SingleObjectSerde(SchemaCatalog())
        self.schema, codec = self._of(root)
        self.encode: Callable[[Any], Any] = codec.encode
        self._decode = codec.decode

    def decode(self, datum: Any) -> Any:
        try:
            return self._decode(datum)
        except (TypeError, ValueError, KeyError, DecodeError) as exc:
            raise SnapshotDataError(f"its values do not build the state: {exc!r}") from None

    def _of(self, annotation: Any, int32: bool = False) -> tuple[Any, _Codec]:
        """(Avro type, codec) for a declared type; a named type's full definition at its
        first use and its name after that, as Avro requires."""
        origin, args = typing.get_origin(annotation), typing.get_args(annotation)
        if origin is typing.Annotated:
            return self._of(args[0], any(isinstance(meta, AvroInt) for meta in args[1:]))
        if origin in (typing.Union, types.UnionType):
            return self._optional(annotation, args)
        if origin in (list, tuple):
            return self._sequence(annotation, origin, args)
        if origin in (dict, OrderedDict):
            return self._map(annotation, origin, args)
        if annotation is None:
            annotation = type(None)
        if annotation is Event:
            return "bytes", _Codec("bytes", self._event_bytes, self._event_of)
        if annotation in _PRIMITIVES:
            avro = "int" if annotation is int and int32 else _PRIMITIVES[annotation]
            return avro, _Codec(avro)
        if isinstance(annotation, type):
            return self._named_type(annotation)
        raise TypeError(f"no snapshot form for {annotation!r}")

    def _optional(self, annotation: Any, args: tuple[Any, ...]) -> tuple[Any, _Codec]:
        members = [arg for arg in args if arg is not type(None)]
        if len(members) != 1 or len(args) != 2:
            raise TypeError(f"only `X | None` unions have a snapshot form, not {annotation!r}")
        schema, inner = self._of(members[0])
        if inner.plain:
            return ["null", schema], _Codec(f"Optional{inner.name}")

        def encode(value: Any) -> Any:
            return None if value is None else inner.encode(value)

        def decode(value: Any) -> Any:
            return None if value is None else inner.decode(value)

        return ["null", schema], _Codec(f"Optional{inner.name}", encode, decode)

    def _sequence(self, annotation: Any, origin: type, args: tuple[Any, ...]) -> tuple[Any, _Codec]:
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            return self._fixed_tuple(args)
        schema, item = self._of(args[0])
        enc, dec = item.encode, item.decode
        if origin is list and item.plain:
            return {"type": "array", "items": schema}, _Codec(f"ArrayOf{item.name}")
        if origin is tuple:
            return {"type": "array", "items": schema}, _Codec(
                f"ArrayOf{item.name}",
                lambda value: [enc(x) for x in value],
                lambda value: tuple(dec(x) for x in value),
            )
        return {"type": "array", "items": schema}, _Codec(
            f"ArrayOf{item.name}",
            lambda value: [enc(x) for x in value],
            lambda value: [dec(x) for x in value],
        )

    def _fixed_tuple(self, args: tuple[Any, ...]) -> tuple[Any, _Codec]:
        parts = [self._of(arg) for arg in args]
        name = "Tuple" + "".join(codec.name.capitalize() for _, codec in parts)
        if name in self._tuples:
            return f"jobledger.snapshot.{name}", self._tuples[name]
        schema = _record(name, [{"name": f"item{i}", "type": s} for i, (s, _) in enumerate(parts)])
        encoders = [(f"item{i}", codec.encode) for i, (_, codec) in enumerate(parts)]
        decoders = [(f"item{i}", codec.decode) for i, (_, codec) in enumerate(parts)]
        codec = self._tuples[name] = _Codec(
            name,
            lambda value: {key: enc(x) for (key, enc), x in zip(encoders, value, strict=True)},
            lambda value: tuple(dec(value[key]) for key, dec in decoders),
        )
        return schema, codec

    def _runs(self, annotation: Any, at_most: int) -> tuple[Any, _Codec]:
        """A list as an array of runs {length, value}: consecutive equal items written once,
        read back as one object repeated (the items are immutable, so sharing is safe)."""
        if typing.get_origin(annotation) is not list:
            raise TypeError(f"only a list can be written as runs, not {annotation!r}")
        item_schema, item = self._of(typing.get_args(annotation)[0])
        name = f"RunOf{item.name}"
        enc, dec = item.encode, item.decode
        schema: Any = f"jobledger.snapshot.{name}"
        if name not in self._tuples:
            schema = _record(
                name,
                [{"name": "length", "type": "long"}, {"name": "value", "type": item_schema}],
            )

            def encode(value: list[Any]) -> list[dict[str, Any]]:
                return [
                    {"length": sum(1 for _ in run), "value": enc(first)}
                    for first, run in itertools.groupby(value)
                ]

            def decode(datum: list[dict[str, Any]]) -> list[Any]:
                items: list[Any] = []
                for run in datum:
                    length = run["length"]
                    if length < 1 or len(items) + length > at_most:
                        raise ValueError(f"a run of {length} makes a list longer than {at_most}")
                    items += [dec(run["value"])] * length
                return items

            self._tuples[name] = _Codec(name, encode, decode)
        return {"type": "array", "items": schema}, self._tuples[name]

    def _columns(self, annotation: Any, at_most: int) -> tuple[Any, _Codec]:
        """A list of plain dataclasses as a table: its row count, then one column per field
        (`_table`); at most `at_most` rows are built (a forged count is refused)."""
        if typing.get_origin(annotation) is not list:
            raise TypeError(f"only a list can be written as columns, not {annotation!r}")
        (cls,) = typing.get_args(annotation)
        schema, encode, decode_rows = self._table(cls, at_most)

        def decode(datum: dict[str, Any]) -> list[Any]:
            count = datum["count"]
            if not 0 <= count <= at_most:
                raise ValueError(f"a table of {count} rows is not within 0..{at_most}")
            rows = decode_rows(datum, count)
            if len(rows) != count:
                raise ValueError(f"a table of {count} rows has columns of {len(rows)}")
            return rows

        return schema, _Codec(f"ColumnsOf{cls.__name__}", encode, decode)

    def _table(
        self, cls: Any, at_most: int
    ) -> tuple[Any, Callable[[Any], Any], Callable[[Any, int], Any]]:
        """(schema, encode rows, decode (datum, row count)) of a table of `cls` rows: a
        column of immutable values is runs of equal values (`_column`), of a plain
        dataclass a nested table, of a list of them a ragged one (`_ragged`: the rows of
        all the lists in one table of at most `at_most`), of anything else an array of the
        values as written."""
        name = f"ColumnsOf{cls.__name__}"
        if name in self._tables:
            return f"jobledger.snapshot.{name}", *self._tables[name][1:]
        if not _plain_dataclass(cls) or not all(map(in_snapshot, dataclasses.fields(cls))):
            raise TypeError(f"only a plain dataclass can be a table's row, not {cls!r}")
        hints = typing.get_type_hints(cls, include_extras=True)
        fields: list[dict[str, Any]] = [{"name": "count", "type": "long"}]
        columns = []
        for f in dataclasses.fields(cls):
            item = typing.get_args(hints[f.name])
            if _plain_dataclass(hints[f.name]):
                schema, encode, decode = self._table(hints[f.name], at_most)
            elif typing.get_origin(hints[f.name]) is list and _plain_dataclass(item[0]):
                schema, encode, decode = self._ragged(item[0], at_most)
            else:
                schema, encode, decode = self._column(hints[f.name])
            fields.append({"name": f.name, "type": schema})
            columns.append((f.name, encode, decode))
        decoders = [(column, dec) for column, _, dec in columns]

        def encode_rows(rows: list[Any]) -> dict[str, Any]:
            datum: dict[str, Any] = {"count": len(rows)}
            for column, enc, _ in columns:
                datum[column] = enc([getattr(row, column) for row in rows])
            return datum

        def decode_rows(datum: dict[str, Any], count: int) -> list[Any]:
            if datum["count"] != count:
                raise ValueError(f"a table of {datum['count']} rows inside a row of {count}")
            # the dataclass's own __init__, its fields in order: measured, three times faster
            # than setting a new object's fields from each row (Python specializes the call);
            # a column longer or shorter than the others is zip's ValueError
            values = [dec(datum[column], count) for column, dec in decoders]
            return list(itertools.starmap(cls, zip(*values, strict=True)))

        self._tables[name] = (None, encode_rows, decode_rows)
        return _record(name, fields), encode_rows, decode_rows

    def _ragged(
        self, cls: Any, at_most: int
    ) -> tuple[Any, Callable[[Any], Any], Callable[[Any, int], Any]]:
        """A column of lists of `cls` (an ExecutionVertex's prior attempts): each list's
        size, as runs (most are empty), and the rows of all of them in one table of at most
        `at_most` rows, cut back into a fresh list per row on reading."""
        name = f"RaggedOf{cls.__name__}"
        if name in self._tables:
            return f"jobledger.snapshot.{name}", *self._tables[name][1:]
        sizes_schema, write_sizes, read_sizes = self._column(int)
        rows_schema, write_rows, read_rows = self._table(cls, at_most)

        def encode(lists: list[list[Any]]) -> dict[str, Any]:
            return {
                "sizes": write_sizes([len(items) for items in lists]),
                "rows": write_rows([item for items in lists for item in items]),
            }

        def decode(datum: dict[str, Any], count: int) -> list[list[Any]]:
            sizes, total = read_sizes(datum["sizes"], count), datum["rows"]["count"]
            if len(sizes) != count or min(sizes, default=0) < 0 or sum(sizes) != total:
                raise ValueError(f"{len(sizes)} list sizes do not cut {total} rows in {count}")
            if total > at_most:
                raise ValueError(f"a table of {total} rows is not within 0..{at_most}")
            rows, lists, at = read_rows(datum["rows"], total), [], 0
            for size in sizes:
                lists.append(rows[at : at + size])
                at += size
            return lists

        self._tables[name] = (None, encode, decode)
        fields = [{"name": "sizes", "type": sizes_schema}, {"name": "rows", "type": rows_schema}]
        return _record(name, fields), encode, decode

    def _column(
        self, annotation: Any
    ) -> tuple[Any, Callable[[Any], Any], Callable[[Any, int], Any]]:
        """A table's column of `annotation` values: runs of equal values where they are
        immutable and compare only equal to themselves (sharing one is safe, and a run never
        merges two values, as 0.0 and -0.0 would be), else every value as it is written."""
        schema, codec = self._of(annotation)
        enc, dec = codec.encode, codec.decode
        if not _runnable(annotation):
            return (
                {"type": "array", "items": schema},
                lambda values: [enc(x) for x in values],
                lambda datum, _: [dec(x) for x in datum],
            )
        name = f"RunsOf{codec.name.capitalize()}"
        if name in self._tables:
            return f"jobledger.snapshot.{name}", *self._tables[name][1:]
        repeat = itertools.repeat

        def encode(values: list[Any]) -> dict[str, Any]:
            runs = [
                (first, sum(1 for _ in run)) for first, run in itertools.groupby(map(enc, values))
            ]
            if all(length == 1 for _, length in runs):
                return {"values": [first for first, _ in runs], "lengths": []}
            return {"values": [first for first, _ in runs], "lengths": [n for _, n in runs]}

        def decode(datum: dict[str, Any], count: int) -> list[Any]:
            values, lengths = datum["values"], datum["lengths"]
            if dec is not _identity:
                values = [dec(x) for x in values]
            if not lengths:
                return values
            if len(lengths) != len(values):
                raise ValueError(f"{len(lengths)} run lengths for {len(values)} values")
            column: list[Any] = []
            for value, length in zip(values, lengths, strict=True):
                if length < 1 or len(column) + length > count:
                    raise ValueError(f"a run of {length} makes a column longer than {count}")
                column.extend(repeat(value, length))
            return column

        self._tables[name] = (None, encode, decode)
        fields = [
            {"name": "values", "type": {"type": "array", "items": schema}},
            {"name": "lengths", "type": {"type": "array", "items": "long"}},
        ]
        return _record(name, fields), encode, decode

    def _window(self, value_type: Any) -> tuple[Any, _Codec]:
        """An OrderedDict of str keys and immutable values (the driver's dedup windows of
        100,000 event ids): the keys packed into one string, with their lengths where they
        differ, and the values as runs. Written as an Avro map, every id was a value of its
        own to read, and the OrderedDict was built from a dict; now one string is sliced."""
        if value_type in (None, type(None)):
            # no values to write: an array of nulls takes no bytes per item, so a forged
            # count of 2**62 items would be read (and fill memory) before any check here
            schema, write_values, read_values = "null", _nothing, _nones
        else:
            schema, write_values, read_values = self._column(value_type)
        name = f"WindowOf{self._of(value_type)[1].name.capitalize()}"
        if name in self._tuples:
            return f"jobledger.snapshot.{name}", self._tuples[name]

        def encode(window: OrderedDict[str, Any]) -> dict[str, Any]:
            widths = [len(key) for key in window]
            return {
                "count": len(window),
                "keys": "".join(window),
                "widths": [] if len(set(widths)) <= 1 else widths,
                "values": write_values(list(window.values())),
            }

        def decode(datum: dict[str, Any]) -> OrderedDict[str, Any]:
            count, packed, widths = datum["count"], datum["keys"], datum["widths"]
            if widths:
                if len(widths) != count or sum(widths) != len(packed) or min(widths) < 0:
                    raise ValueError(f"{len(widths)} key widths do not cut {count} keys")
                ends = list(itertools.accumulate(widths))
                keys = [packed[end - width : end] for end, width in zip(ends, widths, strict=True)]
            elif count == 0 or len(packed) % count:
                if count or packed:
                    raise ValueError(f"{len(packed)} characters do not cut {count} keys evenly")
                keys = []
            else:
                width = len(packed) // count
                keys = [packed[i : i + width] for i in range(0, len(packed), width or 1)]
                keys = keys if width else [""]
            if len(keys) != count:  # before the values: their runs expand to `count`
                raise ValueError(f"{len(keys)} keys where the window says {count}")
            values = read_values(datum["values"], count)
            if len(values) != count:
                raise ValueError(f"{len(values)} values for {count} keys")
            window = OrderedDict(zip(keys, values, strict=True))
            if len(window) != count:
                raise ValueError(f"{count} keys of which only {len(window)} are distinct")
            return window

        fields = [
            {"name": "count", "type": "long"},
            {"name": "keys", "type": "string"},
            {"name": "widths", "type": {"type": "array", "items": "long"}},
            {"name": "values", "type": schema},
        ]
        codec = self._tuples[name] = _Codec(name, encode, decode)
        return _record(name, fields), codec

    def _map(self, annotation: Any, origin: type, args: tuple[Any, ...]) -> tuple[Any, _Codec]:
        build = OrderedDict if origin is OrderedDict else dict
        if origin is OrderedDict and args[0] is str and _runnable(args[1]):
            return self._window(args[1])
        if args[0] is not str:  # an Avro map's keys are strings: other keys go as entries
            entry_schema, entry = self._fixed_tuple(args)
            enc, dec = entry.encode, entry.decode
            return {"type": "array", "items": entry_schema}, _Codec(
                f"EntriesOf{entry.name}",
                lambda value: [enc(item) for item in value.items()],
                lambda value: build(dec(item) for item in value),
            )
        schema, value_codec = self._of(args[1])
        enc, dec = value_codec.encode, value_codec.decode
        if value_codec.plain:
            return {"type": "map", "values": schema}, _Codec(
                f"MapOf{value_codec.name}", _identity, _identity if build is dict else build
            )
        return {"type": "map", "values": schema}, _Codec(
            f"MapOf{value_codec.name}",
            lambda value: {k: enc(v) for k, v in value.items()},
            lambda value: build((k, dec(v)) for k, v in value.items()),
        )

    def _named_type(self, cls: type) -> tuple[Any, _Codec]:
        full = _full_name(cls)
        if cls in self._building:
            raise TypeError(f"{cls.__qualname__} contains itself: a snapshot holds no cycles")
        if cls in self._defined:
            return full, self._named[cls]
        self._defined.add(cls)
        if issubclass(cls, Enum):
            return self._enum(cls)
        if issubclass(cls, BaseModel):
            fields = [
                (name, info.annotation, _model_default(info), _is_int32(info.metadata))
                for name, info in cls.model_fields.items()
            ]
            schema, codec = self._record(cls, fields, init=set(cls.model_fields))
            codec.decode = from_avro(cls)  # the event path's builder: one way from Avro to a model
            return schema, codec
        if dataclasses.is_dataclass(cls):
            hints = typing.get_type_hints(cls, include_extras=True)
            kept = [f for f in dataclasses.fields(cls) if in_snapshot(f)]
            fields = [(f.name, hints[f.name], _dataclass_default(f), False) for f in kept]
            bounds = {f.name: runs_at_most(f) for f in kept if runs_at_most(f) is not None}
            tables = {f.name: columns_at_most(f) for f in kept if columns_at_most(f) is not None}
            init = {f.name for f in kept if f.init}
            return self._record(cls, fields, init=init, runs=bounds, tables=tables)
        raise TypeError(f"{cls.__qualname__} is neither a dataclass, a pydantic record nor an enum")

    def _enum(self, cls: type[Enum]) -> tuple[Any, _Codec]:
        symbols = [member.value for member in cls]
        schema: dict[str, Any] = {"type": "enum", "name": cls.__name__,
                                  "namespace": _namespace(cls), "symbols": symbols}  # fmt: skip
        if issubclass(cls, CatalogEnum):
            schema["default"] = cls.UNKNOWN.value
        # the member by its value from the enum's own table: calling the class goes through
        # EnumType.__call__, a fifth of the cost of reading an ExecutionState (a symbol no
        # member has is a KeyError, refused as the call's ValueError was)
        codec = self._named[cls] = _Codec(
            cls.__name__, lambda value: value.value, cls._value2member_map_.__getitem__
        )
        return schema, codec

    def _record(
        self,
        cls: type,
        fields: list[tuple[str, Any, Any, bool]],
        init: set[str],
        runs: dict[str, int] | None = None,
        tables: dict[str, int] | None = None,
    ) -> tuple[Any, _Codec]:
        """A record of `fields` (name, type, default, int32); the fields named in `runs`
        (with their bound) are lists written as runs (`reducer.runs`), those in `tables`
        lists written column by column (`reducer.columns`)."""
        codec = self._named[cls] = _Codec(cls.__name__, _identity, _identity)
        avro_fields, converters = [], []
        self._building.add(cls)
        for name, annotation, default, int32 in fields:
            if runs and name in runs:
                schema, field_codec = self._runs(annotation, runs[name])
            elif tables and name in tables:
                schema, field_codec = self._columns(annotation, tables[name])
            else:
                schema, field_codec = self._of(annotation, int32)
            field: dict[str, Any] = {"name": name, "type": schema}
            if default is not dataclasses.MISSING:
                datum = field_codec.encode(default)
                if datum is not None and isinstance(schema, list):
                    field["type"] = [schema[1], "null"]  # a union's default is its first branch
                field["default"] = datum
            avro_fields.append(field)
            converters.append((name, field_codec.encode, field_codec.decode, name in init))
        self._building.discard(cls)
        setter, new = object.__setattr__, object.__new__
        plain = [name for name, enc, _, _ in converters if enc is _identity]
        encoded = [(name, enc) for name, enc, _, _ in converters if enc is not _identity]
        decoded = [(name, dec) for name, _, dec, i in converters if i and dec is not _identity]
        late = [(name, dec) for name, _, dec, i in converters if not i]

        def encode(value: Any) -> dict[str, Any]:
            datum = {name: getattr(value, name) for name in plain}
            for name, enc in encoded:
                datum[name] = enc(getattr(value, name))
            return datum

        def decode(datum: dict[str, Any]) -> Any:
            for name, dec in decoded:
                datum[name] = dec(datum[name])
            after = [(name, dec(datum.pop(name))) for name, dec in late]
            obj = cls(**datum)
            for name, value in after:
                setter(obj, name, value)
            return obj

        def decode_plain(datum: dict[str, Any]) -> Any:
            """A dataclass with nothing to rebuild: its fields set as they are, which costs
            a third of calling its `__init__` (most of a snapshot's objects are these)."""
            for name, dec in decoded:
                datum[name] = dec(datum[name])
            obj = new(cls)
            obj.__dict__.update(datum)
            return obj

        codec.encode, codec.decode = encode, decode_plain if _plain_dataclass(cls) else decode
        schema = {"type": "record", "name": cls.__name__, "namespace": _namespace(cls),
                  "fields": avro_fields}  # fmt: skip
        return schema, codec

    def _event_bytes(self, event: Event) -> bytes:
        return self._serde.encode(event)

    def _event_of(self, data: bytes) -> Event:
        return self._serde.decode(data)


def _plain_dataclass(cls: Any) -> bool:
    """A dataclass with nothing to rebuild: its fields can be set without its `__init__`."""
    return (
        isinstance(cls, type)
        and dataclasses.is_dataclass(cls)
        and not hasattr(cls, "__post_init__")
        and all(f.init for f in dataclasses.fields(cls))
        and "__slots__" not in vars(cls)
    )


def _runnable(annotation: Any) -> bool:
    """Whether values of `annotation` may be written as runs: immutable, and equal only to
    themselves (not floats: 0.0 == -0.0), so one shared object stands for the whole run."""
    args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        annotation = args[0]
    return annotation in (str, int, bool, bytes, type(None), None) or (
        isinstance(annotation, type) and issubclass(annotation, Enum)
    )


ROOMS = re.compile(r"^jobledger\.services\.(?:control|host)\.")
"""The engine's folders are not part of a type's wire name: a snapshot written before the
reducers moved into `services/control/` names them `jobledger.services.<module>`."""


def _namespace(cls: type) -> str:
    """A type's Avro namespace: its module's, or the one it pins as `wire_namespace`.

    One rule for moving code (folders by `ROOMS`, a type to another module by its pin): a
    type keeps the full name snapshots wrote it under, so a move changes neither the snapshot
    schema nor its fingerprint. Our decoders (cavro, fastavro) would still read a renamed
    type, since they resolve named types by their unqualified name as the Avro specification
    does, but every move would add a schema to the history for nothing, and a reader that
    compares full names would refuse it."""
    pinned = cls.__dict__.get("wire_namespace")
    if isinstance(pinned, str):
        return pinned
    return ROOMS.sub("jobledger.services.", cls.__module__.removesuffix(f".{cls.__name__}"))


def _full_name(cls: type) -> str:
    return f"{_namespace(cls)}.{cls.__name__}"


def _is_int32(metadata: list[Any]) -> bool:
    return any(isinstance(meta, AvroInt) for meta in metadata)


def _model_default(info: Any) -> Any:
    return (
        dataclasses.MISSING if info.is_required() else info.get_default(call_default_factory=True)
    )


def _dataclass_default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


@cache
def state_schema(root: type) -> StateSchema:
    return StateSchema(root)


def _record(name: str, fields: list[dict[str, Any]]) -> dict[str, Any]:
    """The Avro record `name` of the snapshot's own namespace (the types the format makes up:
    tuples, runs, tables, windows)."""
    return {"type": "record", "name": name, "namespace": "jobledger.snapshot", "fields": fields}
