"""Questions about a live broker log of a million records, asked as a user asks them (issue
28, item 4): `job list`, `job show JOB`, `kvstate lookup JOB counts KEY` and `job wait JOB`,
each a `jobledger` subprocess, answered from the services' snapshots and, in the same run,
with `--no-snapshots` (the log replayed from offset 0, as every question did before); the
answers are checked equal.

    python bench/questions.py [--events 1000000] [--shape jobs|idle] [--bootstrap HOST:PORT]

Two shapes of log, each of `--events` records on fresh topics (8 partitions):
- `jobs`: bench/replay.py's log (1,000 TaskExecutors x 8 slots, waves of 500 jobs of
  parallelism 4-32 with every deployment, task state and KvState registration): ~1,500 jobs,
  three records in ten a task's deployment or report, which `job list` and `job show` read.
- `idle`: a cluster of 20 TaskExecutors that ran 20 jobs and has been idle since, beating
  every 10 s (the log's growth the issue names: a month of heartbeats is ~170k records; a
  million is half a year).
Then what the services would have left: each input partition's state in a snapshot at its end
and their consumer group's offsets committed there (so `job wait` believes the end it reads).
The last line is one JSON object: per question the seconds from snapshots and replayed, and
their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from brokers import bench_broker
from confluent_kafka import Consumer, Producer, TopicPartition
from realistic_log import PARTITIONS, SLOT, Appender, Generator, generate

from jobledger.projections.log.log_file import read_events
from jobledger.projections.log.replay import replay
from jobledger.schemas import topic_name
from jobledger.schemas.cluster import TaskManagerHeartbeat, TaskManagerRegistered
from jobledger.schemas.topics import TopicRole
from jobledger.services.host import snapshot
from jobledger.services.kafka import SERVICES_GROUP_PREFIX
from jobledger.services.kafka_topics import create_topics

IDLE_TASK_EXECUTORS = 20
IDLE_JOBS = 20


def generate_idle(target: int, sink: Appender) -> None:
    """A small cluster that ran a few jobs, then heartbeats until the log holds `target`."""
    gen = Generator(sink)
    gen.run([gen.make(TaskManagerRegistered, resource_id=f"tm-{i:04d}", address=f"tm-{i}:6122",
                      number_of_slots=8, resource_profile=SLOT)
             for i in range(IDLE_TASK_EXECUTORS)])  # fmt: skip
    gen.wave(IDLE_JOBS)
    while sink.written < target:
        gen.now += 10_000
        beats = min(IDLE_TASK_EXECUTORS, target - sink.written)
        gen.run([gen.make(TaskManagerHeartbeat, resource_id=f"tm-{i:04d}") for i in range(beats)])


def leave_as_the_services_would(bootstrap: str, prefix: str) -> dict[str, int]:
    """Each input partition's state in a snapshot at its end, and the services' consumer
    group committed there, in one transaction as the services write them; returns the
    snapshots' sizes in bytes by partition."""
    records = read_events(bootstrap, prefix)
    ends: dict[tuple[TopicRole, int], int] = {}
    for record in records:
        ends[(record.role, record.partition)] = record.offset + 1
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"snap-{prefix}"})
    producer.init_transactions(60)
    producer.begin_transaction()
    sizes = {}
    for (role, partition), driver in replay(records).partitioned.drivers.items():
        end = ends[(role, partition)]
        owner = f"{topic_name(role, prefix)}/{partition}"
        data = snapshot.encode(snapshot.Snapshot(driver, end))
        sizes[f"{role.value}/{partition}"] = len(data)
        for key, value in snapshot.chunk_records(owner, end, data):
            producer.produce(topic_name(TopicRole.SNAPSHOT, prefix), key=key, value=value,
                             partition=partition % PARTITIONS)  # fmt: skip
    offsets = [TopicPartition(topic_name(role, prefix), p, end) for (role, p), end in ends.items()]
    group = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"{SERVICES_GROUP_PREFIX}{prefix}"}
    )
    producer.send_offsets_to_transaction(offsets, group.consumer_group_metadata(), 60)
    producer.commit_transaction(120)
    group.close()
    return sizes


def asked(command: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Seconds a `jobledger` command took, and what it printed (stdout and exit status)."""
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "jobledger.cli", *command], env=env, capture_output=True,
        text=True, timeout=900,
    )  # fmt: skip
    return time.monotonic() - start, f"exit {done.returncode}\n{done.stdout}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--shape", choices=("jobs", "idle"), default="jobs")
    parser.add_argument("--bootstrap", help="a running Kafka (default: start one)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="jobledger-bench-questions-"))
    with bench_broker(args.bootstrap, work / "broker") as bootstrap:
        prefix = f"questions-{os.getpid()}."
        create_topics(bootstrap, prefix, PARTITIONS)
        sink = Appender(bootstrap, prefix)
        start = time.monotonic()
        if args.shape == "jobs":
            generate(args.events, sink)
        else:
            generate_idle(args.events, sink)
        sink.close()
        print(f"{sink.written:,} records ({args.shape}) in {time.monotonic() - start:.0f} s",
              file=sys.stderr)  # fmt: skip
        sizes = leave_as_the_services_would(bootstrap, prefix)
        env = {**os.environ, "JOBLEDGER_BOOTSTRAP": bootstrap, "JOBLEDGER_TOPIC_PREFIX": prefix,
               "JOBLEDGER_HOME": str(work / "home")}  # fmt: skip
        questions = {
            "job list": ["job", "list"],
            "job show": ["job", "show", "job-00001"],
            "kvstate lookup": ["kvstate", "lookup", "job-00001", "counts", "7"],
        }
        figures: dict[str, object] = {}
        for name, command in questions.items():
            replayed_s, replayed = asked([*command, "--no-snapshots"], env)
            live_s, live = asked(command, env)
            if live != replayed:
                print(f"{name}: the answers differ\n--- replayed\n{replayed}\n--- from "
                      f"snapshots\n{live}", file=sys.stderr)  # fmt: skip
                return 1
            print(f"{name}: {live_s:.1f} s from snapshots, {replayed_s:.1f} s replayed",
                  file=sys.stderr)  # fmt: skip
            figures[name] = {"snapshots_s": round(live_s, 2), "replayed_s": round(replayed_s, 2),
                             "ratio": round(replayed_s / live_s, 1)}  # fmt: skip
        # `job wait` reads only the job's partition of the job topic, never a replay
        wait_s, waited = asked(["job", "wait", "job-00001", "--timeout", "600"], env)
        print(f"job wait: {wait_s:.1f} s: {waited.splitlines()[1]}", file=sys.stderr)
        figures["job wait"] = {"s": round(wait_s, 2), "ended": waited.startswith("exit 0")}
    snapshot_mb = round(sum(sizes.values()) / 2**20, 1)
    print(json.dumps({"events": sink.written, "shape": args.shape, "snapshot_mb": snapshot_mb,
                      **figures}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
