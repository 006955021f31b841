"""The interpreter Spark starts the runner's Python workers with: this process's own, through
a two-line shell script that starts PySpark's worker daemon as `quiet_daemon`.

Why a script: Spark honours `spark.python.daemon.module` only for the workers of Spark jobs.
The Python data source's planner workers (`pyspark.sql.worker.lookup_data_sources`,
`create_data_source`, `plan_data_source_read`, which the runner's Kafka source uses as its
query starts) are started by Spark's planner runner under `pyspark.daemon` whatever that
setting says, and kept idle for reuse. When the JVM closes an idle one's socket (a minute
after its last use, and as Spark stops when the runner exits), the daemon's last flush to it
fails and PySpark's daemon prints a BrokenPipeError trace into the runner's log (one a
minute after the query started, one more at each stop). The script runs `quiet_daemon`
instead of `pyspark.daemon`, which ends such a worker quietly and reports anything else as
PySpark would. The streaming source's own process, which Spark starts directly, failed the
same way as a query stopped, and runs as `quiet_source_runner` for the same reason; every
other start (a worker module, spark-submit's) passes through unchanged.
It is written once per interpreter into jobledger's cache, named by its content.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import sys
from pathlib import Path

from ..home import cache

SCRIPT = """#!/bin/sh
if [ "$1" = -m ] && [ "$2" = pyspark.daemon ]; then
    shift 2
    exec {python} -m jobledger.services.runner.quiet_daemon "$@"
fi
if [ "$1" = -m ] && [ "$2" = pyspark.sql.streaming.python_streaming_source_runner ]; then
    shift 2
    exec {python} -m jobledger.services.runner.quiet_source_runner "$@"
fi
exec {python} "$@"
"""


def worker_python() -> Path:
    """The script for this interpreter, written if it is not there yet (atomically: several
    runners may start at once)."""
    text = SCRIPT.format(python=shlex.quote(sys.executable))
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = cache() / "spark-python" / f"python-{digest}"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.write_text(text)
        partial.chmod(0o755)
        partial.replace(path)
    return path
