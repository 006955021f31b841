"""Who wrote each record of the log, as its signature and a keyring say: what `history`,
`explain`, `tail`, `job show` and the REST API show beside each event.

The writer is read from the record's provenance (`provenance.py`: its topic, key, value and
signing headers, kept beside the decoded event), never from the event: the reducers know
nothing of signatures, and an event's `producer` field is whatever its writer typed. A name
is shown only where the keyring checks the signature, as the services did; a record that is
signed but refused, or read with no keyring to check it, says so instead of naming anyone.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from jobledger.services.signing import SIGNER_HEADER, Keyring

from .log_file import LogRecord
from .provenance import Provenance


@dataclass(frozen=True)
class Writer:
    """Who wrote one record: a principal and its role, or why nobody can be named."""

    principal: str | None = None
    role: str | None = None
    key_id: str | None = None
    """The key the record's signer header names (None: unsigned)."""
    refused: str | None = None
    """Why the keyring refuses the signature (a forged or revoked one), if it does."""

    def text(self) -> str:
        """`alice (client)`, `unsigned`, or what is known of a signature that names nobody."""
        if self.principal is not None:
            return f"{self.principal} ({self.role})"
        if self.key_id is None:
            return "unsigned"
        if self.refused is None:
            return f"key {self.key_id} (no keyring)"
        return f"refused signature (key {self.key_id})"

    def label(self) -> str:
        """What a line of the log says of its writer: `by alice (client)`, `unsigned`."""
        return self.text() if self.key_id is None or self.refused else f"by {self.text()}"

    def to_dict(self) -> dict[str, str | None]:
        return asdict(self)


UNSIGNED = Writer()


class Writers:
    """Each record's writer, by `keyring` (None: a signature is named by its key only, as
    nothing here can check it); each record checked once."""

    def __init__(self, keyring: Keyring | None = None) -> None:
        self.keyring = keyring
        self._seen: dict[tuple[str, int, int], Writer] = {}

    def of(self, record: LogRecord) -> Writer:
        place = (record.role.value, record.partition, record.offset)
        writer = self._seen.get(place)
        if writer is None:
            writer = self._seen[place] = self.signed(record.provenance, record.timestamp)
        return writer

    def signed(self, provenance: Provenance | None, timestamp_ms: int) -> Writer:
        """Who wrote a record with this provenance, appended at `timestamp_ms`."""
        if provenance is None:
            return UNSIGNED
        parts = provenance.record()
        named = [value for name, value in parts.headers if name == SIGNER_HEADER]
        key_id = named[0].decode(errors="replace") if len(named) == 1 else "?"
        if self.keyring is None:
            return Writer(key_id=key_id)
        found = self.keyring.check(*parts, timestamp_ms)
        if isinstance(found, str):
            return Writer(key_id=key_id, refused=found)
        return Writer(found.principal, found.role, key_id)
