"""A stop signal is heard at once while the main thread waits inside a librdkafka call (a
commit on a broker that does not answer): Python would run its handler only when the call
returns, so a stop deadline kept by that handler was no deadline (`stop_signals`)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from jobledger.services.local.loopback import free_port

CHILD = """
import time
from confluent_kafka import Consumer
from jobledger.services.host.stop_signals import on_stop_signal

on_stop_signal(lambda n: print(f"heard {n} {time.monotonic():.3f}", flush=True))
consumer = Consumer({"bootstrap.servers": "127.0.0.1:%d", "group.id": "g", "log_level": 0})
print(f"blocking {time.monotonic():.3f}", flush=True)
try:
    consumer.list_topics(timeout=%d)
except Exception:
    pass
print(f"returned {time.monotonic():.3f}", flush=True)
"""
BLOCK_S = 8


def test_sigterm_is_heard_while_the_main_thread_is_inside_a_blocking_librdkafka_call():
    nobody = free_port()  # nothing listens: the call waits its whole timeout
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD % (nobody, BLOCK_S)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline().startswith("blocking ")
        time.sleep(0.5)
        sent = time.monotonic()
        child.send_signal(signal.SIGTERM)
        out = child.communicate(timeout=BLOCK_S + 30)[0].split()
    finally:
        child.kill()
    heard, returned = out.index("heard"), out.index("returned")
    assert out[heard + 1] == str(int(signal.SIGTERM))
    # heard while the call still waited (it returns BLOCK_S after it began), not after it
    assert heard < returned
    assert float(out[returned + 1]) - float(out[heard + 2]) > BLOCK_S / 2
    assert float(out[heard + 2]) - sent < BLOCK_S / 2
