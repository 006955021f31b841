"""Stand-in TaskExecutors: one process playing many runners' TaskExecutors, for the
benchmarks that need thousands of them and none of Spark (bench/load.py's `--parallelism`,
bench/cluster_scale.py, bench/stall.py).

    python bench/stand_in.py --prefix P --bootstrap HOST:PORT --task-executors N
        [--te-slots 4] [--heartbeat-interval 5] [--heartbeats batched|single]

Each stand-in registers, beats and reports exactly as services/runner/runner.py does for a
no-op attempt (`run`); the benchmarks start it as a child with `start`. Stops on SIGTERM,
printing its counts.
"""

from __future__ import annotations

import argparse
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, deque
from pathlib import Path
from typing import IO

from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from jobledger.schemas import Event, EventSerde, topic_name
from jobledger.schemas.cluster import (
    TaskManagerConnectionClosed,
    TaskManagerHeartbeat,
    TaskManagerRegistered,
    TaskManagerRegistrationAccepted,
)
from jobledger.schemas.tasks import (
    TaskCancellationRequested,
    TaskDeploymentRequested,
    TaskSubmissionAccepted,
)
from jobledger.schemas.topics import TopicRole
from jobledger.schemas.types import ExecutionState, ResourceProfile, ResourceProfileKind
from jobledger.services.client import dispatcher
from jobledger.services.control.decisions import derived_id
from jobledger.services.kafka import (
    TYPE_HEADER,
    append_events,
    read_committed_consumer,
    transactional_producer,
)
from jobledger.services.kafka_topics import partitions_of
from jobledger.services.runner import task
from jobledger.services.runner.heartbeats import heartbeats_reported

STAND_IN = "standin"
"""The runner the stand-ins' beats name, and the prefix of their ResourceIDs."""

STAND_IN_TYPES = {kind.type_name().encode() for kind in (
    TaskManagerRegistrationAccepted, TaskManagerConnectionClosed, TaskDeploymentRequested,
    TaskSubmissionAccepted, TaskCancellationRequested)}  # fmt: skip
"""What a runner acts on; the rest of the TaskExecutor topic is skipped undecoded."""


def run(args: argparse.Namespace) -> int:
    """`--task-executors` TaskExecutors in this process, each doing what
    services/runner/runner.py does for its own: register as a new instance (no slot report),
    beat every `--heartbeat-interval` (spread over it: they are independent machines; the
    beats due at once in one record per 2,000, as the runner writes them, or one record each
    with `--heartbeats single`), run only deployments its current instance accepted, and
    report each accepted no-op attempt's whole life (INITIALIZING, RUNNING, FINISHED to the
    job, the final state to the TaskExecutor) as `task.state_event` /
    `task.final_state_event` build it, the reports of one poll in one transaction as a
    micro-batch's are. A closed connection re-registers the
    TaskExecutor as a new instance, as the runner does. Stops on SIGTERM."""
    prefix, bootstrap = args.prefix, args.bootstrap
    serde = EventSerde()
    producer = transactional_producer(bootstrap, "load-standin")
    ids = [f"{STAND_IN}-{i}" for i in range(args.task_executors)]
    ours = set(ids)
    instances: dict[str, str] = {}
    live: set[str] = set()
    awaiting: dict[str, TaskDeploymentRequested] = {}
    cancelled: set[str] = set()
    stats: Counter[str] = Counter()
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    profile = ResourceProfile(
        kind=ResourceProfileKind.SPECIFIED, cpu_cores=1.0, task_heap_memory_mb=1024
    )

    def emit(events: list[Event]) -> None:
        for start in range(0, len(events), 1000):  # transactions of a bounded size
            append_events(producer, prefix, events[start : start + 1000], serde)

    def register(rids: list[str]) -> None:
        now = dispatcher.now_ms()
        for rid in rids:
            instances[rid] = uuid.uuid4().hex
            live.discard(rid)
        emit([TaskManagerRegistered(
            event_id=derived_id(f"{rid}@{instances[rid]}", "registered"), event_time=now,
            producer=task.PRODUCER, resource_id=rid, address="loopback",
            number_of_slots=args.te_slots, resource_profile=profile, instance_id=instances[rid],
        ) for rid in rids])  # fmt: skip
        stats["registrations"] += len(rids)

    topic = topic_name(TopicRole.TASK_EXECUTOR, prefix)
    consumer = read_committed_consumer(bootstrap, extra={"fetch.wait.max.ms": 10})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING)
                     for p in partitions_of(consumer, topic)])  # fmt: skip
    register(ids)
    interval = args.heartbeat_interval
    rng = random.Random(0)
    start = time.monotonic()
    # every TaskExecutor beats at its own offset, one interval apart: a queue in time order
    # stays in order as each beat goes to its back, so a due beat costs O(1) even at 100,000
    beat_queue = deque(sorted((start + rng.uniform(0, interval), rid) for rid in ids))
    try:
        while not stopping.is_set():
            reports: list[Event] = []
            for msg in consumer.consume(1000, 0.05):
                if msg.error():
                    if msg.error().code() != KafkaError._PARTITION_EOF:
                        print(f"stand-in: {msg.error()}", flush=True)
                    continue
                if dict(msg.headers() or []).get(TYPE_HEADER) not in STAND_IN_TYPES:
                    continue
                e = serde.decode(msg.value(), topic)
                rid = getattr(e, "resource_id", None)
                if rid not in ours:
                    continue
                if isinstance(e, TaskManagerRegistrationAccepted):
                    if e.instance_id == instances[rid]:
                        live.add(rid)
                elif isinstance(e, TaskManagerConnectionClosed):
                    if e.instance_id in (None, instances[rid]):
                        stats["connections closed"] += 1
                        for attempt, d in list(awaiting.items()):
                            if d.resource_id == rid:
                                del awaiting[attempt]
                        register([rid])
                elif rid not in live:
                    stats["ignored: not live"] += 1
                elif isinstance(e, TaskDeploymentRequested):
                    awaiting[e.execution_attempt_id] = e
                    stats["deployments"] += 1
                elif isinstance(e, TaskCancellationRequested):
                    cancelled.add(e.execution_attempt_id)
                    stats["cancellations"] += 1
                elif isinstance(e, TaskSubmissionAccepted):
                    d = awaiting.pop(e.execution_attempt_id, None)
                    if d is None:
                        continue
                    if d.execution_attempt_id in cancelled:
                        reports += [task.state_event(d, ExecutionState.CANCELED),
                                    task.final_state_event(d, ExecutionState.CANCELED)]  # fmt: skip
                        continue
                    lives = (ExecutionState.INITIALIZING, ExecutionState.RUNNING,
                             ExecutionState.FINISHED)  # fmt: skip
                    reports += [task.state_event(d, state) for state in lives]
                    reports.append(task.final_state_event(d, ExecutionState.FINISHED))
                    stats["finished"] += 1
            if reports:
                emit(reports)
            now = time.monotonic()
            due = []
            while beat_queue and beat_queue[0][0] <= now:
                at, rid = beat_queue.popleft()
                due.append(rid)
                beat_queue.append((at + interval, rid))
            if due:
                emit(beats(args.heartbeats, {rid: instances[rid] for rid in due}))
                stats["heartbeats"] += len(due)
    finally:
        print(f"stand-in: {dict(stats)}", flush=True)
        consumer.close()
    return 0


def beats(kind: str, due: dict[str, str], runner_id: str = STAND_IN) -> list[Event]:
    """The beats of the `due` TaskExecutors (ResourceID -> InstanceID) as the runner writes
    them (`batched`: a record carries up to 2,000) or as a client writing one record per
    TaskExecutor does (`single`)."""
    wall = dispatcher.now_ms()
    if kind == "batched":
        return list(heartbeats_reported(runner_id, due, task.PRODUCER, wall))
    return [TaskManagerHeartbeat(
        event_id=derived_id(f"{rid}@{wall}", "heartbeat"), event_time=wall,
        producer=task.PRODUCER, resource_id=rid, instance_id=instance,
    ) for rid, instance in due.items()]  # fmt: skip


def start(
    prefix: str, bootstrap: str, task_executors: int, *, te_slots: int,
    heartbeat_interval: float, heartbeats: str = "batched", env: dict[str, str], cwd: Path,
    log: IO[str], new_session: bool = False,
) -> subprocess.Popen:  # fmt: skip
    """This script started as a child writing to `log` (`new_session`: in a process group of
    its own, which the caller kills whole)."""
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()),
         "--prefix", prefix, "--bootstrap", bootstrap,
         "--task-executors", str(task_executors), "--te-slots", str(te_slots),
         "--heartbeat-interval", str(heartbeat_interval), "--heartbeats", heartbeats],
        env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=new_session,
    )  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", required=True, help="the topics' prefix")
    parser.add_argument("--bootstrap", required=True, help="the Kafka to use")
    parser.add_argument("--task-executors", type=int, required=True, help="how many")
    parser.add_argument("--te-slots", type=int, default=4, help="slots per TaskExecutor")
    parser.add_argument("--heartbeat-interval", type=float, default=5.0, help="seconds")
    parser.add_argument("--heartbeats", choices=("batched", "single"), default="batched",
                        help="one record per runner as the runner writes them, or one per "
                        "TaskExecutor")  # fmt: skip
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
