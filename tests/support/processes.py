"""Child processes the tests start (a Spark master or worker, a schema registry, a runner),
and signals to a process with everything it started."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path


def stop_process(process: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM, `grace_s` to exit, then SIGKILL."""
    process.terminate()
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


def process_tree(pid: int) -> list[int]:
    """`pid` and every process descended from it, parents first, as /proc says now. A
    process group would not do: Spark's Python daemon puts itself and the Python workers that
    run a runner's tasks in a group of their own."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # the command name, in parentheses, may hold spaces: the fields follow its end
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # ended while we looked
        children.setdefault(parent, []).append(int(stat.parent.name))
    tree, queue = [], [pid]
    while queue:
        tree.append(queue.pop(0))
        queue += children.get(tree[-1], [])
    return tree


def _signal(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):  # ended meanwhile
            os.kill(pid, sig)


def freeze_tree(pid: int) -> list[int]:
    """SIGSTOP `pid` and its descendants, looking again until no new one appears (one not
    stopped yet may have forked meanwhile); the pids stopped, for `thaw_tree`."""
    stopped: list[int] = []
    while new := [p for p in process_tree(pid) if p not in stopped]:
        _signal(new, signal.SIGSTOP)
        stopped += new
    return stopped


def thaw_tree(pids: list[int]) -> None:
    _signal(pids, signal.SIGCONT)


def kill_tree(pid: int) -> None:
    """SIGKILL `pid` and everything it started, as if its machine died: frozen first, so
    that no descendant outlives it orphaned (an orphan leaves the tree) or acts in between."""
    _signal(freeze_tree(pid), signal.SIGKILL)


def leave_transaction_open(bootstrap: str, topic: str, transactional_id: str) -> None:
    """A process that writes `b"dangling"` to `topic` in a transaction under
    `transactional_id` and dies before it ends it, as a killed worker does."""
    child = (
        "import os\nfrom confluent_kafka import Producer\n"
        f"p = Producer({{'bootstrap.servers': '{bootstrap}', "
        f"'transactional.id': '{transactional_id}'}})\n"
        "p.init_transactions(30)\np.begin_transaction()\n"
        f"p.produce('{topic}', value=b'dangling')\np.flush(10)\nos._exit(9)\n"
    )
    subprocess.run([sys.executable, "-c", child], timeout=60, check=False)
