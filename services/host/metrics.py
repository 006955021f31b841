"""The services' Prometheus endpoint (`services run --metrics-port`): Flink's metrics from the
reducers of the owned partitions, and the host's own (lag, commits, dead letters, rebuilds).

The reducers' metrics (`control/metrics.py`) are read in the loop's thread, never in the HTTP
server's: a scrape asks, and the loop answers at its next step, after committing what it has
processed (`ServiceRuntime.step`), so every number is what `replay` says at the committed
offsets, and no reducer is read while the loop changes it. A loop that does not answer within
`ANSWER_TIMEOUT_S` (a broker it waits on) gets the last answer served again, with
`jobledger_services_metrics_age_seconds` saying how old it is: a scrape never hangs.

The host's own, per owned partition: the consumer lag (the partition's high watermark less the
loop's position, so 0 once it has read everything, transaction markers included), the age of
its last commit, the seconds its last rebuild took, the size of its last snapshot; for all:
the transactions' commit latency, decisions and dead letters (by kind) as counters.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator

from confluent_kafka import Consumer, KafkaException, TopicPartition
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from jobledger.schemas.topics import TopicRole

from ..control import metrics as flink
from .partition_worker import PartitionWorker

ANSWER_TIMEOUT_S = 2.0
COMMIT_BUCKETS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 20.0)


def flink_name(metric: flink.Metric) -> str:
    """The name Flink's Prometheus reporter gives it: `flink_<scope>_<name>`, dots as `_`."""
    return f"flink_{metric.scope.replace('.', '_')}_{metric.name}"


def families(metrics: Iterable[flink.Metric]) -> list[Metric]:
    """Prometheus families of `metrics`, one per name, its samples labelled by owner."""
    found: dict[str, Metric] = {}
    for metric in metrics:
        name = flink_name(metric)
        family = found.get(name)
        if family is None:
            kind = CounterMetricFamily if metric.counter else GaugeMetricFamily
            labels = [key for key, _ in metric.labels]
            family = found[name] = kind(name, metric.help, labels=labels)
        family.add_metric([value for _, value in metric.labels], metric.value)
    return list(found.values())


class ServiceMetrics:
    """One service instance's metrics, in a registry of its own (several instances may share a
    process: the tests', the demo's)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.commit_seconds = Histogram(
            "jobledger_services_commit_latency_seconds",
            "how long a partition's transaction took to commit", ["role"],
            buckets=COMMIT_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.decisions = Counter(
            "jobledger_services_decisions", "decisions committed", ["role"],
            registry=self.registry,
        )  # fmt: skip
        self.dead_letters = Counter(
            "jobledger_services_dead_letters", "inputs dead-lettered, by why", ["kind"],
            registry=self.registry,
        )  # fmt: skip
        self._wanted = threading.Event()
        self._answered = threading.Condition()
        self._answer: list[Metric] = []
        self._answered_at: float | None = None
        self.registry.register(self)

    def collect(self) -> Iterator[Metric]:
        """What the loop answers (the HTTP server's thread asks)."""
        with self._answered:
            asked = time.monotonic()
            self._wanted.set()
            self._answered.wait_for(
                lambda: self._answered_at is not None and self._answered_at >= asked,
                ANSWER_TIMEOUT_S,
            )  # fmt: skip
            answer, at = self._answer, self._answered_at
        yield from answer
        age = GaugeMetricFamily(
            "jobledger_services_metrics_age_seconds",
            "how old the reducers' numbers are (the loop answers each scrape; -1: never yet)",
        )  # fmt: skip
        age.add_metric([], -1.0 if at is None else time.monotonic() - at)
        yield age

    def wanted(self) -> bool:
        return self._wanted.is_set()

    def answer(
        self, workers: Iterable[PartitionWorker], consumer: Consumer, topics: dict,
        now_ms: int,
    ) -> None:  # fmt: skip
        """Compute the reducers' and the partitions' numbers (in the loop's thread, with
        everything processed committed; `topics`: role -> topic name) and hand them to the
        waiting scrape."""
        self._wanted.clear()
        answer = families(reducer_metrics(workers, now_ms))
        answer += partition_families(workers, consumer, topics)
        with self._answered:
            self._answer, self._answered_at = answer, time.monotonic()
            self._answered.notify_all()


def reducer_metrics(workers: Iterable[PartitionWorker], now_ms: int) -> list[flink.Metric]:
    """Flink's metrics of the owned partitions' reducers: the cluster's from the
    ResourceManager's partition, each job's from its JobMaster's."""
    metrics: list[flink.Metric] = []
    masters = []
    for worker in workers:
        driver = worker.driver
        if worker.role is TopicRole.RESOURCE_MANAGER:
            metrics += flink.resource_manager_metrics(driver.resource_manager, now_ms)
        elif worker.role is TopicRole.JOB:
            masters += driver.job_masters.values()
            for jm in driver.job_masters.values():
                metrics += flink.job_metrics(jm, now_ms)
    return [flink.running_jobs(masters), *metrics]


def partition_families(
    workers: Iterable[PartitionWorker], consumer: Consumer, topics: dict
) -> list[Metric]:
    """The host's numbers of each owned partition (`topics`: role -> topic name)."""
    labels = ["topic", "partition"]

    def gauge(name: str, text: str) -> GaugeMetricFamily:
        return GaugeMetricFamily(f"jobledger_services_{name}", text, labels=labels)

    lag = gauge("consumer_lag", "records of the partition not read yet")
    age = gauge("last_commit_age_seconds", "seconds since the partition last committed")
    rebuild = gauge("rebuild_seconds", "how long the partition's last rebuild took")
    snapshot = gauge("snapshot_bytes", "size of the partition's last snapshot (0: none yet)")
    now = time.monotonic()
    for worker in workers:
        topic = topics[worker.role]
        key = [topic, str(worker.partition)]
        tp = TopicPartition(topic, worker.partition)
        try:
            _, high = consumer.get_watermark_offsets(tp, cached=True)
            [position] = consumer.position([tp])
        except KafkaException:  # nothing fetched for it yet: its lag is not known, not 0
            pass
        else:
            if high >= 0:
                read = position.offset if position.offset >= 0 else worker.next_offset
                lag.add_metric(key, max(0, high - read))
        age.add_metric(key, now - worker.committed_at)
        rebuild.add_metric(key, worker.rebuild_seconds)
        snapshot.add_metric(key, worker.snapshot_bytes)
    return [lag, age, rebuild, snapshot]
