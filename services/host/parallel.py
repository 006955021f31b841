"""Replaying partitions side by side, one group of partitions per worker process: `jobledger
replay --jobs`, and a service rebuilding the partitions it takes over
(`rebuild.Rebuilder.rebuild_all`).

Partitions are independent by design (design rule D-4): each has its own reducers and its
own dedup window, so replaying groups of them in separate processes and putting the drivers
together gives the state one process gives (`PartitionedDriver.merged()` is the same either
way). Threads would not help: the reducers are pure Python and hold the interpreter lock.

The workers are forked, not spawned: a spawned worker gets its records by pickling, and
pickling a decoded event and reading it back costs ~45 µs (measured, 100k events of
bench/replay.py), four times what replaying it costs. A forked worker already holds the log the
parent read and sends back only the drivers of its partitions. Forking a process that runs
other threads can copy a lock some thread holds, so a parent with Python threads running (a
service hosted in a thread, a live consumer's helper) replays in one process instead. The
Kafka clients' own native threads do not count: a worker only decodes and reduces what the
parent read, and never calls a client it inherited. A worker that dies is a `ReplayWorkerFailed`
naming what happened, never a wait without end: the pool notices a dead worker and fails.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TypeVar

from .gc_policy import bulk_replay

K = TypeVar("K")
R = TypeVar("R")


class ReplayWorkerFailed(RuntimeError):
    """A worker process of a parallel replay died or failed; the message says how."""


def default_jobs() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def groups(sizes: dict[K, int], jobs: int) -> list[list[K]]:
    """The keys split into at most `jobs` groups of about equal total size: the largest first,
    each to the group with the least so far (a partition is never split)."""
    loads: list[tuple[int, list[K]]] = [(0, []) for _ in range(max(1, min(jobs, len(sizes))))]
    for key in sorted(sizes, key=lambda k: -sizes[k]):
        n = min(range(len(loads)), key=lambda i: loads[i][0])
        loads[n] = (loads[n][0] + sizes[key], [*loads[n][1], key])
    return [keys for _, keys in loads if keys]


def can_fork() -> bool:
    """Whether forking is safe here: the platform has it and no other thread is running."""
    return "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1


_work: Callable[[list], dict] | None = None
"""The group replay of the current parallel run, inherited by the forked workers."""


def _run_group(keys: list) -> dict:
    assert _work is not None, "a replay worker started outside run_groups"
    with bulk_replay():
        return _work(keys)


def run_groups(sizes: dict[K, int], work: Callable[[list[K]], dict[K, R]], jobs: int) -> dict[K, R]:
    """`work` over every key, the keys split into groups (`groups`): the first run here, each
    other by a forked worker when `jobs` > 1 and forking is safe, else all here; the union of
    the groups' answers (this process works too, and its group's drivers need no pickling)."""
    global _work
    split = groups(sizes, jobs)
    if len(split) <= 1 or not can_fork():
        with bulk_replay():
            return work(list(sizes))
    _work = work
    results: dict[K, R] = {}
    try:
        with (
            bulk_replay(),
            ProcessPoolExecutor(
                len(split) - 1, mp_context=multiprocessing.get_context("fork")
            ) as pool,
        ):
            answers = [pool.submit(_run_group, keys) for keys in split[1:]]
            results.update(work(split[0]))
            for answer in answers:
                results.update(answer.result())
    except BrokenProcessPool as exc:
        raise ReplayWorkerFailed(
            f"a replay worker process died ({exc}); replay with --jobs 1 to see the error"
        ) from exc
    finally:
        _work = None
    return results
