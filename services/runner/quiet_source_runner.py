"""PySpark's streaming source runner, without a trace when the JVM it serves goes away.

The runner's Kafka source (`kafka_source.py`) is a Python data source: Spark's driver keeps
one Python process for the query, `pyspark.sql.streaming.python_streaming_source_runner`,
and asks it for offsets and partitions over a socket. When the query stops (the runner's
SIGTERM, the end of the demo), the JVM closes that socket; the process, waiting to read the
next call, tries to report the closed socket back over it, and the broken pipe ends it with a
three-part trace in the runner's log. The reader is stopped by then (PySpark's own `finally`)
and there is no one left to tell, so it ends quietly with status 1 instead. An error while
the JVM listens is reported to it as before, and anything else is raised as before.
`worker_python.py`'s script starts this module in its place.
"""

from __future__ import annotations

import os
import runpy
import sys

MODULE = "pyspark.sql.streaming.python_streaming_source_runner"


def main() -> None:
    try:
        runpy.run_module(MODULE, run_name="__main__", alter_sys=True)
    except (BrokenPipeError, ConnectionResetError):
        sys.stderr.flush()
        # not `sys.exit`: finalising the closed socket's file would print its flush error
        os._exit(1)


if __name__ == "__main__":
    main()
