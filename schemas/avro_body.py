"""Decoding one Avro binary body, exactly: an event's after its single-object header, a
snapshot's after its own.

The decoder is `cavro` (Cython), because decoding is the hot path of replay and restart and
it decodes our bodies nearly twice as fast as fastavro, which still writes every body and
reads and writes the export files (docs/internals/layout.md gives the figures).

cavro decodes from a buffer without saying where it stopped, but a body followed by bytes
that are not part of it is refused (it is not what any writer of the schema wrote). So the
body is read inside a record whose last field is a fixed of 8 bytes, from the body with 8
bytes appended, drawn at random once per process: the fixed reads back exactly those 8
bytes only where the body ended where its bytes did (trailing bytes would have to begin
with this process's own random 8 bytes). This costs 0.6 µs a body; reading one more byte
to catch cavro's end-of-input error cost 1.1 µs.
"""

from __future__ import annotations

import io
import os
from typing import Any

import cavro
from fastavro import parse_schema, schemaless_reader

_END = os.urandom(8)
_OPTIONS = cavro.DEFAULT_OPTIONS.replace(record_decodes_to_dict=True)


class BodyError(ValueError):
    """A body that is not one of the writer schema's, or a writer schema that does not
    resolve to the reader's; the message says why."""


class BodyReader:
    """Reads bodies written with `writer`, resolved to `reader` (None: `writer` is current),
    as the dicts, lists and primitives fastavro would have given."""

    def __init__(self, writer: dict[str, Any], reader: dict[str, Any] | None = None) -> None:
        """The schemas as standalone JSON objects (`standalone`); BodyError if `writer`'s
        values do not resolve to `reader`'s."""
        schema = _enclosed(writer)
        if reader is not None:
            try:
                schema = _enclosed(reader).reader_for_writer(schema)
            except cavro.CavroException as exc:
                raise BodyError(str(exc)) from None
        self._schema = schema
        self._json = (writer, reader)
        self._blocked: tuple[Any, Any] | None = None

    def read(self, body: bytes) -> Any:
        """The value `body` holds, all of it; BodyError if it is torn, corrupt or followed by
        more bytes."""
        try:
            enclosing = self._schema.binary_decode(body + _END)
        except Exception as exc:  # cavro raises many types on a torn or corrupt body
            return self._read_blocked(body, exc)
        if enclosing["end"] != _END:
            raise BodyError("followed by bytes that are not part of it")
        return enclosing["body"]

    def _read_blocked(self, body: bytes, refused: Exception) -> Any:
        """`body` read by fastavro, for what cavro refused: cavro reads an array or map
        block only with a positive item count, where the Avro specification lets a writer
        give a negative count followed by the block's size in bytes (hamba/avro, the Go
        client's library, and Java's BlockingBinaryEncoder write those). Only what cavro
        refused pays for it; what neither reads is corrupt, with cavro's reason."""
        if self._blocked is None:
            writer, reader = self._json
            self._blocked = (parse_schema(writer), reader and parse_schema(reader))
        buffer = io.BytesIO(body)
        try:
            value = schemaless_reader(buffer, *self._blocked)
        except Exception:
            raise BodyError(f"corrupt: {refused!r}") from None
        if buffer.tell() != len(body):
            raise BodyError("followed by bytes that are not part of it")
        return value


def standalone(parsed: Any) -> Any:
    """A schema as fastavro parses it, without the keys fastavro adds (`__fastavro_parsed`,
    `__named_schemas`): the JSON any Avro library reads."""
    if isinstance(parsed, dict):
        return {k: standalone(v) for k, v in parsed.items() if not k.startswith("__")}
    if isinstance(parsed, list):
        return [standalone(v) for v in parsed]
    return parsed


def _enclosed(schema: dict[str, Any]) -> cavro.Schema:
    """`schema` as the first field of a record whose second is the 8-byte end marker."""
    return cavro.Schema(
        {
            "type": "record",
            "name": "jobledger.internal.EnclosedBody",
            "fields": [
                {"name": "body", "type": schema},
                {"name": "end", "type": {"type": "fixed", "name": "EndOfBody", "size": 8}},
            ],
        },
        _OPTIONS,
    )
