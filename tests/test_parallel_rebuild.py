"""A service's rebuild on all cores: the partitions it takes over are read by its one reader,
reduced side by side in forked processes, and come back in the state rebuilding them one by
one gives (over a real broker)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from jobledger.projections.log_file import read_export
from jobledger.schemas import EventSerde
from jobledger.services import runtime as runtime_module
from jobledger.services.kafka import append_events, partitions_of, transactional_producer
from jobledger.services.parallel import can_fork
from jobledger.services.runtime import RuntimeConfig, ServiceRuntime

from .golden_logs import LOGS

WORDCOUNT = next(p for p in sorted(Path(LOGS).glob("*.avro")) if "wordcount" in p.stem)


def _rebuilt(runtime: ServiceRuntime, committed: list[TopicPartition]) -> dict:
    workers = runtime._rebuild_all(committed, {(tp.topic, tp.partition): None for tp in committed})
    return {
        key: (w.role, w.next_offset, w.rebuilt_from_snapshot_at, w.driver)
        for key, w in sorted(workers.items())
    }


def _golden_log_rebuilt(cluster, monkeypatch, caplog, worker_dies: bool) -> tuple[dict, dict]:
    """The golden word count's partitions rebuilt one by one, then side by side (where a
    forked worker dies at once if `worker_dies`)."""
    producer = transactional_producer(cluster.bootstrap, "test")
    append_events(producer, cluster.prefix, [r.event for r in read_export(WORDCOUNT)], EventSerde())
    producer.flush(30)
    runtime = ServiceRuntime(cluster.bootstrap, cluster.prefix, RuntimeConfig(timer_interval_ms=0))
    try:
        runtime._check_partition_counts()
        committed = [
            TopicPartition(topic, p, runtime._reader.get_watermark_offsets(
                TopicPartition(topic, p), timeout=10)[1])
            for topic in runtime.roles for p in partitions_of(runtime.consumer, topic)
        ]  # fmt: skip
        assert sum(tp.offset > 0 for tp in committed) > 1, "records on several partitions"
        assert can_fork(), "the test runs the forked rebuild, not the one-process one"
        monkeypatch.setattr(runtime_module, "default_jobs", lambda: 1)
        one_by_one = _rebuilt(runtime, committed)
        monkeypatch.setattr(runtime_module, "default_jobs", lambda: 2)
        monkeypatch.setattr(runtime_module, "PARALLEL_REBUILD_RECORDS", 0)
        if worker_dies:
            parent, reduce_tail = os.getpid(), runtime._reduce_tail
            monkeypatch.setattr(runtime, "_reduce_tail", lambda *a: reduce_tail(*a)
                                if os.getpid() == parent else os._exit(9))  # fmt: skip
        with caplog.at_level(logging.INFO, logger="jobledger.runtime"):
            side_by_side = _rebuilt(runtime, committed)
    finally:
        runtime.consumer.close()
        runtime._reader.close()
    return one_by_one, side_by_side


@pytest.mark.broker
def test_partitions_rebuilt_side_by_side_are_those_rebuilt_one_by_one(cluster, monkeypatch, caplog):
    one_by_one, side_by_side = _golden_log_rebuilt(cluster, monkeypatch, caplog, False)
    assert "(processes: 2)" in caplog.text
    assert side_by_side == one_by_one
    assert any(state[3].job_masters for state in side_by_side.values())


@pytest.mark.broker
def test_a_rebuild_worker_that_dies_leaves_the_rebuild_to_the_service(cluster, monkeypatch, caplog):
    """A worker killed (out of memory, say) would be killed again at every start: the service
    rebuilds in its own process instead of stopping, to the same state."""
    one_by_one, side_by_side = _golden_log_rebuilt(cluster, monkeypatch, caplog, True)
    assert "a rebuild worker failed (a replay worker process died" in caplog.text
    assert "(processes: 1)" in caplog.text
    assert side_by_side == one_by_one
