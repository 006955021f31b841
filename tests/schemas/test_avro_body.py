"""One Avro body read exactly (schemas/avro_body.py): array and map blocks in either of the
specification's two forms, and nothing more or less than the body."""

from __future__ import annotations

import io

import pytest
from fastavro import parse_schema, schemaless_writer

from jobledger.schemas.avro_body import BodyError, BodyReader

SCHEMA = {
    "type": "record",
    "name": "R",
    "fields": [
        {"name": "items", "type": {"type": "array", "items": "long"}},
        {"name": "labels", "type": {"type": "map", "values": "string"}},
    ],
}
VALUE = {"items": [1, -2, 300], "labels": {"a": "x", "bb": "yy"}}


def _long(n: int) -> bytes:
    zigzag, out = (n << 1) ^ (n >> 63), bytearray()
    while True:
        byte, zigzag = zigzag & 0x7F, zigzag >> 7
        if not zigzag:
            return bytes([*out, byte])
        out.append(byte | 0x80)


def _string(s: str) -> bytes:
    return _long(len(s.encode())) + s.encode()


def _sized_block(count: int, items: bytes) -> bytes:
    """A block as a negative count, then its size in bytes, then its items."""
    return _long(-count) + _long(len(items)) + items + _long(0)


SIZED = _sized_block(3, b"".join(_long(i) for i in VALUE["items"])) + _sized_block(
    2, b"".join(_string(k) + _string(v) for k, v in VALUE["labels"].items())
)


def test_blocks_with_a_count_and_with_a_size_read_alike():
    counted = io.BytesIO()
    schemaless_writer(counted, parse_schema(SCHEMA), VALUE)
    reader = BodyReader(SCHEMA)
    assert counted.getvalue() != SIZED
    assert reader.read(counted.getvalue()) == VALUE
    assert reader.read(SIZED) == VALUE


def test_a_sized_block_resolves_to_a_newer_reader_schema():
    newer = {**SCHEMA, "fields": [*SCHEMA["fields"], {"name": "n", "type": "int", "default": 7}]}
    assert BodyReader(SCHEMA, newer).read(SIZED) == {**VALUE, "n": 7}


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (SIZED[:-3], "corrupt"),
        (SIZED + b"\x00", "followed by bytes that are not part of it"),
    ],
)
def test_a_torn_or_longer_sized_body_is_refused_with_its_reason(body, reason):
    with pytest.raises(BodyError, match=reason):
        BodyReader(SCHEMA).read(body)
