"""The runner's Prometheus metrics (`jobledger runner --metrics-port`): what only the runner
sees, its micro-batches and the Spark jobs that run its tasks. What the tasks did is in the
log, and in the services' metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram

SECONDS = (0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)


class RunnerMetrics:
    """One runner's metrics, in a registry of its own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.micro_batch_seconds = Histogram(
            "jobledger_runner_micro_batch_seconds",
            "how long the driver's foreachBatch took over one micro-batch (reading the "
            "deployments and handing them to Spark)", buckets=SECONDS, registry=self.registry,
        )  # fmt: skip
        self.spark_job_seconds = Histogram(
            "jobledger_runner_spark_job_seconds",
            "how long one Spark job running a group of a job's tasks took",
            buckets=SECONDS, registry=self.registry,
        )  # fmt: skip
