"""Processes listening on loopback: ports, liveness, and the error a local broker raises."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time

LOOPBACK = "127.0.0.1"


class BrokerError(RuntimeError):
    """A local broker cannot be found, installed, started or reached."""


def port_is_free(port: int) -> bool:
    """Whether a server can listen on `port` now, as Kafka binds (SO_REUSEADDR: a connection
    of a broker just stopped, left in TIME_WAIT, does not hold the port; a listener does)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def port_answers(port: int) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=0.5):
            return True
    except OSError:
        return False


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


KILLED_GONE_S = 5.0
"""How long a process SIGKILLed may take to be gone (its memory freed, its parent told)."""


def terminate_all(pids: tuple[int, ...], grace_s: float) -> None:
    """SIGTERM to every one at once (the nodes of a cluster: stopped one after another, the
    last ones wait for a quorum that is gone), then SIGKILL what is left after `grace_s`, and
    return once they are gone: the caller says "stopped" next, and a port or a data folder
    still held would make a new start fail."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while any(pid_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in pids:
        if pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + KILLED_GONE_S
    while any(pid_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)


def terminate(pid: int, grace_s: float) -> None:
    """SIGTERM (a broker's controlled shutdown), then SIGKILL if it is still there after
    `grace_s`. For a process that is not this one's child (a detached broker)."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if pid_alive(pid):
        os.kill(pid, signal.SIGKILL)
