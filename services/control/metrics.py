"""The metrics an operator alerts on, in Flink's names, read from the reducers' state.

Flink registers gauges on its JobManager (`numRegisteredTaskManagers`, `taskSlotsTotal`,
`taskSlotsAvailable`, `numRunningJobs`), on each job (`uptime`, `downtime`, `numRestarts`,
`fullRestarts`, and a `<status>State` gauge per JobStatus) and on each TaskManager. Here they
are computed from what the ResourceManager, the JobMasters and the TaskExecutors hold, at the
moment `now` (an event time): no second bookkeeping, so a metric says what `replay` says at
the same offset. Where jobledger has more than Flink measures (TaskExecutors lost so far, slot
requests queued, a TaskExecutor's heartbeat age), it says so in the metric's `help` and keeps
Flink's style of name.

The scopes follow Flink's Prometheus reporter: a metric `name` of scope `jobmanager.job` is
exposed as `flink_jobmanager_job_<name>` with the job's `job_id` and `job_name` as labels.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobledger.schemas.types import JobStatus

from .job_master import JobMaster
from .resource_manager import ResourceManager, SlotState

JOBMANAGER, JOB, TASKMANAGER = "jobmanager", "jobmanager.job", "taskmanager"
ENDED = frozenset({JobStatus.FINISHED, JobStatus.FAILED, JobStatus.CANCELED})
"""Globally terminal: Flink's `uptime` and `downtime` are -1 for these."""
OUTAGE = frozenset({JobStatus.FAILING, JobStatus.RESTARTING})
"""What Flink's `downtime` counts: the time since the job entered one of these."""
STATUSES = tuple(s for s in JobStatus if s is not JobStatus.UNKNOWN)


@dataclass(frozen=True)
class Metric:
    """One value: Flink's scope and name, the labels that tell its owner apart, and why."""

    scope: str
    name: str
    value: float
    labels: tuple[tuple[str, str], ...] = ()
    help: str = ""
    counter: bool = False
    """It only grows (Prometheus: a counter, `_total`); else it is a gauge."""


def resource_manager_metrics(rm: ResourceManager, now: int) -> list[Metric]:
    """The cluster's TaskManagers and slots (Flink's JobManager scope), and each
    TaskManager's slots and heartbeat age."""
    managers = rm.task_managers()
    total = sum(len(tm.slots) for tm in managers.values())
    free = sum(s.state is SlotState.FREE for tm in managers.values() for s in tm.slots)
    metrics = [
        Metric(JOBMANAGER, "numRegisteredTaskManagers", len(managers),
               help="TaskManagers registered at the ResourceManager"),
        Metric(JOBMANAGER, "taskSlotsTotal", total, help="slots of every TaskManager"),
        Metric(JOBMANAGER, "taskSlotsAvailable", free, help="slots free for a request"),
        Metric(JOBMANAGER, "numPendingSlotRequests", rm.queued_requests(),
               help="jobledger: slot requests waiting for a free slot"),
        Metric(JOBMANAGER, "numLostTaskManagers", rm.lost(), counter=True,
               help="jobledger: TaskManagers lost (heartbeat timeout, or an operator)"),
    ]  # fmt: skip
    for tm in managers.values():
        labels = (("tm_id", tm.resource_id),)
        metrics += [
            Metric(TASKMANAGER, "taskSlotsTotal", len(tm.slots), labels, "its slots"),
            Metric(TASKMANAGER, "taskSlotsAvailable",
                   sum(s.state is SlotState.FREE for s in tm.slots), labels, "its free slots"),
            Metric(TASKMANAGER, "heartbeatAge", max(0, now - tm.last_heartbeat), labels,
                   "jobledger: ms since its last heartbeat reached the ResourceManager"),
        ]  # fmt: skip
    return metrics


def job_metrics(jm: JobMaster, now: int) -> list[Metric]:
    """One job's metrics (Flink's job scope); none for a JobMaster with no job yet."""
    job = jm.job
    if job is None:
        return []
    status = jm.status
    labels = (("job_id", jm.job_id), ("job_name", job.job_name))
    running = jm.status_since(JobStatus.RUNNING)
    if status in ENDED:
        uptime = downtime = -1
    else:
        uptime = now - running if status is JobStatus.RUNNING and running is not None else 0
        since = jm.status_since(status)
        downtime = now - since if status in OUTAGE and since is not None else 0
    return [
        Metric(JOB, "uptime", max(uptime, -1), labels, "ms the job has been RUNNING"),
        Metric(JOB, "downtime", max(downtime, -1), labels,
               "ms of the current outage (FAILING or RESTARTING)"),
        Metric(JOB, "numRestarts", jm.restarts, labels, "restarts since submission",
               counter=True),
        Metric(JOB, "fullRestarts", jm.full_restarts, labels,
               "restarts of every subtask", counter=True),
        *(Metric(JOB, f"{s.value.lower()}State", float(status is s), labels,
                 f"1 while the job is {s.value}") for s in STATUSES),
    ]  # fmt: skip


def running_jobs(job_masters: list[JobMaster]) -> Metric:
    """Flink's `numRunningJobs`, over the JobMasters given (one service instance's)."""
    running = sum(jm.job is not None and jm.status is JobStatus.RUNNING for jm in job_masters)
    return Metric(JOBMANAGER, "numRunningJobs", running, help="jobs RUNNING")
