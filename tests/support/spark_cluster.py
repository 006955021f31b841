"""A Spark standalone cluster on loopback for tests (services/local/spark_standalone.py, what
`jobledger cluster start` runs), stopped when the test ends."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from jobledger.services.local.spark_standalone import StandaloneCluster, start, stop_children

__all__ = ["StandaloneCluster", "children", "standalone_cluster"]


@contextmanager
def standalone_cluster(
    work: Path, workers: int = 2, cores: int = 1, memory: str = "2g", timeout_s: float = 120
) -> Iterator[StandaloneCluster]:
    """A master and `workers` workers, ready when this yields; every daemon stopped on exit."""
    cluster, daemons = start(work, workers, cores, memory, timeout_s=timeout_s)
    try:
        yield cluster
    finally:
        stop_children(daemons)


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (a worker's executors), from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found
