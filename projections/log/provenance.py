"""What checking a record's signature offline takes, kept with a signed record as it is read
from Kafka and written into an export.

A signature (`services/signing.py`) is over the topic, the key, the raw value and the type
header, and names its key in a header: none of which the decoded event holds. So a record
read from a topic keeps them beside its event when, and only when, it carries a signature
header (an unsigned log is read and exported as before); `replay --verify --keyring` then
judges each input as the services did, from the broker or from an export, with no broker.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from struct import Struct
from typing import Any, NamedTuple

from confluent_kafka import Message

from jobledger.services.signing import (
    SIGNATURE_HEADER,
    SIGNER_HEADER,
    TYPE_HEADER,
    Keyring,
    Signer,
)

SIGNATURE_HEADERS = frozenset({SIGNER_HEADER, SIGNATURE_HEADER})
"""A record with one of these is signed (or claims to be) and keeps its provenance."""
SIGNING_HEADERS = SIGNATURE_HEADERS | {TYPE_HEADER}
"""The headers a signature check reads (`Keyring.check`); a record's others are not kept."""


class SignedRecord(NamedTuple):
    """A signed record's parts, as `Keyring.check` takes them."""

    topic: str
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    """The record's `SIGNING_HEADERS`, every one in its order: a header given twice stays
    twice, which `Keyring.check` refuses, as it did live."""


@dataclass(frozen=True, slots=True)
class Provenance:
    """A signed record as its writer wrote it to the topic, held packed: one bytes object per
    record, written to an export as it is and taken apart only to be checked (decoding it as
    an Avro record of its parts cost a replay of a signed export a third more time)."""

    packed: bytes
    """Each part of the record (topic, key, value, then each header's name and value) as a
    4-byte big-endian length and its bytes, as `signing.signed_bytes` lays out what it signs;
    an absent key's length is `ABSENT`, with no bytes."""

    @classmethod
    def of(
        cls, topic: str, key: bytes | None, value: bytes, headers: Iterable[tuple[str, bytes]]
    ) -> Provenance:
        name = topic.encode()
        parts = [_length(len(name)), name, ABSENT_LENGTH if key is None else _length(len(key)),
                 key or b"", _length(len(value)), value]  # fmt: skip
        for header, data in headers:
            name = header.encode()
            parts += (_length(len(name)), name, _length(len(data)), data)
        return cls(b"".join(parts))

    def record(self) -> SignedRecord:
        packed, parts, at = self.packed, [], 0
        while at < len(packed):
            length = int.from_bytes(packed[at : at + 4], "big")
            at += 4
            if length == ABSENT:
                parts.append(None)
                continue
            parts.append(packed[at : at + length])
            at += length
        topic, key, value, *headers = parts
        pairs = tuple(zip(headers[::2], headers[1::2], strict=True))
        return SignedRecord(topic.decode(), key, value,
                            tuple((name.decode(), header) for name, header in pairs))  # fmt: skip

    def check(self, keyring: Keyring, timestamp_ms: int) -> Signer | str:
        """Who signed this record appended at `timestamp_ms`, or why the keyring refuses it."""
        return keyring.check(*self.record(), timestamp_ms)


ABSENT = 0xFFFF_FFFF
ABSENT_LENGTH = ABSENT.to_bytes(4, "big")
_length = Struct(">I").pack


def provenance_of(msg: Message, value: bytes, unsigned_too: bool = False) -> Provenance | None:
    """A record's provenance, if it carries a signature header or `unsigned_too` (else None:
    nothing to keep); `value` is the record's (each `msg.value()` is a copy of its own). An
    export of a checkpointed log keeps every record's, unsigned ones too (what an attacker
    wrote and the services dead-lettered): each is a leaf of its partition's tree."""
    headers = msg.headers() or ()
    for name, _ in headers:  # most records of most logs: unsigned, with one header
        if name in SIGNATURE_HEADERS:
            break
    else:
        if not unsigned_too:
            return None
    kept = [(name, header or b"") for name, header in headers if name in SIGNING_HEADERS]
    return Provenance.of(msg.topic(), msg.key(), value, kept)


AVRO_FIELD: dict[str, Any] = {
    "name": "provenance",
    "type": ["null", "bytes"],
    "default": None,
    "doc": "A signed record's topic, key, value and jobledger.type, jobledger.signer and "
    "jobledger.signature headers (each header's name, then its value), each as a 4-byte "
    "big-endian length and its bytes (an absent key: length 0xFFFFFFFF); null for an "
    "unsigned record, unless the export carries checkpoints (then every record has it).",
}
"""How an export holds a provenance (`log_file.export_schema`)."""
