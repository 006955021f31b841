"""How long the log's topics may keep their records: as long as a restart needs, no longer.

A restart rebuilds each input partition from its latest snapshot plus the records after it
(rebuild.py), so the records a restart needs are those after the latest snapshot. The
services snapshot a partition once `snapshot_interval_s` has passed with inputs since its
last snapshot, whether or not more inputs come (transaction_loop.py), so while they run no
record waits longer than that interval, plus a poll and a transaction, for a snapshot that
covers it. A large state's snapshot is encoded by a forked child and written a few
transactions after the offset it covers (snapshot_fork.py): it may wait a third of an
interval for another partition's child, its child may take another third, and a child that
fails is encoded in the loop, so the wait is at most 1.7 intervals plus an encoding. A
retention below twice the interval could delete a record before that; one of at least
twice the interval cannot while the services run (how long they may be stopped is the
operator's margin on top: docs/operations/retention.md).

Kafka deletes whole closed segments whose newest record is older than `retention.ms`, so a
record is kept at least that long: the bound holds whatever the segment settings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SAFETY_FACTOR = 2
"""Retention must be at least this many snapshot intervals: one for the interval itself,
one for the poll, the transaction, a forked child's encoding (at most two thirds of an
interval) and a partition's move to another instance."""

RETENTION_CONFIG = "retention.ms"

_DURATION = re.compile(r"^(\d+)(ms|s|m|h|d)?$")
_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def duration_ms(text: str) -> int:
    """A retention as written on a command line: `-1` (forever), milliseconds, or a number
    with a unit (`500ms`, `30s`, `10m`, `12h`, `7d`); ValueError for anything else."""
    if text.strip() == "-1":
        return -1
    match = _DURATION.match(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is no duration (-1, or a number with ms, s, m, h or d)")
    return int(match.group(1)) * _UNIT_MS[match.group(2) or "ms"]


def minimum_retention_ms(snapshot_interval_s: float) -> int | None:
    """The shortest retention a restart is safe with under this snapshot interval; None
    where no retention is (an interval of 0 snapshots by input count alone, so a quiet
    partition's records may wait for a snapshot forever)."""
    if snapshot_interval_s <= 0:
        return None
    return int(SAFETY_FACTOR * snapshot_interval_s * 1000)


def retention_refusal(retention_ms: int, snapshot_interval_s: float) -> str | None:
    """Why a retention of `retention_ms` (-1: forever) is unsafe for services snapshotting
    every `snapshot_interval_s`, or None where it is safe."""
    if retention_ms < 0:
        return None
    needed = minimum_retention_ms(snapshot_interval_s)
    if needed is None:
        return (
            f"a retention of {retention_ms} ms deletes records no snapshot may ever cover: the "
            "services snapshot by input count alone (--snapshot-interval-s 0), so a quiet "
            "partition's last records are needed by every restart; give the services a "
            "snapshot interval, or keep the records forever (-1)"
        )
    if retention_ms < needed:
        return (
            f"a retention of {retention_ms} ms is shorter than the {needed} ms the snapshots "
            f"guarantee ({SAFETY_FACTOR} x the {snapshot_interval_s:g} s snapshot interval): "
            "the broker could delete records no snapshot covers yet, and a restart would "
            "rebuild without them"
        )
    return None


@dataclass(frozen=True)
class PartitionRetention:
    """What one partition of the log keeps, and what a restart of its owner needs of it."""

    topic: str
    partition: int
    retention_ms: int | None
    """The topic's `retention.ms` (-1: forever; None: not known)."""
    oldest_held: int
    end: int
    """The next offset the partition will write."""
    oldest_needed: int | None
    """The first offset a restart reads (None: a restart reads none of this topic)."""
    why: str

    @property
    def lost(self) -> bool:
        """Whether records a restart needs are gone already."""
        return self.oldest_needed is not None and not within_held(self.oldest_needed,
                                                                  self.oldest_held)  # fmt: skip


MARKER_OFFSETS = 1
"""Offsets after a snapshot's that may hold no record: the commit marker of the transaction
whose inputs the snapshot reflects takes the offset after its last input, and the broker may
delete the segment holding that marker alone."""


def within_held(needed: int, oldest_held: int) -> bool:
    """Whether a partition whose oldest held offset is `oldest_held` still holds every
    record from `needed` on (from its beginning, when `needed` is 0: no marker before it)."""
    return oldest_held <= (needed + MARKER_OFFSETS if needed else 0)


def oldest_needed(snapshot_at: int | None, committed: int | None) -> tuple[int, str]:
    """The first offset of an input partition its owner's restart reads, and why: the offset
    its latest snapshot reflects, when the services have committed that far (rebuild.py's
    rule), else the beginning."""
    if snapshot_at is not None and committed is not None and snapshot_at <= committed:
        return snapshot_at, f"after snapshot@{snapshot_at}"
    if snapshot_at is None:
        return 0, "no snapshot yet: a restart replays from the beginning"
    return 0, f"snapshot@{snapshot_at} is past the committed offset: a restart replays all"
