"""Flink's metrics read from the reducers (`control/metrics.py`): uptime and downtime as
Flink's gauges count them, restarts and full restarts, the state gauges, and the cluster's
TaskManagers and slots, lost ones included."""

from __future__ import annotations

from jobledger.schemas.timers import CLOCK, TimerFired
from jobledger.schemas.types import ExecutionState, OwnerKind
from jobledger.services.control.metrics import (
    Metric,
    job_metrics,
    resource_manager_metrics,
    running_jobs,
)

from ..support.jobs import FULL, JOB, JobCluster, fixed_delay, vertex

LABELS = (("job_id", JOB), ("job_name", "test job"))


def values(metrics: list[Metric]) -> dict[str, float]:
    return {m.name: m.value for m in metrics}


def by_status(metrics: list[Metric]) -> list[str]:
    """The state gauges that are 1."""
    return [m.name for m in metrics if m.name.endswith("State") and m.value == 1]


def test_a_running_job_counts_its_uptime_from_when_it_started_running():
    c = JobCluster()
    c.submit([vertex("v", 2)])
    running_at = c.jm.status_since(c.jm.status)
    metrics = job_metrics(c.jm, running_at + 1_500)
    assert metrics[:4] == [
        Metric("jobmanager.job", "uptime", 1_500, LABELS, "ms the job has been RUNNING"),
        Metric("jobmanager.job", "downtime", 0, LABELS,
               "ms of the current outage (FAILING or RESTARTING)"),
        Metric("jobmanager.job", "numRestarts", 0, LABELS, "restarts since submission",
               counter=True),
        Metric("jobmanager.job", "fullRestarts", 0, LABELS, "restarts of every subtask",
               counter=True),
    ]  # fmt: skip
    assert by_status(metrics) == ["runningState"]
    assert running_jobs([c.jm]).value == 1


def test_a_restarting_job_is_down_since_it_began_restarting_and_counts_the_restart():
    c = JobCluster(config=FULL)
    c.submit([vertex("v", 2)], restart=fixed_delay(attempts=3, delay_ms=10_000))
    attempt = c.deployments()[0].execution_attempt_id
    c.report(attempt, ExecutionState.FAILED, "java.lang.RuntimeException: boom")
    restarting_at = c.jm.status_since(c.jm.status)
    metrics = job_metrics(c.jm, restarting_at + 700)
    assert values(metrics)["downtime"] == 700 and values(metrics)["uptime"] == 0
    assert (values(metrics)["numRestarts"], values(metrics)["fullRestarts"]) == (1, 1)
    assert by_status(metrics) == ["restartingState"]
    assert running_jobs([c.jm]).value == 0


def test_a_region_restart_is_a_restart_but_not_a_full_one():
    c = JobCluster()
    c.submit([vertex("v", 2)], restart=fixed_delay(attempts=3, delay_ms=10_000))
    c.report(c.deployments()[0].execution_attempt_id, ExecutionState.FAILED, "boom")
    assert (c.jm.restarts, c.jm.full_restarts) == (1, 0)


def test_an_ended_job_has_no_uptime_or_downtime_as_flink_says_minus_one():
    c = JobCluster()
    c.submit([vertex("v", 1)])
    c.play()
    metrics = job_metrics(c.jm, 10**13)
    assert (values(metrics)["uptime"], values(metrics)["downtime"]) == (-1, -1)
    assert by_status(metrics) == ["finishedState"]


def test_the_cluster_s_task_managers_and_slots_and_those_it_lost():
    c = JobCluster(task_executors=2, slots=4)
    c.submit([vertex("v", 3)])
    rm = c.driver.resource_manager
    now = max(tm.last_heartbeat for tm in rm.task_managers().values())
    metrics = resource_manager_metrics(rm, now)
    assert values(metrics[:5]) == {
        "numRegisteredTaskManagers": 2, "taskSlotsTotal": 8, "taskSlotsAvailable": 5,
        "numPendingSlotRequests": 0, "numLostTaskManagers": 0,
    }  # fmt: skip
    per_task_manager = [(m.labels, m.name, m.value) for m in metrics[5:]]
    assert sorted(per_task_manager)[:2] == [
        ((("tm_id", "tm-0"),), "heartbeatAge", now - rm.task_manager("tm-0").last_heartbeat),
        ((("tm_id", "tm-0"),), "taskSlotsAvailable",
         sum(s.state.value == "FREE" for s in rm.task_manager("tm-0").slots)),
    ]  # fmt: skip
    timeout = rm.config.heartbeat_timeout_ms
    tick = c.clock(TimerFired, scope=OwnerKind.RESOURCE_MANAGER, owner_id="resourcemanager")
    c.run([tick.model_copy(update={"producer": CLOCK, "event_time": now + timeout + 1})])
    after = values(resource_manager_metrics(rm, now + timeout + 1))
    assert (after["numRegisteredTaskManagers"], after["numLostTaskManagers"]) == (0, 2)
    assert after["taskSlotsTotal"] == 0
