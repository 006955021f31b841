"""`jobledger ui` as the tests run it: the real command (`python -m jobledger.cli ui`) over a
golden log, on a free loopback port it prints, stopped when the test is done."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .processes import stop_process

STARTUP_S = 60.0


@contextmanager
def ui_server(log: Path | None, env: dict[str, str] | None = None) -> Iterator[str]:
    """The base URL (`http://127.0.0.1:PORT/`) of `jobledger ui --port 0` over the export
    `log`, or (None) over the broker `env` names."""
    source = ["--file", str(log)] if log is not None else []
    process = subprocess.Popen(
        [sys.executable, "-m", "jobledger.cli", "ui", *source, "--port", "0"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env,
    )  # fmt: skip
    try:
        yield _announced_url(process)
    finally:
        stop_process(process, 10)
        process.stderr.close()


def _announced_url(process: subprocess.Popen) -> str:
    """The URL the server prints once it listens; the server's own words if it stops first.
    Bounded: a line is read only once select() says one is there."""
    import selectors

    deadline = time.monotonic() + STARTUP_S
    selector = selectors.DefaultSelector()
    selector.register(process.stderr, selectors.EVENT_READ)
    said = []
    while time.monotonic() < deadline:
        if not selector.select(timeout=max(0.0, deadline - time.monotonic())):
            break
        line = process.stderr.readline()
        if not line:
            raise RuntimeError(f"jobledger ui stopped: {''.join(said)}")
        said.append(line)
        if found := re.search(r"on (http://\S+/) over", line):
            return found[1]
    raise TimeoutError(f"jobledger ui did not listen within {STARTUP_S:g} s: {''.join(said)}")
