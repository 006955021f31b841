"""The golden logs of the debugging suite (tests/golden/logs/*.avro), and how the synthetic
ones were made. `wordcount.avro` and `wordcount-fail-once.avro` are real logs: `jobledger
demo wordcount examples/words.txt [--fail-once]` on Apache Kafka 4.1.1 and Spark, exported.
The others come from the reducers run in one process, each event appended to its partition (Kafka's
partitioner, 4 job and TaskExecutor partitions) as a broker would, in the order derived.

`python -m tests.support.golden_logs` writes the synthetic ones again (never needed unless the
scenarios change: the tests replay the files as they are, Temporal-replayer style).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from jobledger.projections.log.log_file import LogRecord, write_export
from jobledger.schemas import Event
from jobledger.schemas.cluster import JobMasterRegistrationRequested
from jobledger.schemas.jobs import JobMasterLeadershipGranted
from jobledger.schemas.topics import TopicRole
from jobledger.schemas.types import ExecutionState
from jobledger.services.control.partitioning import partition_of

from .jobs import JM, JOB, JobCluster, vertex

LOGS = Path(__file__).resolve().parents[1] / "golden" / "logs"
PARTITIONS = {TopicRole.JOB: 4, TopicRole.RESOURCE_MANAGER: 1, TopicRole.TASK_EXECUTOR: 4}
START = 1_764_000_000_000


def as_log(events: list[Event]) -> list[LogRecord]:
    """The events as a broker would hold them: each in its owner's partition, at the next
    offset, appended one millisecond after the one before."""
    offsets: Counter[tuple[TopicRole, int]] = Counter()
    records = []
    for n, event in enumerate(events):
        role, key = event.route()
        partition = partition_of(key, PARTITIONS[role])
        records.append(LogRecord(role, partition, offsets[role, partition], START + n, event))
        offsets[role, partition] += 1
    return records


def slot_shortage() -> list[Event]:
    """A job of three subtasks on one TaskExecutor of two slots: two run, one request waits."""
    cluster = JobCluster(task_executors=1, slots=2)
    cluster.submit([vertex("source", 3)])
    return cluster.log


def stale_leader() -> list[Event]:
    """A job's leadership moves from jm-1 to jm-2 while its tasks run; the old leader's
    report and a TaskExecutor's registration under the old id are refused as stale."""
    cluster = JobCluster(task_executors=1, slots=2)
    cluster.submit([vertex("source", 1)])
    [deployment] = cluster.deployments()
    cluster.report(deployment.execution_attempt_id, ExecutionState.RUNNING)
    cluster.run([cluster.clock(JobMasterLeadershipGranted, job_id=JOB, job_master_id="jm-2")])
    cluster.report(deployment.execution_attempt_id, ExecutionState.FINISHED, job_master_id=JM)
    cluster.run([cluster.clock(
        JobMasterRegistrationRequested, job_id=JOB, job_master_id=JM, resource_id="tm-0",
    )])  # fmt: skip
    return cluster.log


SYNTHETIC = {"slot-shortage": slot_shortage, "stale-leader": stale_leader}


def write() -> None:
    LOGS.mkdir(parents=True, exist_ok=True)
    for name, scenario in SYNTHETIC.items():
        with (LOGS / f"{name}.avro").open("wb") as out:
            write_export(as_log(scenario()), out)


if __name__ == "__main__":
    write()
