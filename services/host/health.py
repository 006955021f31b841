"""What the service says about its partitions now and then: where each is, how far behind
its input it is, and how fast it goes. An idle partition says nothing."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaException, TopicPartition

from .partition_worker import PartitionWorker

log = logging.getLogger("jobledger.runtime")


@dataclass
class HealthReport:
    interval_s: float
    last: float = field(default_factory=time.monotonic)

    def report_if_due(
        self, consumer: Consumer, workers: Mapping[tuple[str, int], PartitionWorker]
    ) -> None:
        elapsed = time.monotonic() - self.last
        if elapsed < self.interval_s:
            return
        self.last = time.monotonic()
        for (topic, partition), worker in sorted(workers.items()):
            lag = _lag(consumer, topic, partition, worker)
            if worker.processed or lag != "0":
                log.info(
                    "%s/%d at offset %d, lag %s, %.0f events/s", topic, partition,
                    worker.next_offset, lag, worker.processed / elapsed,
                )  # fmt: skip
            worker.processed = 0


def _lag(consumer: Consumer, topic: str, partition: int, worker: PartitionWorker) -> str:
    """Records behind the partition's high watermark, as the broker reports it."""
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=1)
    except KafkaException as exc:
        return f"unknown ({exc.args[0]})"
    return str(max(0, high - worker.next_offset))
