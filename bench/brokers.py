"""The broker a benchmark runs against: the one `--bootstrap` names, or an Apache Kafka of its
own on a free loopback port, stopped (with time for a controlled shutdown) when it ends."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from jobledger.services.local import broker


@contextmanager
def bench_broker(bootstrap: str | None, workdir: Path) -> Iterator[str]:
    """The bootstrap address of `bootstrap`'s broker, or of one started under `workdir`."""
    if bootstrap is not None:
        yield bootstrap
        return
    port = broker.free_port()
    proc = broker.spawn(port, workdir, detach=False)
    try:
        yield f"{broker.LOOPBACK}:{port}"
    finally:
        broker.stop_child(proc)
