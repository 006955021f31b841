"""Who wrote a record: an Ed25519 signature per record, and the keyring that says whose key
is whose.

Kafka authenticates a connection, not a record: on a topic that services, runners and
clients all write (one ordered stream per partition, by design), a consumer cannot tell who
wrote what. So every writer signs each record it writes, and the services check the signature
of each input before a reducer sees it.

Why Ed25519: a signature is 64 bytes and a public key 32, signing costs ~20 us and checking
~60 us here (`bench/signing.py`), the key has no parameters to get wrong, and every language
with a crypto library has it (a producer in Go or Java signs the same bytes). An HMAC would
be cheaper, but the services would then hold every writer's secret and could write in anyone's
name; with signatures, the keyring the services and auditors are given holds public keys only.

What is signed: the bytes `SIGNED_PREFIX`, then the topic, the record key, the value and the
`jobledger.type` header, each as a 4-byte big-endian length and its bytes (an absent key is
length 0). The record carries two headers: `jobledger.signer`, the signing key's id (the first
16 hex digits of the SHA-256 of its raw public key), and `jobledger.signature`, the 64 raw
signature bytes. The topic is signed so a record cannot be copied into another cluster's
topics (another prefix) or another role's.

The keyring (`keyring.json`, written by `jobledger keys`) lists each key: its id, the
principal it belongs to, that principal's role (`admin`, `services`, `runner`, `client`), the
public key, when it was revoked, if it was, and for a runner's key the TaskExecutors
(ResourceIDs) its principal speaks for. That list is the only source of a runner's authority
over a TaskExecutor: nothing is inferred from the shape of names (a principal `rk` once owned
`rk-2-0` of principal `rk-2` by a prefix rule), and a ResourceID stated for two principals
makes the keyring unusable, so each TaskExecutor has at most one owner.

A key is never deleted, only revoked: the services and a later `replay --verify` of the log
must judge each record alike (so a TaskExecutor's stated owner is never moved to another
principal: give the other its own ResourceIDs). A revoked key signs nothing appended at or
after its revocation time, the time being the record's timestamp
(`jobledger broker --secure` has the brokers stamp it: LogAppendTime, so a writer cannot date
its record before the revocation).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
    load_pem_private_key,
)

TYPE_HEADER = "jobledger.type"
"""Every event record carries its type in this header, so a consumer can filter without
decoding (and a person reading the topic with kcat sees what each record is)."""
SIGNER_HEADER = "jobledger.signer"
SIGNATURE_HEADER = "jobledger.signature"
SIGNED_PREFIX = b"jobledger-record-v1"
UNSIGNED = f"unsigned record (no {SIGNER_HEADER}/{SIGNATURE_HEADER} header)"
"""Why a record with no signature is refused (`Keyring.check`; `replay --verify --keyring`
says it of an input exported without one)."""
ROLES = ("admin", "services", "runner", "client")
"""The principals' roles, as `jobledger broker --secure` makes one SCRAM user of each."""
SIGNING_KEY_ENV = "JOBLEDGER_SIGNING_KEY"
KEYRING_ENV = "JOBLEDGER_KEYRING"


class KeyFileError(ValueError):
    """A key or keyring file that cannot be used; the message says which and why."""


def signed_bytes(topic: str, key: bytes | None, value: bytes, type_name: str) -> bytes:
    """The bytes a record's signature is over (the module docstring's layout)."""
    parts = (topic.encode(), key or b"", value, type_name.encode())
    return SIGNED_PREFIX + b"".join(len(p).to_bytes(4, "big") + p for p in parts)


def key_id(public: Ed25519PublicKey) -> str:
    raw = public.public_bytes(Encoding.Raw, PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


@dataclass(frozen=True)
class SigningKey:
    """A writer's private key: signs every record this process writes."""

    private: Ed25519PrivateKey
    key_id: str

    @classmethod
    def generate(cls) -> SigningKey:
        private = Ed25519PrivateKey.generate()
        return cls(private, key_id(private.public_key()))

    @classmethod
    def from_pem(cls, data: bytes, where: str = "the signing key") -> SigningKey:
        try:
            private = load_pem_private_key(data, password=None)
        except (ValueError, TypeError) as exc:
            raise KeyFileError(f"{where} is not an unencrypted PEM private key ({exc})") from exc
        if not isinstance(private, Ed25519PrivateKey):
            raise KeyFileError(f"{where} is a {type(private).__name__}, not an Ed25519 key")
        return cls(private, key_id(private.public_key()))

    @classmethod
    def load(cls, path: Path) -> SigningKey:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise KeyFileError(f"cannot read signing key {path}: {exc.strerror}") from exc
        return cls.from_pem(data, str(path))

    def pem(self) -> bytes:
        """PKCS#8 PEM, unencrypted (the file is mode 0600, as the property files are)."""
        return self.private.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())

    def public_b64(self) -> str:
        raw = self.private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        return base64.b64encode(raw).decode()

    def headers(self, topic: str, key: bytes | None, value: bytes, type_name: str) -> dict:
        signature = self.private.sign(signed_bytes(topic, key, value, type_name))
        return {SIGNER_HEADER: self.key_id.encode(), SIGNATURE_HEADER: signature}


@dataclass(frozen=True)
class Signer:
    """Who a record's signature says wrote it."""

    principal: str
    role: str


@dataclass(frozen=True)
class KeyEntry:
    key_id: str
    principal: str
    role: str
    public_key: str
    """The raw 32-byte public key, base64."""
    revoked_at_ms: int | None = None
    task_executors: tuple[str, ...] = ()
    """The ResourceIDs of the TaskExecutors this key's principal (a runner) speaks for."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "task_executors", tuple(self.task_executors))


@dataclass
class Keyring:
    """Every key the services accept records from, and each key's principal and role."""

    entries: dict[str, KeyEntry]

    def __post_init__(self) -> None:
        self._public: dict[str, Ed25519PublicKey] = {}
        self._owners: dict[str, str] | None = None

    @classmethod
    def load(cls, path: Path) -> Keyring:
        try:
            data = json.loads(path.read_text())
            entries = [KeyEntry(**entry) for entry in data["keys"]]
        except OSError as exc:
            raise KeyFileError(f"cannot read keyring {path}: {exc.strerror}") from exc
        except (ValueError, KeyError, TypeError) as exc:
            raise KeyFileError(f"{path} is not a jobledger keyring ({exc!r})") from exc
        for entry in entries:
            if entry.role not in ROLES:
                raise KeyFileError(f"{path}: key {entry.key_id} has role {entry.role!r}, not one "
                                f"of {', '.join(ROLES)}")  # fmt: skip
        keyring = cls({entry.key_id: entry for entry in entries})
        conflict = keyring.ownership_conflict()
        if conflict is not None:
            raise KeyFileError(f"{path}: {conflict}")
        return keyring

    def owners(self) -> dict[str, str]:
        """Each TaskExecutor's owner: ResourceID -> the runner principal the keyring states
        speaks for it (`ReducerDriver.admit` takes this, not a rule over names); asked per
        record, so made once."""
        if self._owners is None:
            self._owners = {
                resource_id: entry.principal
                for entry in self.entries.values()
                for resource_id in entry.task_executors
            }
        return self._owners

    def ownership_conflict(self) -> str | None:
        """Why the stated ownership is ambiguous (a TaskExecutor of two principals, or of a
        principal that is no runner), or None."""
        seen: dict[str, str] = {}
        for entry in self.entries.values():
            if entry.task_executors and entry.role != "runner":
                return (f"key {entry.key_id} of {entry.principal} ({entry.role}) states "
                        "TaskExecutors: only a runner's key may")  # fmt: skip
            for resource_id in entry.task_executors:
                other = seen.setdefault(resource_id, entry.principal)
                if other != entry.principal:
                    return (f"TaskExecutor {resource_id!r} is stated for both {other} and "
                            f"{entry.principal}: a TaskExecutor has one owner")  # fmt: skip
        return None

    def save(self, path: Path) -> None:
        data = {"keys": [_entry_json(entry) for entry in self.entries.values()]}
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(data, indent=1) + "\n")
        os.replace(temporary, path)

    def add(
        self, key: SigningKey, principal: str, role: str, task_executors: tuple[str, ...] = ()
    ) -> KeyEntry:
        """Add `key` of `principal`; a runner's states the TaskExecutors it speaks for (a
        TaskExecutor stated for another principal is refused, the keyring unchanged)."""
        if role not in ROLES:
            raise KeyFileError(f"role {role!r} is not one of {', '.join(ROLES)}")
        entry = KeyEntry(key.key_id, principal, role, key.public_b64(), None, task_executors)
        before = self.entries.get(entry.key_id)
        self.entries[entry.key_id] = entry
        self._owners = None
        conflict = self.ownership_conflict()
        if conflict is not None:
            if before is None:
                del self.entries[entry.key_id]
            else:
                self.entries[entry.key_id] = before
            raise KeyFileError(conflict)
        return entry

    def revoke(self, key_id_or_principal: str, at_ms: int) -> list[KeyEntry]:
        """Revoke one key, or every key of a principal, from `at_ms` on; the entries
        revoked (a key revoked before keeps its earlier time)."""
        hits = [
            entry
            for entry in self.entries.values()
            if key_id_or_principal in (entry.key_id, entry.principal)
            and entry.revoked_at_ms is None
        ]
        for entry in hits:
            self.entries[entry.key_id] = replace(entry, revoked_at_ms=at_ms)
        return [self.entries[entry.key_id] for entry in hits]

    def check(
        self, topic: str, key: bytes | None, value: bytes, headers: list | dict | None,
        timestamp_ms: int,
    ) -> Signer | str:  # fmt: skip
        """The record's signer, or why it has none the keyring accepts (one line)."""
        found = _headers(headers)
        if found is None:
            return f"two {SIGNER_HEADER} or {SIGNATURE_HEADER} headers: which one signed it?"
        signer_id, signature = found.get(SIGNER_HEADER), found.get(SIGNATURE_HEADER)
        if signer_id is None or signature is None:
            return UNSIGNED
        named = signer_id.decode(errors="replace")
        entry = self.entries.get(named)
        if entry is None:
            return f"signed by key {named!r}, which is not in the keyring"
        type_name = found.get(TYPE_HEADER, b"").decode(errors="replace")
        try:
            self.public_key(entry).verify(signature, signed_bytes(topic, key, value, type_name))
        except InvalidSignature:
            return (
                f"bad signature for key {entry.key_id} ({entry.principal}): the record is not "
                "what that key signed"
            )
        if entry.revoked_at_ms is not None and timestamp_ms >= entry.revoked_at_ms:
            return (
                f"signed by key {entry.key_id} of {entry.principal}, revoked at "
                f"{entry.revoked_at_ms} (the record was appended at {timestamp_ms})"
            )
        return Signer(entry.principal, entry.role)

    def public_key(self, entry: KeyEntry) -> Ed25519PublicKey:
        """`entry`'s public key (made once: a checker asks per record)."""
        public = self._public.get(entry.key_id)
        if public is None:
            raw = base64.b64decode(entry.public_key)
            public = self._public[entry.key_id] = Ed25519PublicKey.from_public_bytes(raw)
        return public


def _entry_json(entry: KeyEntry) -> dict:
    """A key as the keyring file holds it (a key that states no TaskExecutor, as before)."""
    data = asdict(entry)
    if entry.task_executors:
        data["task_executors"] = list(entry.task_executors)
    else:
        del data["task_executors"]
    return data


def _headers(headers: list | dict | None) -> dict[str, bytes] | None:
    """A record's headers by name (librdkafka gives a list of pairs), or None if a signing
    header comes twice: Kafka allows repeated names, and readers disagree on which counts
    (Java's `lastHeader` takes the last), so such a record is refused, not guessed at."""
    if headers is None:
        return {}
    pairs = headers.items() if isinstance(headers, dict) else headers
    found: dict[str, bytes] = {}
    for name, value in pairs:
        if name in found and name in (SIGNER_HEADER, SIGNATURE_HEADER):
            return None
        found[name] = value or b""
    return found


_signing_key: SigningKey | None = None


def use_signing_key(key: SigningKey | None) -> None:
    """Sign every record this process writes from now on with `key` (None: unsigned). Set
    once, by the command line as a command starts, or by a Spark task from its settings."""
    global _signing_key
    _signing_key = key


def signing_key() -> SigningKey | None:
    return _signing_key
