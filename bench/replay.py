"""Replay benchmark: a realistic log (1,000 TaskExecutors x 8 slots, waves of 500 jobs of
parallelism 4 to 32 going through slots, deployments, every task state, KvState registrations,
some failures and restarts) written to a real broker, then, in one run: raw consume rate,
decode-only rate, full replay rate, peak memory, and restart from a snapshot vs full replay.

    python bench/replay.py --events 1000000 [--bootstrap HOST:PORT]

Without --bootstrap it starts the embedded broker. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

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
from jobledger.schemas.topics import INPUT_ROLES
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
from jobledger.services import broker
from jobledger.services.driver import ReducerDriver
from jobledger.services.kafka import PARTITIONER, create_topics, partitions_of
from jobledger.services.key_groups import compute_key_group_range_for_operator_index
from jobledger.services.snapshot import Snapshot, decode, encode

PARTITIONS = 8
SLOT = ResourceProfile(kind=ResourceProfileKind.SPECIFIED, cpu_cores=1.0, task_heap_memory_mb=512)
RESTART = RestartStrategy(kind=RestartStrategyKind.FIXED_DELAY, restart_attempts=3, delay_ms=0)


class Generator:
    """Plays a cluster through the reducers, answering deployments like a task runner."""

    def __init__(self, seed: int = 7) -> None:
        self.rng = random.Random(seed)
        self.driver = ReducerDriver()
        self.now = 1_700_000_000_000
        self.log: list[Event] = []
        self.jobs = 0

    def make(self, cls, **fields) -> Event:
        self.now += 1
        return cls(event_id=uuid.UUID(int=self.rng.getrandbits(128)).hex, event_time=self.now,
                   producer="bench", **fields)  # fmt: skip

    def run(self, events: list[Event]) -> list[Event]:
        new = self.driver.run(events)
        self.log.extend(new)
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


def generate(target: int) -> list[Event]:
    """Waves of 500 jobs (fewer for a small --events) until the log is long enough."""
    gen = Generator()
    gen.start()
    jobs_per_wave = min(500, max(5, target // 800))
    while len(gen.log) < target:
        gen.wave(jobs_per_wave)
    return gen.log[:target]


def write(bootstrap: str, prefix: str, events: list[Event], serde: EventSerde) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{prefix}",
                         "partitioner": PARTITIONER,
                         "linger.ms": 20, "queue.buffering.max.messages": 500_000})  # fmt: skip
    producer.init_transactions(60)
    for start in range(0, len(events), 20_000):
        producer.begin_transaction()
        for event in events[start : start + 20_000]:
            role, key = event.route()
            topic = topic_name(role, prefix)
            producer.produce(topic, key=key.encode(), value=serde.encode(event, topic))
            producer.poll(0)
        producer.commit_transaction(120)


def consume_all(bootstrap: str, prefix: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4()}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True, "fetch.max.bytes": 52_428_800})  # fmt: skip
    topics = [topic_name(r, prefix) for r in INPUT_ROLES]
    assignment = [TopicPartition(t, p, -2) for t in topics for p in partitions_of(consumer, t)]
    consumer.assign(assignment)
    values, at_end = [], 0
    while at_end < len(assignment):
        for msg in consumer.consume(10_000, 1.0):
            if msg.error():
                at_end += msg.error().code() == KafkaError._PARTITION_EOF
                continue
            values.append((msg.topic(), msg.value()))
    consumer.close()
    return values


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--bootstrap", help="a running Kafka (default: start the embedded one)")
    args = parser.parse_args()

    proc = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        port = broker.free_port()
        proc = broker.spawn(
            broker.default_kind(),
            port,
            Path(tempfile.mkdtemp(prefix="jobledger-bench-broker-")),
            detach=False,
        )
        bootstrap = f"127.0.0.1:{port}"
    try:
        return run(args.events, bootstrap)
    finally:
        if proc is not None:
            proc.terminate()


def run(target: int, bootstrap: str) -> int:
    serde = EventSerde()
    prefix = f"bench-{uuid.uuid4().hex[:8]}."
    create_topics(bootstrap, prefix, PARTITIONS)
    events, gen_s = timed(lambda: generate(target))
    n = len(events)
    print(f"generated {n:,} events in {gen_s:.1f} s", file=sys.stderr)
    _, write_s = timed(lambda: write(bootstrap, prefix, events, serde))
    print(f"wrote them to the broker in {write_s:.1f} s", file=sys.stderr)
    events.clear()

    raw, raw_s = timed(lambda: consume_all(bootstrap, prefix))
    decoded, decode_s = timed(lambda: [serde.decode(v, t) for t, v in raw])

    def full_replay() -> ReducerDriver:
        driver = ReducerDriver()
        for topic, value in raw:
            driver.process(serde.decode(value, topic))
        return driver

    driver, replay_s = timed(full_replay)
    tail = max(1, len(raw) // 100)

    def prefix_replay() -> ReducerDriver:
        head = ReducerDriver()
        for event in decoded[:-tail]:
            head.process(event)
        return head

    head = prefix_replay()
    snapshot_bytes = encode(Snapshot(head, len(decoded) - tail))

    def restart() -> ReducerDriver:
        restored = decode(snapshot_bytes).driver
        for topic, value in raw[-tail:]:
            restored.process(serde.decode(value, topic))
        return restored

    restored, restart_s = timed(restart)
    assert restored.to_dict() == driver.to_dict(), "snapshot + tail differs from full replay"
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    result = {
        "events": len(raw),
        "raw_consume_events_per_s": round(len(raw) / raw_s),
        "decode_only_events_per_s": round(len(raw) / decode_s),
        "replay_events_per_s": round(len(raw) / replay_s),
        "ratio_replay_decode": round(decode_s / replay_s, 3),
        "ratio_replay_raw": round(raw_s / replay_s, 3),
        "peak_rss_mb": round(peak_mb),
        "snapshot_mb": round(len(snapshot_bytes) / 2**20, 1),
        "restart_from_snapshot_s": round(restart_s, 3),
        "full_replay_s": round(replay_s, 3),
        "jobs": len(driver.job_masters),
    }
    print(f"raw consume {result['raw_consume_events_per_s']:,}/s, decode-only "
          f"{result['decode_only_events_per_s']:,}/s, full replay "
          f"{result['replay_events_per_s']:,}/s")  # fmt: skip
    print(f"replay / decode-only = {result['ratio_replay_decode']}, "
          f"replay / raw consume = {result['ratio_replay_raw']}")  # fmt: skip
    print(f"restart from snapshot {restart_s:.2f} s vs full replay {replay_s:.2f} s; "
          f"peak RSS {result['peak_rss_mb']} MB")  # fmt: skip
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
