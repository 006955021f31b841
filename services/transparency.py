"""Signed checkpoints of the log: a Merkle tree over each partition's records (RFC 6962
hashing) and its head written as a C2SP `tlog-checkpoint` signed note.

A record's signature proves who wrote it, not that a log (or an export of it) holds every
record, once each, in order, unrewritten. A checkpoint does: it commits to the size of a
partition's log and the root of the Merkle tree over its records, and the services sign it,
so an auditor holding the records and the services' public key can recompute every root and
find a record dropped, added, moved, duplicated or changed, and a checkpoint rolled back.

Hashing is RFC 6962's: a leaf is `SHA-256(0x00 || data)`, a node `SHA-256(0x01 || left ||
right)`, a tree of n > 1 leaves splits at the largest power of two below n, and the empty
tree's root is `SHA-256("")`. A leaf's data is `LEAF_PREFIX`, the record's offset and its
broker timestamp (8 bytes big-endian each), then the record as its writer wrote it (topic,
key, value and signing headers: `provenance.Provenance.packed`), so the root covers each
record's position and bytes. Checked against no library: the Python ones found (pymerkle,
merkle, merkletools and the like) build trees held whole in memory or hash leaves their own
way, while a checkpointer needs the streaming form below (`CompactRange`: log2(n) hashes,
appended to record by record, persisted between runs), which is a dozen lines.

The note (C2SP signed-note and tlog-checkpoint): the origin line, the tree size in decimal,
the root in base64, an extension line `offset N` (the partition offset after the last record
the tree covers, so a reader, a partial export, can name the range), each ending in a
newline; a blank line; then one line per signature, `— <key name> <base64(key hash ||
signature)>`, the key hash being the first 4 bytes of SHA-256(name || "\\n" || 0x01 || the
32-byte Ed25519 public key), 0x01 naming Ed25519, and the signature over the note's text
(everything before the blank line, final newline included).
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from .signing import Keyring, SigningKey

LEAF_PREFIX = b"jobledger-leaf-v1"
EMPTY_ROOT = hashlib.sha256(b"").digest()
ED25519 = b"\x01"
SIGNATURE_DASH = "\u2014"
OFFSET_EXTENSION = "offset "
MAX_NOTE_BYTES = 1_000_000
"""A checkpoint longer than this is refused unread (a forged one could be any size)."""


def leaf_data(offset: int, timestamp: int, packed: bytes) -> bytes:
    return LEAF_PREFIX + offset.to_bytes(8, "big", signed=True) + \
        timestamp.to_bytes(8, "big", signed=True) + packed  # fmt: skip


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


@dataclass
class CompactRange:
    """The tree over the leaves appended so far, as the roots of its perfect subtrees,
    largest (leftmost) first: one per bit set in `size`. Appending a leaf merges equal-sized
    neighbours as a binary counter carries; the root folds them from the right, which is
    RFC 6962's split at the largest power of two."""

    size: int = 0
    hashes: list[bytes] = field(default_factory=list)

    def append(self, leaf: bytes) -> None:
        carry, hashed = self.size, leaf
        while carry & 1:
            hashed = node_hash(self.hashes.pop(), hashed)
            carry >>= 1
        self.hashes.append(hashed)
        self.size += 1

    def root(self) -> bytes:
        if not self.hashes:
            return EMPTY_ROOT
        root = self.hashes[-1]
        for left in reversed(self.hashes[:-1]):
            root = node_hash(left, root)
        return root

    def packed(self) -> bytes:
        return b"".join(self.hashes)

    @classmethod
    def unpacked(cls, size: int, packed: bytes) -> CompactRange:
        """The range `packed` holds for a tree of `size`; ValueError if it cannot be one."""
        if size < 0 or len(packed) != 32 * size.bit_count():
            raise ValueError(f"{len(packed)} bytes are not the subtree roots of {size} leaves")
        return cls(size, [packed[i : i + 32] for i in range(0, len(packed), 32)])


@dataclass(frozen=True)
class Checkpoint:
    """A partition's tree head: `origin` names the partition (`origin_of`)."""

    origin: str
    size: int
    root: bytes
    next_offset: int

    def body(self) -> str:
        root = base64.b64encode(self.root).decode()
        return (f"{self.origin}\n{self.size}\n{root}\n"
                f"{OFFSET_EXTENSION}{self.next_offset}\n")  # fmt: skip

    def signed(self, key: SigningKey, name: str) -> str:
        """The signed note: this body, a blank line, `name`'s signature line."""
        body = self.body()
        signature = key.private.sign(body.encode())
        public = key.private.public_key()
        stamp = base64.b64encode(key_hash(name, public) + signature).decode()
        return f"{body}\n{SIGNATURE_DASH} {name} {stamp}\n"


def origin_of(cluster: str, topic: str, partition: int) -> str:
    """A partition's origin: unique per Kafka cluster (its id), topic and partition, so a
    checkpoint of one log cannot stand for another's."""
    return f"{cluster}/{topic}/{partition}"


def key_hash(name: str, public: Ed25519PublicKey) -> bytes:
    raw = public.public_bytes(Encoding.Raw, PublicFormat.Raw)
    return hashlib.sha256(name.encode() + b"\n" + ED25519 + raw).digest()[:4]


@dataclass(frozen=True)
class SignedCheckpoint:
    checkpoint: Checkpoint
    signer: str
    """The principal of the services' key that signed it."""


def open_note(note: str, keyring: Keyring, timestamp_ms: int) -> SignedCheckpoint | str:
    """The checkpoint `note` holds and who signed it, if a services key of `keyring` did, or
    why not (one line). `timestamp_ms` is when the note was appended: a key revoked by then
    signs nothing, as for records (`Keyring.check`)."""
    if len(note) > MAX_NOTE_BYTES:
        return f"a checkpoint of {len(note)} characters (at most {MAX_NOTE_BYTES})"
    body, blank, signatures = note.partition("\n\n")
    if not blank or not signatures.endswith("\n"):
        return "not a signed note (no blank line before its signature lines)"
    parsed = _parsed(body + "\n")
    if isinstance(parsed, str):
        return parsed
    for line in signatures[:-1].split("\n"):
        signer = _signer(line, body + "\n", keyring, timestamp_ms)
        if signer is not None:
            return SignedCheckpoint(parsed, signer)
    return f"checkpoint of {parsed.origin} at size {parsed.size}: no signature by a services key"


def _parsed(body: str) -> Checkpoint | str:
    lines = body[:-1].split("\n")
    if len(lines) != 4 or not lines[3].startswith(OFFSET_EXTENSION):
        return "not a jobledger checkpoint (origin, size, root, offset lines)"
    origin, size, root, offset = lines[0], lines[1], lines[2], lines[3][len(OFFSET_EXTENSION) :]
    if not (size.isdecimal() and offset.isdecimal()) or size != str(int(size)):
        return f"checkpoint of {origin}: size {size!r} or offset {offset!r} is not a number"
    try:
        raw = base64.b64decode(root, validate=True)
    except ValueError:
        raw = b""
    if len(raw) != 32:
        return f"checkpoint of {origin}: root {root!r} is not a base64 SHA-256 hash"
    return Checkpoint(origin, int(size), raw, int(offset))


def _signer(line: str, body: str, keyring: Keyring, timestamp_ms: int) -> str | None:
    """The principal whose services key made signature `line` over `body`, or None."""
    parts = line.split(" ")
    if len(parts) != 3 or parts[0] != SIGNATURE_DASH:
        return None
    name, stamp = parts[1], parts[2]
    try:
        raw = base64.b64decode(stamp, validate=True)
    except ValueError:
        return None
    if len(raw) != 68:
        return None
    for entry in keyring.entries.values():
        revoked = entry.revoked_at_ms is not None and timestamp_ms >= entry.revoked_at_ms
        if entry.role != "services" or entry.principal != name or revoked:
            continue
        public = keyring.public_key(entry)
        if key_hash(name, public) != raw[:4]:
            continue
        try:
            public.verify(raw[4:], body.encode())
        except InvalidSignature:
            continue
        return name
    return None
