"""Child processes the tests start (a Spark master or worker, a schema registry)."""

from __future__ import annotations

import subprocess


def stop_process(process: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM, `grace_s` to exit, then SIGKILL."""
    process.terminate()
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)
