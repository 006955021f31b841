"""Input events for reducer tests (unique ids, increasing event times, terse construction),
and whole-event expectations of the events a reducer derives (`assert_derived`)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel

from jobledger.schemas import Event
from jobledger.schemas.rejections import EventRejected
from jobledger.schemas.types import OwnerKind, ResourceProfile, ResourceProfileKind
from jobledger.services.control.decisions import Decisions

E = TypeVar("E", bound=Event)

ANY = ResourceProfile(kind=ResourceProfileKind.ANY)
UNKNOWN = ResourceProfile()


def profile(cpu: float, heap: int = 0, managed: int = 0) -> ResourceProfile:
    return ResourceProfile(
        kind=ResourceProfileKind.SPECIFIED,
        cpu_cores=cpu,
        task_heap_memory_mb=heap,
        managed_memory_mb=managed,
    )


class Clock:
    """Makes input events; `at` sets the event time, otherwise time moves 1 ms per event."""

    def __init__(self, start: int = 1_000) -> None:
        self.now = start
        self.count = 0

    def __call__(self, cls: type[E], at: int | None = None, **fields: Any) -> E:
        self.count += 1
        self.now = at if at is not None else self.now + 1
        return cls(event_id=f"in-{self.count}", event_time=self.now, producer="test", **fields)


def types(events: list[Event]) -> list[str]:
    return [e.type_name() for e in events]


# -- whole derived events ------------------------------------------------------------------
#
# A reducer test gives a state and one input and asserts every derived event, whole and in
# order: `assert_derived(events, [expect(SlotRequested, slot_request_id="r1", ...), ...])`.
# Every field of every derived event is compared: a field an expectation leaves out must have
# a default in the schema (and then that default is expected), or be a header the cause
# decides (see `assert_derived`); a value the test cannot know in advance is named with
# `ANY_VALUE`, or with a `Capture` to use it later.


class Matcher:
    """An expected value that is not a plain value: `matches(actual)` decides."""

    def matches(self, actual: Any) -> bool:
        raise NotImplementedError


class _AnyValue(Matcher):
    def matches(self, actual: Any) -> bool:
        return True

    def __repr__(self) -> str:
        return "ANY_VALUE"


ANY_VALUE = _AnyValue()
"""Any value at all: for a field the test cannot know in advance (`ANY` is a profile)."""


class Capture(Matcher):
    """Any value the first time it is matched, which it keeps (`.value`); afterwards only that
    value, so one Capture in two places says "the same, whatever it is"."""

    _UNSET: Any = object()

    def __init__(self, name: str = "capture") -> None:
        self.name = name
        self._value = self._UNSET

    @property
    def value(self) -> Any:
        assert self._value is not self._UNSET, f"Capture {self.name} matched nothing yet"
        return self._value

    def matches(self, actual: Any) -> bool:
        if self._value is self._UNSET:
            self._value = actual
            return True
        return _matches(self._value, actual)

    def __repr__(self) -> str:
        if self._value is self._UNSET:
            return f"Capture({self.name})"
        return f"Capture({self.name}={self._value!r})"


@dataclass(frozen=True)
class Expected:
    """An event (or nested record) of type `cls` with `fields`; see `expect`."""

    cls: type[BaseModel]
    fields: dict[str, Any]

    def complete(self, defaults: dict[str, Any]) -> dict[str, Any]:
        """Every field of `cls`, in schema order: the given value, else `defaults` (headers the
        cause decides), else the schema's default; a required field left out is an error in
        the test, not a mismatch."""
        values: dict[str, Any] = {}
        unnamed = []
        for name, info in self.cls.model_fields.items():
            if name in self.fields:
                values[name] = self.fields[name]
            elif name in defaults:
                values[name] = defaults[name]
            elif info.is_required():
                unnamed.append(name)
            else:
                values[name] = info.get_default(call_default_factory=True)
        if unnamed:
            raise TypeError(
                f"expect({self.cls.__name__}) names no {', '.join(unnamed)}: give a value, "
                "or ANY_VALUE/Capture() for one the test cannot know"
            )
        return values

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in self.fields.items())
        return f"{self.cls.__name__}({shown})"


def expect(cls: type[BaseModel], /, **fields: Any) -> Expected:
    """The expectation of an event of exactly type `cls` (or a nested record, e.g. an
    AllocatedSlotInfo inside a heartbeat) with `fields`: plain values, `ANY_VALUE`, a
    `Capture`, or nested expectations (in lists too)."""
    unknown = sorted(set(fields) - set(cls.model_fields))
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {', '.join(unknown)}")
    return Expected(cls, fields)


def rejection(cause: Event, scope: OwnerKind, owner_id: str, reason: str) -> Expected:
    """The EventRejected with which the owner `owner_id` refuses `cause`, saying `reason`."""
    return expect(
        EventRejected, scope=scope, owner_id=owner_id, rejected_event_id=cause.event_id,
        rejected_event_type=cause.type_name(), reason=reason,
    )  # fmt: skip


class Derived(list[Event]):
    """The events a reducer derived from one input, with that input (`cause`) and the name the
    reducer signs its decisions with (`producer`), so `assert_derived` can expect the headers."""

    def __init__(self, events: list[Event], cause: Event, producer: str) -> None:
        super().__init__(events)
        self.cause = cause
        self.producer = producer


def decision_id(cause: Event, position: int, incarnation: int = 0) -> str:
    """The event id a reducer gives its `position`-th decision from `cause` (decisions.py)."""
    return Decisions(cause, "", incarnation).derive(str(position))


def derived_from(log: list[Event], cause: Event, producer: str) -> Derived:
    """The events of a driver's `log` that `cause` derived (at its one owner), in order."""
    return Derived([e for e in log if e.cause_event_id == cause.event_id], cause, producer)


def header_defaults(cause: Event | None, producer: str | None, position: int) -> dict[str, Any]:
    """The headers of the `position`-th decision from `cause`: its id, the cause's event time,
    the producer, and the cause's id (services/control/decisions.py)."""
    defaults: dict[str, Any] = {}
    if cause is not None:
        defaults |= {
            "event_id": decision_id(cause, position),
            "event_time": cause.event_time,
            "cause_event_id": cause.event_id,
        }
    if producer is not None:
        defaults["producer"] = producer
    return defaults


def assert_derived(
    actual: list[Event],
    expected: list[Expected],
    *,
    cause: Event | None = None,
    producer: str | None = None,
) -> None:
    """Assert that `actual` is exactly the `expected` events, in order, every field compared.

    The headers need not be spelled out: given the input the events derive from (`cause`, taken
    from `actual` when it is `Derived`), each expected decision has the cause's event time and
    id as `event_time` and `cause_event_id`, and the id decisions.py derives for its position
    as `event_id`; and `producer` (also from `Derived`). An expectation can override any of
    them. Events are aligned by type; the message lists, per position, the missing events (at
    the position they were expected), the unexpected ones (at the position they were derived),
    and for aligned events each differing field as `field: expected X, got Y`.
    """
    if isinstance(actual, Derived):
        cause = cause if cause is not None else actual.cause
        producer = producer if producer is not None else actual.producer
    problems: list[str] = []
    matcher = difflib.SequenceMatcher(
        a=[e.cls.__name__ for e in expected], b=[type(e).__name__ for e in actual], autojunk=False
    )
    for op, e_lo, e_hi, a_lo, a_hi in matcher.get_opcodes():
        if op == "equal":
            for i, j in zip(range(e_lo, e_hi), range(a_lo, a_hi), strict=True):
                # the id of the position it was derived at: an event out of place is
                # reported once, as missing or unexpected, not again for its id
                values = expected[i].complete(header_defaults(cause, producer, j))
                diffs = _differences(values, actual[j])
                if diffs:
                    where = f"[{i}]" if i == j else f"[{i}] (derived at [{j}])"
                    problems.append(f"{where} {expected[i].cls.__name__}: " + "; ".join(diffs))
            continue
        for i in range(e_lo, e_hi):
            expected[i].complete(header_defaults(cause, producer, i))  # names every field
            problems.append(f"[{i}] missing: {expected[i]!r}")
        for j in range(a_lo, a_hi):
            problems.append(f"[{j}] unexpected: {_show(actual[j])}")
    if problems:
        intro = f"derived events differ ({len(expected)} expected, {len(actual)} derived"
        intro += f", from {type(cause).__name__} {cause.event_id})" if cause else ")"
        raise AssertionError("\n  ".join([intro + ":", *problems]))


def _differences(values: dict[str, Any], actual: BaseModel) -> list[str]:
    return [
        f"{name}: expected {value!r}, got {getattr(actual, name)!r}"
        for name, value in values.items()
        if not _matches(value, getattr(actual, name))
    ]


def _matches(expected: Any, actual: Any) -> bool:
    if isinstance(expected, Matcher):
        return expected.matches(actual)
    if isinstance(expected, Expected):
        return type(actual) is expected.cls and not _differences(expected.complete({}), actual)
    if isinstance(expected, list | tuple):
        return (
            isinstance(actual, list | tuple)
            and len(expected) == len(actual)
            and all(_matches(e, a) for e, a in zip(expected, actual, strict=True))
        )
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(expected) is type(actual) and expected == actual
    return bool(expected == actual)


def _show(event: BaseModel) -> str:
    """An event as its type and its own fields (the headers left out)."""
    fields = ", ".join(
        f"{name}={getattr(event, name)!r}"
        for name in type(event).model_fields
        if name not in Event.HEADER_FIELDS
    )
    return f"{type(event).__name__}({fields})"
