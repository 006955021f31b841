"""How the transaction loop runs: batch sizes, snapshot cadence, clock, time-outs.

Apart from `transaction_loop.py` because its committing half (`committer.py`) reads it too,
and the loop imports the committer.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import kafka
from ..control.event_time import MAX_AHEAD_MS
from .snapshot_fork import FORK_ABOVE_BYTES


@dataclass(frozen=True)
class RuntimeConfig:
    batch_size: int = 500
    snapshot_every: int = 10_000
    """Snapshot a partition after this many inputs since its last snapshot (0: never)..."""
    snapshot_interval_s: float = 60.0
    """...or once this long has passed with inputs since the last one, whether more inputs
    come or not (0: never); what a safe retention is measured by (retention.py)."""
    snapshot_fork_bytes: int | None = FORK_ABOVE_BYTES
    """A partition whose last snapshot was at least this large is snapshotted by a forked
    child, off the loop (`snapshot_fork.py`; 0: every partition; None: none)."""
    timer_interval_ms: int = 1_000
    """Look this often for owners whose deadline has come, and append a TimerFired for each
    (0: no clock)."""
    health_interval_s: float = 10.0
    idle_commit_interval_s: float = 1.0
    """Inputs that derive nothing are committed with the next transaction that has output, or
    after this long: a transaction per tiny batch of such inputs (a task's end told to its
    TaskExecutor, a heartbeat) cost more than the reducing."""
    poll_timeout_s: float = 0.1
    """How long one poll waits for the first record when there is none; it returns as soon as
    one arrives, so this bounds only how late an idle service looks at its clock."""
    stop_deadline_s: float = 15.0
    """After SIGTERM, the current transaction may finish; a process still running this long
    after the signal (blocked on a broker that does not answer) exits at once, non-zero: its
    open transaction is aborted by the broker and the next owner redoes it."""
    session_timeout_ms: int = kafka.SESSION_TIMEOUT_MS
    client_grace_s: float = 5.0
    """How long past its own timeout a librdkafka call may take before it counts as stuck."""
    rebuild_silence_s: float = 60.0
    """A rebuild that hears nothing from the broker this long stops the service (it cannot
    own a partition whose log it cannot read) instead of waiting forever."""
    max_event_time_ahead_ms: int = MAX_AHEAD_MS
    """An input dated further ahead of its record's Kafka timestamp is dead-lettered (0: no
    bound). The record's timestamp, not this process's clock: it is in the log, so a rebuild
    admits what the live loop admitted; and the broker bounds it by its own clock."""
