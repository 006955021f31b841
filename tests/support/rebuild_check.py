"""Run by tests/host/test_parallel_rebuild.py in a fresh interpreter, where no other thread runs
(the test process has had Spark's and the services' threads since earlier tests, and a
process with threads never forks): rebuilds every partition of the topics under PREFIX one
by one, then side by side in two forked workers (each dying at once with `--worker-dies`),
and prints whether the states are equal, the processes the side-by-side rebuild used and
its log.

    python -m tests.support.rebuild_check BOOTSTRAP PREFIX [--worker-dies]
"""

from __future__ import annotations

import io
import json
import logging
import os
import sys

from confluent_kafka import TopicPartition

from jobledger.services.host import rebuild
from jobledger.services.host.parallel import can_fork
from jobledger.services.host.transaction_loop import RuntimeConfig, ServiceRuntime
from jobledger.services.kafka_topics import partitions_of


def _rebuilt(runtime: ServiceRuntime, committed: list[TopicPartition]) -> dict:
    producers = {(tp.topic, tp.partition): None for tp in committed}
    workers = runtime.rebuilder.rebuild_all(committed, producers)
    return {
        key: (w.role, w.next_offset, w.rebuilt_from_snapshot_at, w.driver)
        for key, w in sorted(workers.items())
    }


def main(bootstrap: str, prefix: str, worker_dies: bool) -> dict:
    runtime = ServiceRuntime(bootstrap, prefix, RuntimeConfig(timer_interval_ms=0))
    log = io.StringIO()
    handler = logging.StreamHandler(log)
    logging.getLogger("jobledger.runtime").addHandler(handler)
    logging.getLogger("jobledger.runtime").setLevel(logging.INFO)
    try:
        runtime._check_partition_counts()
        committed = [
            TopicPartition(topic, p, runtime.rebuilder.reader.get_watermark_offsets(
                TopicPartition(topic, p), timeout=10)[1])
            for topic in runtime.roles for p in partitions_of(runtime.consumer, topic)
        ]  # fmt: skip
        runtime.rebuilder.jobs = lambda: 1
        one_by_one = _rebuilt(runtime, committed)
        runtime.rebuilder.jobs = lambda: 2
        rebuild.PARALLEL_REBUILD_RECORDS = 0
        if worker_dies:
            parent, reduce_tail = os.getpid(), runtime.rebuilder.reduce_tail
            runtime.rebuilder.reduce_tail = lambda *a: (
                reduce_tail(*a) if os.getpid() == parent else os._exit(9)
            )
        log.truncate(0)
        forkable = can_fork()
        side_by_side = _rebuilt(runtime, committed)
    finally:
        runtime.consumer.close()
        runtime.rebuilder.reader.close()
    return {
        "forkable": forkable,
        "partitions_with_records": sum(tp.offset > 0 for tp in committed),
        "job_masters": sum(len(state[3].job_masters) for state in side_by_side.values()),
        "equal": side_by_side == one_by_one,
        "log": log.getvalue(),
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], "--worker-dies" in sys.argv[3:])))
