"""Disk a jobledger log takes: bytes per job, small and at parallelism 1000, and
per idle TaskExecutor per day, as the broker stores them, to size disk and retention by.

On a broker of its own (or `--bootstrap`'s, whose log folder `--log-dirs` names), the
services run in this process with their defaults (a snapshot a minute, the clock every
second), and this process plays the runners: a TaskExecutor registers, answers every
deployment with INITIALIZING, RUNNING, FINISHED and its final state, and beats as the Spark
runner does (one heartbeat per transaction, signed, every `heartbeat.interval` of 10 s). A
figure is the growth of the topics' segment files (`*.log` under each partition's folder)
across one scenario, the job's own records and the decisions and markers they bring; the
snapshot topic apart (compacted: it keeps the latest per owner, whatever the log's length),
given as what a snapshot of every partition's state takes after the scenarios.

    python bench/disk.py [--parallelism 1000] [--heartbeats 300]

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
import uuid
from pathlib import Path

from brokers import bench_broker

from jobledger.projections.log.log_file import read_events
from jobledger.schemas import Event, EventSerde
from jobledger.schemas.cluster import TaskManagerHeartbeat, TaskManagerRegistered
from jobledger.schemas.jobs import JobStatusChanged, JobSubmitted
from jobledger.schemas.tasks import (
    TaskDeploymentRequested,
    TaskExecutionStateChanged,
    TaskFinalStateReported,
)
from jobledger.schemas.topics import TopicRole, topic_name
from jobledger.schemas.types import (
    ExecutionState,
    JobStatus,
    JobVertex,
    ResourceProfile,
    ResourceProfileKind,
    RestartStrategy,
)
from jobledger.services.client.dispatcher import submission
from jobledger.services.configuration import Configuration
from jobledger.services.host import snapshot
from jobledger.services.host.transaction_loop import RuntimeConfig, ServiceRuntime
from jobledger.services.kafka import append_events, transactional_producer
from jobledger.services.kafka_topics import LOG_TOPICS, create_topics

HEARTBEAT_INTERVAL_S = 10.0
"""The Spark runner's default `heartbeat.interval` (services/runner/runner.py)."""
DAY_S = 86_400
QUIET = Configuration.parse(["heartbeat.timeout=3600000"])
"""The jobs' TaskExecutors beat in a scenario of their own: in the jobs' they stay alive
without (a P=1000 job on a loaded machine outlasts the 50 s timeout, and their loss is no
job's bytes)."""
SLOT = ResourceProfile(kind=ResourceProfileKind.SPECIFIED, cpu_cores=1.0, task_heap_memory_mb=1024)


class Cluster:
    """A prefix of its own on the broker, the services running over it, a client to write."""

    def __init__(self, bootstrap: str, log_dirs: Path) -> None:
        self.bootstrap, self.log_dirs = bootstrap, log_dirs
        self.prefix = f"disk-{uuid.uuid4().hex[:8]}."
        create_topics(bootstrap, self.prefix, partitions=4)
        self.runtime = ServiceRuntime(bootstrap, self.prefix, RuntimeConfig(),
                                      driver_factory=QUIET.new_driver)  # fmt: skip
        self.thread = threading.Thread(target=self.runtime.run, args=(False,), daemon=True)
        self.thread.start()
        self.client = transactional_producer(bootstrap, f"disk-bench-{self.prefix}")
        self.serde = EventSerde()
        self.count = 0

    def event(self, cls: type[Event], **fields: object) -> Event:
        self.count += 1
        return cls(event_id=f"disk-{self.count}-{uuid.uuid4().hex[:6]}",
                   event_time=int(time.time() * 1000), producer="disk-bench",
                   **fields)  # fmt: skip

    def append(self, events: list[Event]) -> None:
        for start in range(0, len(events), 500):  # a runner's transactions are not larger
            append_events(self.client, self.prefix, events[start : start + 500], self.serde)

    def bytes(self, roles: tuple[TopicRole, ...] = LOG_TOPICS) -> int:
        """The segment files' bytes of these topics' partitions, as the broker holds them."""
        total = 0
        for role in roles:
            for folder in self.log_dirs.glob(f"{topic_name(role, self.prefix)}-*"):
                total += sum(f.stat().st_size for f in folder.glob("*.log"))
        return total

    def settled(self, limit_s: float = 600) -> None:
        """Until the log stops growing for two seconds (the services have decided all)."""
        deadline, last, since = time.monotonic() + limit_s, -1, time.monotonic()
        while time.monotonic() < deadline:
            now = self.bytes()
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= 2.0:
                return
            time.sleep(0.25)
        raise TimeoutError("the log kept growing")

    def register(self, task_executors: int, slots: int) -> None:
        self.append([
            self.event(TaskManagerRegistered, resource_id=f"tm-{i}", address=f"tm-{i}:6122",
                       number_of_slots=slots, resource_profile=SLOT)
            for i in range(task_executors)
        ])  # fmt: skip
        self.settled()

    def run_job(self, parallelism: int) -> None:
        """A job of one vertex run to FINISHED by this process's runners."""
        job_id = f"job-{uuid.uuid4().hex[:8]}"
        vertex = JobVertex(vertex_id="work", name="work", invokable_class_name="noop:work",
                           parallelism=parallelism)  # fmt: skip
        job = self.event(JobSubmitted, job_id=job_id, job_name=job_id, vertices=[vertex],
                         restart_strategy=RestartStrategy())  # fmt: skip
        self.append(submission(job, "disk-bench"))
        deployments = self.until(lambda events: [
            e for e in events if isinstance(e, TaskDeploymentRequested) and e.job_id == job_id
        ], parallelism)  # fmt: skip
        reports: list[Event] = []
        for d in deployments:
            for state in (ExecutionState.INITIALIZING, ExecutionState.RUNNING,
                          ExecutionState.FINISHED):  # fmt: skip
                reports.append(self.event(
                    TaskExecutionStateChanged, job_id=job_id, job_master_id=d.job_master_id,
                    execution_attempt_id=d.execution_attempt_id, execution_state=state,
                ))  # fmt: skip
            reports.append(self.event(
                TaskFinalStateReported, job_id=job_id, resource_id=d.resource_id,
                execution_attempt_id=d.execution_attempt_id,
                execution_state=ExecutionState.FINISHED,
            ))  # fmt: skip
        self.append(reports)
        self.until(lambda events: [
            e for e in events if isinstance(e, JobStatusChanged) and e.job_id == job_id
            and e.to_status is JobStatus.FINISHED
        ], 1)  # fmt: skip
        self.settled()

    def until(self, found, count: int, limit_s: float = 600) -> list:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            hits = found([r.event for r in read_events(self.bootstrap, self.prefix)])
            if len(hits) >= count:
                return hits
            time.sleep(0.5)
        raise TimeoutError(f"fewer than {count} found")

    def beat(self, heartbeats: int) -> None:
        """An idle TaskExecutor's heartbeats, one transaction each, as its runner sends them."""
        for _ in range(heartbeats):
            append_events(self.client, self.prefix, [
                self.event(TaskManagerHeartbeat, resource_id="tm-0", instance_id="instance-0")
            ], self.serde)  # fmt: skip
        self.settled()

    def stop(self) -> None:
        self.runtime.stop()
        self.thread.join(30)

    def snapshot_bytes(self) -> int:
        """What a snapshot of every input partition's state takes now: about what the
        compacted snapshot topic keeps, however long the log."""
        return sum(
            len(snapshot.encode(snapshot.Snapshot(worker.driver, worker.next_offset)))
            for worker in list(self.runtime.workers.values())
        )


def measured(cluster: Cluster, action) -> int:
    """How many bytes the log's topics grew by across `action`."""
    before = cluster.bytes()
    action()
    return cluster.bytes() - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", help="a running broker (default: start one)")
    parser.add_argument("--log-dirs", type=Path, help="with --bootstrap: its log.dirs folder")
    parser.add_argument("--parallelism", type=int, default=1000, help="the big job's")
    parser.add_argument("--small", type=int, default=4, help="the small job's parallelism")
    parser.add_argument("--heartbeats", type=int, default=300, help="idle heartbeats measured")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as workdir,
        bench_broker(args.bootstrap, Path(workdir)) as bootstrap,
    ):
        log_dirs = args.log_dirs or next(Path(workdir).rglob("meta.properties")).parent
        idle = Cluster(bootstrap, log_dirs)
        try:
            idle.register(1, 4)
            beats = measured(idle, lambda: idle.beat(args.heartbeats))
        finally:
            idle.stop()
        cluster = Cluster(bootstrap, log_dirs)
        try:
            slots = 4
            cluster.register(max(1, -(-args.parallelism // slots)), slots)
            small = measured(cluster, lambda: cluster.run_job(args.small))
            big = measured(cluster, lambda: cluster.run_job(args.parallelism))
            snapshots = cluster.snapshot_bytes()
        finally:
            cluster.stop()
    per_beat = beats / args.heartbeats
    figures = {
        "bytes_per_small_job": small, "small_parallelism": args.small,
        "bytes_per_big_job": big, "big_parallelism": args.parallelism,
        "bytes_per_big_job_subtask": round(big / args.parallelism),
        "bytes_per_heartbeat": round(per_beat),
        "bytes_per_idle_task_executor_per_day": round(per_beat * DAY_S / HEARTBEAT_INTERVAL_S),
        "snapshot_bytes_all_partitions_after": snapshots,
    }  # fmt: skip
    for key, value in figures.items():
        print(f"{key}: {value}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
