"""Building the events a reducer derives from one input.

A derived event's id is a function of its cause (its id and the owner it was routed to) and
its position among the cause's derived events, its time is the cause's event time, and it
names the cause: the same log in gives the same decisions out, bit for bit (design rule D-2).
Event ids are chosen by clients, so the owner is part of the basis: two inputs sharing an id
on two topics or partitions derive decisions with ids of their own.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any, TypeVar

from jobledger.schemas import Event
from jobledger.schemas.construct import trusted
from jobledger.schemas.rejections import EventRejected
from jobledger.schemas.topics import TopicRole
from jobledger.schemas.types import OwnerKind

_NAMESPACE = uuid.UUID("5b0d2c8e-62a4-4a51-9a59-0b5f1d1c7e10")
_NAMESPACE_BYTES = _NAMESPACE.bytes
_VARIANT_DIGIT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}
"""The 17th hex digit of a uuid (the high nibble of byte 8) once RFC 4122's variant bits (10xx)
are set, by the digit before."""

E = TypeVar("E", bound=Event)


def derived_id(cause_event_id: str, tag: str) -> str:
    """A stable id for something derived from `cause_event_id` (an event, an AllocationID):
    the hex of `uuid5(_NAMESPACE, "<cause>/<tag>")`, built from the SHA-1 directly because
    `uuid.UUID`'s constructor was a tenth of a replay's time."""
    return _uuid5_hex(hashlib.sha1(_NAMESPACE_BYTES + f"{cause_event_id}/{tag}".encode()))


def _uuid5_hex(sha1: Any) -> str:
    """The hex of the uuid5 whose SHA-1 is `sha1`: its first 32 hex digits with the version
    digit (the 13th) made 5 and the variant bits (the top two of the 17th) made 10, spliced
    into the hex text (a bytearray round trip cost as much as the hash; `hexdigest` and a
    table of the 17th digit, 0.57 µs an id, against 0.68 µs for `digest()` sliced and hexed)."""
    text = sha1.hexdigest()
    return f"{text[:12]}5{text[13:16]}{_VARIANT_DIGIT[text[16]]}{text[17:32]}"


_ROLE_JSON = {role: json.dumps(role.value) for role in TopicRole}
"""Each topic role as the JSON text the basis starts with (`Enum.value` is a property)."""

_json_string = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]
"""`json.dumps` of a string without the encoder json.dumps sets up per call, which cost as
much as the rest of a reduction."""


class Decisions:
    """The derived events of one input, in the order they were decided.

    Most inputs derive nothing; the basis of the ids is therefore made on the first derived
    id, not per input, and the SHA-1 of its prefix is kept, so each id hashes only its tag.
    One is made per input, so its attributes are slots."""

    __slots__ = ("_prefix", "cause", "events", "incarnation", "producer")

    def __init__(self, cause: Event, producer: str, incarnation: int = 0) -> None:
        """`incarnation` counts earlier reductions of an input with the cause's id that were
        only rejected: the cause reduced again derives ids the rejections did not take."""
        self.cause = cause
        self.producer = producer
        self.incarnation = incarnation
        self.events: list[Event] = []
        self._prefix: Any = None

    @property
    def basis(self) -> str:
        """What the ids derive from: the cause's owner, id and incarnation as JSON, not a
        joined string (keys and ids are chosen by clients and may hold any separator, and
        "A" + "x/y" must not read as "A/x" + "y"); byte for byte `json.dumps` of the list.
        Written from its parts' types (every key field is a string), not through a helper
        asking each part its type: it runs once per decision."""
        role, key = self.cause.route()
        return (
            f"[{_ROLE_JSON[role]}, {_json_string(key)}, {_json_string(self.cause.event_id)}, "
            f"{self.incarnation}]"
        )

    def derive(self, tag: str) -> str:
        """An id for something derived from the cause (a decision, an AllocationID):
        `derived_id(self.basis, tag)`."""
        if self._prefix is None:
            self._prefix = hashlib.sha1(_NAMESPACE_BYTES + f"{self.basis}/".encode())
        sha1 = self._prefix.copy()
        sha1.update(tag.encode())
        return _uuid5_hex(sha1)

    def emit(self, cls: type[E], producer: str | None = None, **fields: Any) -> E:
        """The next decision, built without validation (`construct.trusted`): reducers pass
        values of the fields' types, which `tests/schemas/test_construct.py` checks for every
        decision of the golden scenarios through the validating model. `producer` names a
        component deciding inside the reducer (the JobMaster's SlotPool), else the reducer."""
        fields["event_id"] = self.derive(str(len(self.events)))
        fields["event_time"] = self.cause.event_time
        fields["producer"] = producer or self.producer
        fields["cause_event_id"] = self.cause.event_id
        event = trusted(cls, fields)
        self.events.append(event)
        return event

    def reject(
        self, scope: OwnerKind, owner_id: str, reason: str, producer: str | None = None
    ) -> EventRejected:
        """Refuse the cause: nothing changed, and the log says why (`producer` as in `emit`)."""
        return self.emit(
            EventRejected,
            producer,
            scope=scope,
            owner_id=owner_id,
            rejected_event_id=self.cause.event_id,
            rejected_event_type=self.cause.type_name(),
            reason=reason,
        )
