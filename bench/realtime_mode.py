"""Spark's Real-Time Mode against the runner's query: a minimal reproduction of its refusals.

    python bench/realtime_mode.py

The runner's query reads the TaskExecutor topic through jobledger's Python Kafka source and
hands each micro-batch to `foreachBatch` on the driver, which starts the Spark jobs that run
the tasks (and cancels them). Under `trigger(realTime=...)` Spark refuses that sink when the
query starts (`foreachBatch` is not on Real-Time Mode's sink allowlist) and, with a `foreach`
writer instead, refuses the Python source once the query runs (only sources implementing
`SupportsRealTimeMode`, such as Spark's JVM Kafka connector, may feed it). Both refusals
come before any record is read, so no broker is needed. With Spark's own connector and a
Python `foreach` writer Real-Time Mode does run, but rows reach Python only when its batch
(5 s at least) ends (`../shared/reference/spark-latency.md`): slower than a micro-batch.
Each shape prints one line: refused at start, refused while running, or running.
"""

from __future__ import annotations

import argparse
import tempfile
import time

from jobledger.services.runner.kafka_source import FORMAT
from jobledger.services.runner.session import spark_session


def shapes(spark):
    """(name, the query's writer) for each shape the runner could take."""

    def reader(read_on_driver: bool):
        return (
            spark.readStream.format(FORMAT)
            .option("kafka.bootstrap.servers", "127.0.0.1:9")  # never reached
            .option("subscribe", "jobledger.taskexecutor")
            .option("startingOffsets", "latest")
            .option("readOnDriver", str(read_on_driver).lower())
            .load()
            .select("value")
            .writeStream.outputMode("update")
            .option("checkpointLocation", tempfile.mkdtemp(prefix="jobledger-rtm-"))
        )

    for read_on_driver in (True, False):
        where = "driver" if read_on_driver else "executors"
        yield (f"foreachBatch, Python source read on the {where}",
               reader(read_on_driver).foreachBatch(lambda batch, batch_id: None))  # fmt: skip
        yield (f"foreach writer, Python source read on the {where}",
               reader(read_on_driver).foreach(lambda row: None))  # fmt: skip


def first_line(error: BaseException | None) -> str:
    return str(error).strip().partition("\n")[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", default="5 seconds", help="Real-Time Mode's batch duration")
    parser.add_argument("--wait-s", type=float, default=8.0, help="how long a started query runs")
    args = parser.parse_args()
    spark = spark_session("local[2]", "jobledger-realtime-mode")
    spark.sparkContext.setLogLevel("OFF")
    for name, writer in shapes(spark):
        try:
            query = writer.trigger(realTime=args.batch).start()
        except Exception as exc:
            print(f"{name}: refused at start: {first_line(exc)}")
            continue
        deadline = time.monotonic() + args.wait_s
        while query.isActive and time.monotonic() < deadline:
            time.sleep(0.2)
        if query.isActive:
            print(f"{name}: running")
            query.stop()
        else:
            print(f"{name}: refused while running: {first_line(query.exception())}")
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
