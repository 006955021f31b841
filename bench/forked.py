"""One measured round in a forked child of its own, shared by the benchmarks that repeat a
round (`replay.py`, `scheduling.py`).

Each round then starts from the same heap (what the parent built before forking, and little
else) and pays for none of another round's garbage: measured at 1M events, the all-core
replay of a process that had replayed on one core and kept that state took 16-22 s, against
14-15 s in a process that had kept nothing; a freed state's reference cycles lingered until a
full collection and swelled the next round's heap.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any


def in_fork(measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """`measure()` run in a forked child, its JSON answer read back; a round that raised or
    died raises here, naming why."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: measure, answer, exit without running the parent's cleanup
        os.close(read)
        try:
            answer, status = measure(), 0
        except BaseException as exc:  # reported to the parent, which raises it
            answer, status = {"error": repr(exc)}, 1
        with os.fdopen(write, "wb") as out:
            out.write(json.dumps(answer).encode())
        os._exit(status)
    os.close(write)
    with os.fdopen(read, "rb") as reply:
        text = reply.read()
    _, status = os.waitpid(pid, 0)
    answer = json.loads(text) if text else {"error": f"the child died (wait status {status})"}
    if status or "error" in answer:
        raise RuntimeError(f"a measured round failed: {answer.get('error', status)}")
    return answer
