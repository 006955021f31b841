"""Building the events a reducer derives from one input.

A derived event's id is a function of its cause (its id and the owner it was routed to) and
its position among the cause's derived events, its time is the cause's event time, and it
names the cause: the same log in gives the same decisions out, bit for bit (DESIGN.md rule 2).
Event ids are chosen by clients, so the owner is part of the basis: two inputs sharing an id
on two topics or partitions derive decisions with ids of their own.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any, TypeVar

from jobledger.schemas import Event
from jobledger.schemas.rejections import EventRejected
from jobledger.schemas.types import OwnerKind

_NAMESPACE = uuid.UUID("5b0d2c8e-62a4-4a51-9a59-0b5f1d1c7e10")

E = TypeVar("E", bound=Event)


_NAMESPACE_BYTES = _NAMESPACE.bytes


def derived_id(cause_event_id: str, tag: str) -> str:
    """A stable id for something derived from `cause_event_id` (an event, an AllocationID):
    the hex of `uuid5(_NAMESPACE, "<cause>/<tag>")`, built from the SHA-1 directly because
    `uuid.UUID`'s constructor was a tenth of a replay's time."""
    digest = bytearray(
        hashlib.sha1(_NAMESPACE_BYTES + f"{cause_event_id}/{tag}".encode()).digest()[:16]
    )
    digest[6] = (digest[6] & 0x0F) | 0x50
    digest[8] = (digest[8] & 0x3F) | 0x80
    return digest.hex()


class Decisions:
    """The derived events of one input, in the order they were decided."""

    def __init__(self, cause: Event, producer: str, incarnation: int = 0) -> None:
        """`incarnation` counts earlier reductions of an input with the cause's id that were
        only rejected: the cause reduced again derives ids the rejections did not take."""
        self.cause = cause
        self.producer = producer
        self.events: list[Event] = []
        role, key = cause.route()
        # JSON, not a joined string: keys and ids are chosen by clients and may hold any
        # separator, and "A" + "x/y" must not read as "A/x" + "y"
        self.basis = json.dumps([role.value, key, cause.event_id, incarnation])

    def derive(self, tag: str) -> str:
        """An id for something derived from the cause (a decision, an AllocationID)."""
        return derived_id(self.basis, tag)

    def emit(self, cls: type[E], **fields: Any) -> E:
        event = cls(
            event_id=self.derive(str(len(self.events))),
            event_time=self.cause.event_time,
            producer=self.producer,
            cause_event_id=self.cause.event_id,
            **fields,
        )
        self.events.append(event)
        return event

    def reject(self, scope: OwnerKind, owner_id: str, reason: str) -> EventRejected:
        """Refuse the cause: nothing changed, and the log says why."""
        return self.emit(
            EventRejected,
            scope=scope,
            owner_id=owner_id,
            rejected_event_id=self.cause.event_id,
            rejected_event_type=self.cause.type_name(),
            reason=reason,
        )
