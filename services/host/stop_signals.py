"""SIGTERM and SIGINT heard at once, even while the main thread is inside a librdkafka call.

Python runs a signal's handler in the main thread, between two bytecodes: while that thread
waits inside a C call (a `commit_transaction(60)` on a broker that does not answer), the
handler waits too, for as long as the call does. A stop deadline kept by the handler was
therefore no deadline at all. Python's C-level handler, though, writes each signal's number to
the wakeup fd (`signal.set_wakeup_fd`) the moment it arrives, whichever thread the kernel
picked: a thread of our own reads it there and acts at once. The Python-level handlers stay
installed (without them nothing reaches the wakeup fd) and call the same function when the
main thread gets to them; it must therefore be safe to call twice."""

from __future__ import annotations

import signal
import socket
import threading
from collections.abc import Callable

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def on_stop_signal(act: Callable[[int], None]) -> None:
    """Call `act(signum)` from a thread of its own as soon as SIGTERM or SIGINT arrives, and
    again from the main thread's handler when it runs. Call from the main thread."""
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda number, _frame: act(number))
    signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)

    def listen() -> None:
        with reader, writer:  # both kept open as long as signals may come
            while data := reader.recv(16):
                for signum in data:
                    if signum in STOP_SIGNALS:
                        act(signum)

    threading.Thread(target=listen, name="stop-signals", daemon=True).start()
