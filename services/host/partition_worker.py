"""One owned input partition as the host keeps it: its reducers, the producer that speaks
for it, and how far it has read, committed and snapshotted."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from confluent_kafka import Producer

from jobledger.schemas.topics import TopicRole

from ..control.driver import ReducerDriver


@dataclass
class PartitionWorker:
    """The reducers of one input partition and the producer that speaks for it."""

    role: TopicRole
    partition: int
    driver: ReducerDriver
    producer: Producer
    next_offset: int
    since_snapshot: int = 0
    processed: int = 0
    rebuilt_from_snapshot_at: int | None = None
    last_snapshot: float = field(default_factory=time.monotonic)
    uncommitted_since: float | None = None
    """When the oldest input processed but not yet committed was processed (it derived
    nothing, so redoing it after a crash changes nothing)."""
    committed_at: float = field(default_factory=time.monotonic)
    """When its last transaction committed (or it was rebuilt)."""
    rebuild_seconds: float = 0.0
    """How long rebuilding it took when it was taken over."""
    snapshot_bytes: int = 0
    """Size of the last snapshot it wrote (0: none since it was taken over)."""
    awaited: bool = False
    """A record a client waits on (`job_status.awaited_by_clients`) was read and not yet
    committed past: commit at once, not after the idle interval."""
    snapshot_forced: bool = False
    """A poisoned input was dead-lettered: its transaction snapshots the partition, so no
    rebuild reduces that input again (`poison.py`)."""
    snapshot_in_loop: bool = False
    """The child encoding its last snapshot failed (`snapshot_fork`): the next snapshot is
    due now, and encoded in the loop, where an encoding that raises poisons an input."""
    committed_offset: int = field(init=False)
    """The input offset its last transaction committed (where it was rebuilt to, at first)."""

    def __post_init__(self) -> None:
        self.committed_offset = self.next_offset
