"""A job's failovers, as its JobMaster decided them: each failure (or rescale) after which it
scheduled a restart, with the subtasks to restart (Flink's FailureHandlingResult).

The job's status cannot tell them: under region failover (Flink's default) a job already
RESTARTING stays so while another region fails and waits for its own restart, so four regions
failing one after another move the job to RESTARTING once. The JobMaster's state can: the job's
partition is replayed record by record, and each restart it newly waits for is one failover,
taken at the record that caused it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from jobledger.schemas.jobs import JobStatusChanged
from jobledger.schemas.topics import TopicRole
from jobledger.schemas.types import JobStatus
from jobledger.services.control.driver import PartitionedDriver, ReducerDriver
from jobledger.services.control.queries import PendingRestartInfo

from ..log.log_file import LogRecord
from ..log.replay import dead_lettered


@dataclass(frozen=True)
class Failover:
    """One restart the JobMaster scheduled: the input it decided it on, why, the restart
    strategy's count of failures then, and the subtasks it restarts (`VERTEX[SUBTASK]`; none
    listed for a rescale, which restarts the job into a new ExecutionGraph)."""

    record: LogRecord
    cause: str | None
    failures: int
    subtasks: tuple[str, ...]
    whole_job: bool


def failovers(
    records: Iterable[LogRecord], job_id: str, refused: set[tuple[str, int, int]] | None = None,
    driver_factory: Callable[[], ReducerDriver] = ReducerDriver,
) -> list[Failover]:  # fmt: skip
    """Every failover of `job_id` in `records` (log order), oldest first, replayed by the
    reducers `driver_factory` makes. `refused` names the inputs the services dead-lettered
    (by default: those the records' dead letters name)."""
    records = list(records)
    refused = dead_lettered(records) if refused is None else refused
    partitioned = PartitionedDriver(driver_factory)
    waiting: set[PendingRestartInfo] = set()
    found = []
    for record in records:
        if record.role is not TopicRole.JOB or (
            (record.role.value, record.partition, record.offset) in refused
        ):
            continue
        derived = partitioned.process(record.role, record.partition, record.event)
        jm = partitioned.drivers[(record.role, record.partition)].job_masters.get(job_id)
        if jm is None:
            continue
        pending = jm.pending_restarts()
        for restart in pending:
            if restart in waiting:  # seen while it waited, under an earlier record
                continue
            info = jm.info()
            moved = next((d.cause for d in derived if isinstance(d, JobStatusChanged)
                          and d.to_status is JobStatus.RESTARTING), None)  # fmt: skip
            subtasks = tuple(f"{v}[{i}]" for v, i, _ in restart.versions)
            found.append(Failover(
                record, moved or info.failure_cause, info.failures_counted,
                subtasks, not subtasks or len(subtasks) == info.subtasks,
            ))  # fmt: skip
        waiting = set(pending)
    return found
