"""Large snapshots encoded off the transaction loop, by a forked child.

Encoding a snapshot is pure CPU in this process (`snapshot.encode`): at 100,000
TaskExecutors the ResourceManager's state is ~12 MB and ~1.6 s of a free core (seconds more
on a loaded one), and while the loop encoded it no partition of the instance decided. So a
partition whose last snapshot was large commits the transaction its snapshot came due in
without one, and then forks: the child is a copy-on-write image of the state exactly at the
offset just committed. It only encodes that state into an unlinked temporary file and exits
(`os._exit`: pure Python and fastavro; no librdkafka call, no logging, no lock another thread
may hold). The parent goes on deciding; a later step finds the child exited, reads the
bytes, and writes them, chunked under the offset they reflect, in the partition's next
transaction (`committer.py`). A rebuild from such a snapshot reduces the tail after its
offset, as after any snapshot: the few transactions between its offset and its writing are
in that tail.

One child at a time per process, never waited on: the parent looks with WNOHANG each step.
A child that fails, is killed, or outlives `deadline_s` is reaped (killed first) and the
partition's next snapshot is encoded in the loop, where an encoding that raises poisons an
input as it always did (`Committer.snapshot_refused`). A child whose partition was given up
or went back to its last commit is killed and its snapshot dropped, and so is one overtaken
by a snapshot written in the loop: a snapshot older than the latest may never be written
after it (compaction keeps each chunk index's latest record).
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import IO

from . import snapshot
from .partition_worker import PartitionWorker

log = logging.getLogger("jobledger.snapshot")

FORK_ABOVE_BYTES = 1_000_000
"""A partition whose last snapshot was at least this large is snapshotted by a child.
Measured in one process: a ResourceManager of 10,000 TaskExecutors is 1.2 MB, 0.12 s of a
free core to encode (0.26 s at load 16); of 100,000, 12.4 MB and 1.6 s; forking a 270 MB
process holds it 3-18 ms. Below this a snapshot costs the loop about a tenth of a second,
and a child's copied pages are not worth it."""
DEFAULT_DEADLINE_S = 60.0
"""How long a child may encode when snapshots are taken by input count alone."""


def deadline_s(snapshot_interval_s: float) -> float:
    """How long a child may encode under this snapshot interval: a third of it. A snapshot
    due waits at most that long for another partition's child (`Committer.overdue`), its own
    child runs at most that long, and one killed is encoded in the loop: so one is written
    within 1.7 intervals and an encoding of its input, inside the two intervals retention
    allows (services/host/retention.py)."""
    return snapshot_interval_s / 3 if snapshot_interval_s > 0 else DEFAULT_DEADLINE_S


@dataclass
class _Child:
    pid: int
    file: IO[bytes]
    worker: PartitionWorker
    next_offset: int
    started: float


@dataclass(frozen=True)
class Finished:
    """A child's snapshot, ready to write: the input offset it reflects and its bytes."""

    worker: PartitionWorker
    next_offset: int
    data: bytes


def can_fork() -> bool:
    """Whether this platform forks. Not `parallel.can_fork`, which also wants no other
    thread running: a service has librdkafka's and the metrics server's, and this child
    touches nothing they may hold (it encodes, writes a file and exits)."""
    return hasattr(os, "fork")


class ForkedSnapshots:
    """The one snapshot child of a service process, and the snapshot it finished."""

    def __init__(self, fork_bytes: int | None, deadline_s: float) -> None:
        self.fork_bytes = fork_bytes
        """Fork for a partition whose last snapshot was at least this large (None: never)."""
        self.deadline_s = deadline_s
        self._child: _Child | None = None
        self._finished: Finished | None = None

    def wanted(self, worker: PartitionWorker) -> bool:
        """Whether `worker`'s snapshot is for a child to encode: forking is possible here
        and its last snapshot was large."""
        wanted_from = self.fork_bytes
        return wanted_from is not None and can_fork() and worker.snapshot_bytes >= wanted_from

    @property
    def pid(self) -> int | None:
        """The running child's process id (None: no child runs)."""
        return None if self._child is None else self._child.pid

    def busy(self) -> bool:
        """A child is encoding, or its snapshot waits to be written."""
        return self._child is not None or self._finished is not None

    def start(self, worker: PartitionWorker) -> None:
        """Fork a child that encodes `worker`'s state at its `next_offset` (just committed)."""
        snapshot.warm()  # the schema and codecs built here, once, not in every child
        file = tempfile.TemporaryFile(prefix="jobledger-snapshot-")  # noqa: SIM115 (closed at reaping)
        pid = os.fork()
        if pid == 0:  # the child: never returns
            _encode_and_exit(worker, file)
        self._child = _Child(pid, file, worker, worker.next_offset, time.monotonic())

    def poll(self, owned: Iterable[PartitionWorker]) -> None:
        """Reap the child if it exited (its snapshot is then ready, or its partition is to
        snapshot in the loop); kill it if its partition is no longer owned as it was, or it
        outlived its deadline. A finished snapshot of a partition no longer owned is dropped."""
        owned = list(owned)
        finished = self._finished
        if finished is not None and not any(worker is finished.worker for worker in owned):
            self._finished = None
        child = self._child
        if child is None:
            return
        if not any(worker is child.worker for worker in owned):
            self._end(child, None)
            return
        pid, status = os.waitpid(child.pid, os.WNOHANG)
        if pid == 0:
            if time.monotonic() - child.started < self.deadline_s:
                return
            self._end(child, f"still encoding after {self.deadline_s:g} s: killed")
            return
        self._child = None
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            child.file.close()
            self._failed(child, f"exited with {code}" if code > 0 else f"killed by signal {-code}")
            return
        child.file.seek(0)
        data = child.file.read()
        child.file.close()
        self._finished = Finished(child.worker, child.next_offset, data)

    def ready(self, worker: PartitionWorker) -> bool:
        """Whether `worker`'s finished snapshot waits to be written."""
        return self._finished is not None and self._finished.worker is worker

    def take(self, worker: PartitionWorker) -> Finished | None:
        """`worker`'s finished snapshot, to write in its transaction now (None: none)."""
        if not self.ready(worker):
            return None
        finished, self._finished = self._finished, None
        return finished

    def drop(self, worker: PartitionWorker) -> None:
        """Kill `worker`'s child and forget its snapshot: the loop snapshots it now, and an
        older snapshot may not follow."""
        if self._child is not None and self._child.worker is worker:
            self._end(self._child, None)
        if self._finished is not None and self._finished.worker is worker:
            self._finished = None

    def close(self) -> None:
        """At stop: the child killed and reaped."""
        if self._child is not None:
            self._end(self._child, None)
        self._finished = None

    def _end(self, child: _Child, failure: str | None) -> None:
        self._child = None
        os.kill(child.pid, signal.SIGKILL)
        os.waitpid(child.pid, 0)  # a SIGKILLed child that only computes dies at once
        child.file.close()
        if failure is not None:
            self._failed(child, failure)

    def _failed(self, child: _Child, why: str) -> None:
        worker = child.worker
        worker.snapshot_in_loop = True
        log.warning("%s/%d: the child encoding its snapshot at offset %d %s; the snapshot is "
                    "encoded in the loop instead", worker.role.value, worker.partition,
                    child.next_offset, why)  # fmt: skip


def _encode_and_exit(worker: PartitionWorker, file: IO[bytes]) -> None:
    """The child's whole life: encode, write, exit; 0 only if every byte was written. Stop
    signals end it at once (the parent's handlers are for the parent's loop)."""
    code = 1
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        gc.disable()  # a collection would walk, and so copy, every page of the state
        data = snapshot.encode(snapshot.Snapshot(worker.driver, worker.next_offset))
        view = memoryview(data)
        while view:
            view = view[os.write(file.fileno(), view) :]
        code = 0
    finally:
        os._exit(code)
