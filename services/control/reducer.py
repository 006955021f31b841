"""What every reducer is: state plus one handler per input type, `apply(event) -> decisions`.

Handlers are marked with `@handles(EventType)`; an event type a reducer has no handler for
(its own decisions read back, events meant for other owners) derives nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from jobledger.schemas import Event

from .decisions import Decisions

F = TypeVar("F", bound=Callable[..., None])

_LEFT_OUT = {"snapshot": False}


def derived(**kwargs: Any) -> Any:
    """A field of reducer state that a snapshot leaves out: an index `__post_init__` rebuilds
    from the fields that are kept, or something alive only while one input is reduced.
    Takes `dataclasses.field`'s arguments (services/host/snapshot_format.py)."""
    return dataclasses.field(init=False, repr=False, compare=False, metadata=_LEFT_OUT, **kwargs)


def in_snapshot(f: dataclasses.Field[Any]) -> bool:
    return bool(f.metadata.get("snapshot", True))


def runs(at_most: int, **kwargs: Any) -> Any:
    """A list field of reducer state whose items come in long runs of one immutable value (a
    KvStateLocation's key groups: one registration per range of them). A snapshot writes
    each run once, as its value and length, and reads it back as one object shared by the
    run, as the list held it: written item by item, they were most of a snapshot's objects.
    `at_most` bounds the list a snapshot may build (a forged length is refused, not
    allocated). Takes `dataclasses.field`'s arguments (services/host/snapshot_format.py)."""
    return dataclasses.field(metadata={"runs_at_most": at_most}, **kwargs)


def runs_at_most(f: dataclasses.Field[Any]) -> int | None:
    """The bound of a `runs` field, or None for any other field."""
    return f.metadata.get("runs_at_most")


def columns(at_most: int, **kwargs: Any) -> Any:
    """A list field of reducer state holding many plain dataclasses (an ExecutionGraph's
    subtasks): a snapshot writes it column by column, each field's values in one array, and
    a column of immutable values (strings, numbers, enum members) as runs of equal values,
    which most of them are (every subtask of a vertex names it, most are FINISHED at attempt
    0). Written record by record, these were half of a snapshot's reading time. `at_most`
    bounds the list a snapshot may build. Takes `dataclasses.field`'s arguments."""
    return dataclasses.field(metadata={"columns_at_most": at_most}, **kwargs)


def columns_at_most(f: dataclasses.Field[Any]) -> int | None:
    """The bound of a `columns` field, or None for any other field."""
    return f.metadata.get("columns_at_most")


def handles(event_type: type[Event]) -> Callable[[F], F]:
    """Mark a method as the handler of `event_type`: `(self, event, out: Decisions)`."""

    def mark(method: F) -> F:
        previous = getattr(method, "handled_types", ())
        method.handled_types = (*previous, event_type)  # type: ignore[attr-defined]
        return method

    return mark


class Reducer:
    """The base of every reducer (JobMaster, SlotPool, ResourceManager, TaskExecutor): the
    handler table built from `@handles`, and `apply`, which stamps the decisions with the
    reducer's own `producer`. A component inside its owner (the SlotPool in the JobMaster)
    is reached through `handle`, with its owner's `Decisions`."""

    producer: ClassVar[str]
    """The `producer` of the decisions; a reducer never consumes events it produced."""
    handlers: ClassVar[dict[type[Event], Callable[..., None]]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.handlers = {
            event_type: method
            for method in vars(cls).values()
            if callable(method)
            for event_type in getattr(method, "handled_types", ())
        }

    def next_timer(self) -> int | None:
        """The earliest event time at which a TimerFired would change this reducer's state or
        derive anything; None if no TimerFired ever would as things stand."""
        return None

    def apply(self, event: Event, incarnation: int = 0) -> list[Event]:
        """Reduce one input; returns the decisions derived from it, in order."""
        out = Decisions(event, self.producer, incarnation)
        self.handle(event, out)
        return out.events

    def handle(self, event: Event, out: Decisions) -> bool:
        """Reduce `event` into another reducer's decisions (a component inside its owner);
        False if this reducer has no handler for it."""
        handler = self.handlers.get(type(event))
        if handler is None:
            return False
        handler(self, event, out)
        return True
