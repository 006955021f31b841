"""PySpark's Python worker daemon, without a trace when the JVM it serves goes away.

The runner's JVM closes its sockets to the Python workers as it stops (SIGTERM, the end of
the demo); a worker in the middle of reading or writing its task's data then fails with a
broken pipe, and PySpark's daemon prints that as a trace into the runner's log: four of them
after `kill %1 %2` in the walk-through (docs/getting-started/walk-through.md). Nothing is
lost by then (the runner reports
what it stopped, and the JVM is going), so the worker ends quietly instead. Any other
failure is PySpark's to report, as before. Spark starts this module in place of
`pyspark.daemon` for its jobs' workers (`spark.python.daemon.module`, `session.DEFAULT_CONF`),
and the workers' interpreter script does for the data source planners' daemons, which
Spark starts as `pyspark.daemon` whatever that setting says (`worker_python.py`).
"""

from __future__ import annotations

import socket

from pyspark import daemon

_worker = daemon.worker


def worker(sock: socket.socket, authenticated: bool) -> int:
    """`pyspark.daemon.worker`, ending with 1 (the daemon then closes the connection) where
    the JVM went away under it."""
    try:
        return _worker(sock, authenticated)
    except (BrokenPipeError, ConnectionResetError):
        return 1


daemon.worker = worker

if __name__ == "__main__":
    daemon.manager()
