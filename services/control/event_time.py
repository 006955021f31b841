"""Event times at their edges: the bound an input's event time is held to where it enters, and
time arithmetic that always stays an Avro long.

Every event time, deadline and timeout is an Avro long. A reducer that adds a timeout to an
event time near the top of that range (a `SlotRequested` at 2^63 - 1) made a deadline no
snapshot could encode: the partition's snapshot raised, and the services crash-looped on it.
So the inputs are bounded where they are read (`ahead_refusal`), and, for what is admitted
anyway (a log written before the bound, a bound switched off), every sum the reducers keep
or emit saturates at the long's ends (`later`, `between`): a deadline at the top of the range
is one no clock reaches, which is what it meant.

Only the future is bounded. The past is not: a writer whose clock is behind, a log replayed
long after, and the small synthetic times of tests are all honest, and no arithmetic on a
time in the past can leave the range once it saturates.
"""

from __future__ import annotations

LONG_MIN = -(2**63)
LONG_MAX = 2**63 - 1

MAX_AHEAD_MS = 24 * 3600 * 1000
"""How far an input's event time may lie ahead of the time it is measured against (a day):
no honest writer's clock is that far ahead (Kafka itself refuses a record dated more than an
hour ahead of the broker, `message.timestamp.after.max.ms`), and a decision derived from a
cause keeps the cause's time, so the bound must leave room for the writers' skew."""


def saturated(value: int) -> int:
    """`value` held to the Avro long's range."""
    return min(LONG_MAX, max(LONG_MIN, value))


def later(at: int, delay_ms: int) -> int:
    """`delay_ms` after `at` (a deadline), saturating at the Avro long's ends."""
    return saturated(at + delay_ms)


def between(earlier: int, at: int) -> int:
    """How long from `earlier` to `at` (a remaining timeout), saturating likewise."""
    return saturated(at - earlier)


def ahead_refusal(event_time: int, reference_ms: int, max_ahead_ms: int) -> str | None:
    """Why an input dated `event_time` may not be admitted when the time it is measured
    against is `reference_ms`, or None: it lies more than `max_ahead_ms` ahead (0: no bound)."""
    if max_ahead_ms <= 0 or event_time - reference_ms <= max_ahead_ms:
        return None
    return (
        f"event_time {event_time} is {event_time - reference_ms} ms ahead of {reference_ms}, "
        f"more than the {max_ahead_ms} ms an event may be"
    )
