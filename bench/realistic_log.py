"""A realistic log, made by playing a cluster through the reducers: 1,000 TaskExecutors x 8
slots, waves of jobs of parallelism 4 to 32 (source -> keyed count, ALL_TO_ALL) going through
slots, deployments, every task state and KvState registration, with 1% of first attempts
failing and restarting. The replay, debugging, questions and signing benchmarks measure on it;
it is made batch by batch and handed to a sink, so no benchmark holds the whole log."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable

from confluent_kafka import Producer

from jobledger.schemas import Event, EventSerde, topic_name
from jobledger.schemas.cluster import ResourceManagerConnected, TaskManagerRegistered
from jobledger.schemas.jobs import JobMasterLeadershipGranted, JobSubmitted
from jobledger.schemas.kvstate import KvStateRegistered
from jobledger.schemas.tasks import (
    TaskDeploymentRequested,
    TaskExecutionStateChanged,
    TaskFinalStateReported,
)
from jobledger.schemas.timers import TimerFired
from jobledger.schemas.types import (
    DistributionPattern,
    ExecutionState,
    JobEdge,
    JobVertex,
    KeyGroupRange,
    OwnerKind,
    ResourceProfile,
    ResourceProfileKind,
    RestartStrategy,
    RestartStrategyKind,
)
from jobledger.services.control.driver import ReducerDriver
from jobledger.services.control.key_groups import compute_key_group_range_for_operator_index
from jobledger.services.kafka import PARTITIONER

PARTITIONS = 8
SLOT = ResourceProfile(kind=ResourceProfileKind.SPECIFIED, cpu_cores=1.0, task_heap_memory_mb=512)
RESTART = RestartStrategy(kind=RestartStrategyKind.FIXED_DELAY, restart_attempts=3, delay_ms=0)


class Generator:
    """Plays a cluster through the reducers, answering deployments like a task runner; each
    batch of the log goes to `sink` as it is made, never kept."""

    def __init__(self, sink: Callable[[list[Event]], None], seed: int = 7) -> None:
        self.rng = random.Random(seed)
        self.driver = ReducerDriver()
        self.now = 1_700_000_000_000
        self.sink = sink
        self.count = 0
        self.jobs = 0

    def make(self, cls, **fields) -> Event:
        self.now += 1
        return cls(event_id=uuid.UUID(int=self.rng.getrandbits(128)).hex, event_time=self.now,
                   producer="bench", **fields)  # fmt: skip

    def run(self, events: list[Event]) -> list[Event]:
        new = self.driver.run(events)
        self.sink(new)
        self.count += len(new)
        return new

    def start(self) -> None:
        self.run([self.make(TaskManagerRegistered, resource_id=f"tm-{i:04d}",
                            address=f"tm-{i}:6122", number_of_slots=8, resource_profile=SLOT)
                  for i in range(1_000)])  # fmt: skip

    def wave(self, jobs: int) -> None:
        inputs: list[Event] = []
        for _ in range(jobs):
            self.jobs += 1
            job, p = f"job-{self.jobs:05d}", self.rng.randint(4, 32)
            vertices = [
                JobVertex(vertex_id="source", name="source", invokable_class_name="range",
                          parallelism=p),
                JobVertex(vertex_id="count", name="count", invokable_class_name="keyed_count",
                          parallelism=p, max_parallelism=128,
                          inputs=[JobEdge(source_vertex_id="source",
                                          distribution_pattern=DistributionPattern.ALL_TO_ALL)]),
            ]  # fmt: skip
            inputs += [
                self.make(JobSubmitted, job_id=job, job_name=job, vertices=vertices,
                          restart_strategy=RESTART),
                self.make(JobMasterLeadershipGranted, job_id=job, job_master_id=f"jm-{job}"),
                self.make(ResourceManagerConnected, job_id=job,
                          resource_manager_id="resourcemanager"),
            ]  # fmt: skip
        pending = [e for e in self.run(inputs) if isinstance(e, TaskDeploymentRequested)]
        while pending:
            answers: list[Event] = []
            for d in pending:
                answers += self.answer(d)
            new = self.run(answers)
            ticks = {e.job_id for e in new if e.type_name() == "JobStatusChanged"
                     and e.to_status.value == "RESTARTING"}  # fmt: skip
            new += self.run([self.make(TimerFired, scope=OwnerKind.JOB, owner_id=j)
                             for j in sorted(ticks)])  # fmt: skip
            pending = [e for e in new if isinstance(e, TaskDeploymentRequested)]

    def answer(self, d: TaskDeploymentRequested) -> list[Event]:
        def state(s: ExecutionState, error: str | None = None) -> Event:
            return self.make(TaskExecutionStateChanged, job_id=d.job_id,
                             job_master_id=d.job_master_id,
                             execution_attempt_id=d.execution_attempt_id, execution_state=s,
                             error=error, resource_id=d.resource_id)  # fmt: skip

        events = [state(ExecutionState.INITIALIZING), state(ExecutionState.RUNNING)]
        if d.vertex_id == "count":
            r = compute_key_group_range_for_operator_index(
                d.max_parallelism, d.number_of_subtasks, d.subtask_index
            )
            events.append(self.make(
                KvStateRegistered, job_id=d.job_id, job_master_id=d.job_master_id,
                job_vertex_id="count",
                key_group_range=KeyGroupRange(start_key_group=r.start, end_key_group=r.end),
                registration_name="counts", kv_state_id=d.execution_attempt_id,
                server_host=d.resource_id, server_port=9069,
            ))  # fmt: skip
        end = ExecutionState.FINISHED
        if d.attempt_number == 0 and self.rng.random() < 0.01:
            end = ExecutionState.FAILED
        told = self.make(
            TaskFinalStateReported, job_id=d.job_id, resource_id=d.resource_id,
            execution_attempt_id=d.execution_attempt_id, execution_state=end,
        )  # fmt: skip
        error = "java.io.IOException: flaky" if end is ExecutionState.FAILED else None
        return [*events, state(end, error), told]


def generate(target: int, sink: Callable[[list[Event]], None]) -> int:
    """Waves of 500 jobs (fewer for a small --events) until the log is long enough; the
    batches go to `sink`, the last one cut at `target`. Returns how many events."""
    written = 0

    def upto_target(batch: list[Event]) -> None:
        nonlocal written
        batch = batch[: max(0, target - written)]
        written += len(batch)
        if batch:
            sink(batch)

    gen = Generator(upto_target)
    gen.start()
    jobs_per_wave = min(500, max(5, target // 800))
    while written < target:
        gen.wave(jobs_per_wave)
    return written


class Appender:
    """Appends batches of events to their topics in transactions of 20k records."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        self.serde = EventSerde()
        self.prefix = prefix
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "transactional.id": f"bench-{prefix}",
            "partitioner": PARTITIONER, "linger.ms": 20, "queue.buffering.max.messages": 500_000,
        })  # fmt: skip
        self.producer.init_transactions(60)
        self.open = 0
        self.written = 0

    def __call__(self, batch: list[Event]) -> None:
        for event in batch:
            role, key = event.route()
            topic = topic_name(role, self.prefix)
            if not self.open:
                self.producer.begin_transaction()
            self.producer.produce(topic, key=key.encode(), value=self.serde.encode(event, topic))
            self.producer.poll(0)
            self.open += 1
            self.written += 1
            if self.open == 20_000:
                self.close()

    def close(self) -> None:
        if self.open:
            self.producer.commit_transaction(120)
            self.open = 0
