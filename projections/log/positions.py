"""Points in the log, one syntax for every command that answers "as of when".

The log is several partitions of several topics; its order is the order records were
appended: partitions merged by their records' timestamps, each partition in offset order
(ties go to the topic role's order, then the partition). A point in the log is a prefix of
that order:

- `ROLE/PARTITION@OFFSET` (`job/3@120`): up to and including that record;
- `id:EVENT_ID`: up to and including the record carrying that event;
- `count:N`: the first N records;
- `s@TIME` (epoch ms or ISO 8601, kcat-style), or an ISO time alone: every record appended at
  or before TIME. Record timestamps, not event times: a decision carries its input's event
  time, so only the time it was appended separates it from its input;
- `end`: the whole log.

Every cut says which offsets it reflects (the last offset it holds of each partition).
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from jobledger.schemas.topics import TopicRole

from .log_file import LOG_ROLES, LogRecord
from .replay import dead_lettered
from .replay import position as where

_RECORD = re.compile(r"^(?P<role>[a-z]+)/(?P<partition>\d+)@(?P<offset>\d+)$", re.ASCII)
FORMS = (
    "ROLE/PARTITION@OFFSET (e.g. job/3@120; an offset holding no record, a transaction "
    "marker, names the next record), id:EVENT_ID, count:N, s@TIME or an ISO time (TIME: "
    "epoch ms or ISO 8601), or end"
)


class PositionError(ValueError):
    """A position that is not one, or names nothing in this log; the message says what
    exists."""


@dataclass(frozen=True)
class Position:
    """A parsed point in the log (see the module docstring for the forms)."""

    text: str
    kind: str
    role: str = ""
    partition: int = 0
    offset: int = 0
    value: int = 0
    event_id: str = ""

    @classmethod
    def parse(cls, text: str) -> Position:
        text = text.strip()
        if text == "end":
            return cls(text, "end")
        if match := _RECORD.match(text):
            role = match["role"]
            if role not in {r.value for r in LOG_ROLES}:
                raise PositionError(
                    f"{text!r}: no topic role {role!r} (roles: "
                    f"{', '.join(r.value for r in LOG_ROLES)})"
                )
            return cls(text, "record", role, int(match["partition"]), int(match["offset"]))
        if text.startswith("id:") and len(text) > 3:
            return cls(text, "event", event_id=text[3:])
        if text.startswith("count:"):
            count = text[6:]
            if not (count.isascii() and count.isdigit()) or len(count) > 18:
                raise PositionError(f"{text!r}: count:N takes a whole number of records")
            return cls(text, "count", value=int(count))
        if text.startswith("s@"):
            return cls(text, "time", value=_time_ms(text[2:], text))
        if re.match(r"^\d{4}-\d{2}-\d{2}", text):
            return cls(text, "time", value=_time_ms(text, text))
        raise PositionError(f"{text!r} is not a position; use {FORMS}")


def time_ms(value: str) -> int:
    """Milliseconds since the epoch, given as such or as an ISO 8601 time (a time without a
    zone is UTC); ValueError for anything else."""
    if value.lstrip("-").isdigit():
        return int(value)
    moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return int((moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp() * 1000)


def _time_ms(value: str, text: str) -> int:
    """`time_ms` for a position (no sign: `-N` is no time here)."""
    try:
        if value.startswith("-"):
            raise ValueError(value)
        return time_ms(value)
    except ValueError:
        raise PositionError(f"{text!r}: {value!r} is neither epoch ms nor an ISO time") from None


def log_order(records: Iterable[LogRecord]) -> list[LogRecord]:
    """The records as they were appended: partitions merged by timestamp, each partition
    kept in offset order."""
    partitions: dict[tuple[int, int], list[LogRecord]] = {}
    for record in records:
        partitions.setdefault((LOG_ROLES.index(record.role), record.partition), []).append(record)
    ordered = [sorted(rows, key=lambda r: r.offset) for _, rows in sorted(partitions.items())]
    return list(heapq.merge(*ordered, key=lambda r: r.timestamp))


@dataclass
class Cut:
    """The log up to a position: its records in log order and the offsets they reflect."""

    position: str
    records: list[LogRecord]
    refused: set[tuple[str, int, int]] = field(default_factory=set)
    """The inputs the whole log dead-lettered (a dead letter comes after its input, maybe
    after the cut): replaying the cut must skip them too."""
    offsets: dict[str, int] = field(default_factory=dict)
    size: int | None = None
    """How many records the cut holds. Given only when `records` are some of them, those a
    question needs (a cut the log's index resolved, log_index.py); `offsets` and `latest`
    are then given too, not derived from `records`."""
    latest: int | None = None

    def __post_init__(self) -> None:
        if self.size is not None:
            return
        self.size = len(self.records)
        for record in self.records:
            self.offsets[f"{record.role.value}/{record.partition}"] = record.offset
        self.latest = max((r.event.event_time for r in self.records), default=None)

    @property
    def time(self) -> int | None:
        """The latest event time the cut holds: "now" for ages, derived from the log only."""
        return self.latest

    def as_of(self) -> dict[str, object]:
        return {
            "position": self.position,
            "records": self.size,
            "offsets": dict(sorted(self.offsets.items())),
        }


def cut(ordered: list[LogRecord], position: Position | str) -> Cut:
    """The prefix of the log (in log order) that `position` names; PositionError naming what
    exists if it names nothing in this log."""
    if isinstance(position, str):
        position = Position.parse(position)
    refused = dead_lettered(ordered)
    if position.kind == "end":
        return Cut(position.text, list(ordered), refused)
    if position.kind == "count":
        if position.value > len(ordered):
            raise PositionError(f"{position.text!r}: this log has {len(ordered)} records")
        return Cut(position.text, ordered[: position.value], refused)
    if position.kind == "time":
        return Cut(position.text, _until(ordered, position.value), refused)
    index = _index_of(ordered, position)
    return Cut(position.text, ordered[: index + 1], refused)


def _until(ordered: list[LogRecord], time: int) -> list[LogRecord]:
    """Each partition up to (not including) its first record appended after `time`: a
    partition is a sequence, and a later offset with an earlier timestamp (clocks of two
    producers) still came after."""
    stopped: set[tuple[TopicRole, int]] = set()
    kept = []
    for record in ordered:
        partition = (record.role, record.partition)
        if partition in stopped:
            continue
        if record.timestamp > time:
            stopped.add(partition)
            continue
        kept.append(record)
    return kept


def _index_of(ordered: list[LogRecord], position: Position) -> int:
    if position.kind == "event":
        found = [i for i, r in enumerate(ordered) if r.event.event_id == position.event_id]
        if not found:
            raise PositionError(
                f"no event {position.event_id!r} in this log ({len(ordered)} records; "
                "`jobledger history JOB` lists a job's events with their ids)"
            )
        if len(found) > 1:
            places = ", ".join(where(ordered[i]) for i in found)
            raise PositionError(
                f"{len(found)} records carry event id {position.event_id!r} ({places}): name "
                "one by its position"
            )
        return found[0]
    key = (position.role, position.partition)
    held = [(r.offset, i) for i, r in enumerate(ordered) if (r.role.value, r.partition) == key]
    if not held:
        partitions = sorted({where(r).split("@")[0] for r in ordered})
        raise PositionError(
            f"{position.text!r}: this log has no records in {position.role}/{position.partition} "
            f"(partitions with records: {', '.join(partitions) or 'none'})"
        )
    # an offset that holds no record (a transaction marker, an aborted record) is the next one
    found = next((i for offset, i in held if offset >= position.offset), None)
    if found is None:
        raise PositionError(
            f"{position.text!r}: past the last record of {position.role}/{position.partition} "
            f"(it holds offsets {held[0][0]}-{held[-1][0]})"
        )
    return found
