"""Flink's REST metric endpoints (`/jobmanager/metrics`, `/jobs/:jid/metrics`,
`/taskmanagers/metrics`, `/taskmanagers/:tmid/metrics`) over the log at any point.

The values are `control/metrics.py`'s, computed from the replayed reducers at the cut's
latest append time, so they are what `services run --metrics-port` served when the log
ended there. As Flink answers: without `get`, the ids of the metrics there are; with
`get=a,b`, those (unknown ids left out) with their values as strings; over several
TaskManagers, each asked metric aggregated (`agg=min,max,sum,avg,skew`, all by default) over
the TaskManagers named by `taskmanagers=` (all by default).
"""

from __future__ import annotations

from statistics import mean
from typing import Any

from pydantic import BaseModel, Field

from jobledger.services.control import metrics as flink

from .archived_execution_graph import ClusterArchive
from .task_managers import UnknownTaskManager

AGGREGATES = ("min", "max", "avg", "sum", "skew")


class MetricValue(BaseModel):
    """One metric (Flink's `Metric`): its id, and its value when asked for by `get`."""

    id: str
    value: str | None = Field(default=None, description="absent when only ids were asked for")


class AggregatedMetric(BaseModel):
    """One metric over several TaskManagers (Flink's `AggregatedMetric`)."""

    id: str
    min: float | None = None
    max: float | None = None
    avg: float | None = None
    sum: float | None = None
    skew: float | None = None


def _answer(metrics: list[flink.Metric], get: str | None) -> list[dict[str, Any]]:
    if get is None:
        return [{"id": m.name} for m in metrics]
    wanted = {name.strip() for name in get.split(",")}
    return [{"id": m.name, "value": _text(m.value)} for m in metrics if m.name in wanted]


def _text(value: float) -> str:
    """Flink's gauges of counts and milliseconds are longs: `3`, not `3.0`."""
    return str(int(value)) if float(value).is_integer() else str(value)


def jobmanager_metrics(cluster: ClusterArchive, get: str | None) -> list[dict[str, Any]]:
    driver = cluster.driver
    metrics = [
        m for m in flink.resource_manager_metrics(driver.resource_manager, cluster.now)
        if m.scope == flink.JOBMANAGER
    ]  # fmt: skip
    return _answer([*metrics, flink.running_jobs(list(driver.job_masters.values()))], get)


def job_metrics(cluster: ClusterArchive, job_id: str, get: str | None) -> list[dict[str, Any]]:
    cluster.job(job_id)  # UnknownJob (a 404) for a job the cut does not hold
    return _answer(flink.job_metrics(cluster.driver.job_masters[job_id], cluster.now), get)


def _per_task_manager(cluster: ClusterArchive) -> dict[str, list[flink.Metric]]:
    found: dict[str, list[flink.Metric]] = {}
    for metric in flink.resource_manager_metrics(cluster.driver.resource_manager, cluster.now):
        if metric.scope == flink.TASKMANAGER:
            found.setdefault(dict(metric.labels)["tm_id"], []).append(metric)
    return found


def task_manager_metrics(
    cluster: ClusterArchive, resource_id: str, get: str | None
) -> list[dict[str, Any]]:
    metrics = _per_task_manager(cluster).get(resource_id)
    if metrics is None:
        raise UnknownTaskManager(f"no TaskManager {resource_id!r} as of {cluster.cut.position}")
    return _answer(metrics, get)


def task_managers_metrics(
    cluster: ClusterArchive, get: str | None, agg: str | None, taskmanagers: str | None
) -> list[dict[str, Any]]:
    per = _per_task_manager(cluster)
    if taskmanagers is not None:
        named = {name.strip() for name in taskmanagers.split(",")}
        per = {rid: metrics for rid, metrics in per.items() if rid in named}
    if get is None:
        return [{"id": name} for name in dict.fromkeys(m.name for ms in per.values() for m in ms)]
    wanted = [name.strip() for name in get.split(",")]
    kinds = AGGREGATES if agg is None else [a.strip() for a in agg.split(",") if a.strip()]
    answer = []
    for name in dict.fromkeys(wanted):
        values = [m.value for ms in per.values() for m in ms if m.name == name]
        if values:
            answer.append({"id": name, **{k: _aggregate(k, values) for k in kinds
                                          if k in AGGREGATES}})  # fmt: skip
    return answer


def _aggregate(kind: str, values: list[float]) -> float:
    if kind == "min":
        return min(values)
    if kind == "max":
        return max(values)
    if kind == "sum":
        return sum(values)
    average = mean(values)
    if kind == "avg":
        return average
    # Flink's skew: the mean absolute deviation as a percentage of the mean, at most 100
    if average == 0:
        return 0.0
    deviation = mean(abs(average - v) for v in values)
    return min(deviation / average * 100, 100.0)
