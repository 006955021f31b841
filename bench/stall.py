"""A giant job does not stall the others: how long a small job takes from
submission to FINISHED while a giant ALL_TO_ALL job is being derived, beside its quiet time.

    python bench/stall.py [--parallelism 10000] [--quiet-runs 3] [-D KEY=VALUE ...]

On a broker of its own (or `--bootstrap`), fresh topics, `--instances` `jobledger services run`
(one by default; with more, the consumer group splits the partitions between them, and the
small job is given a job partition the giant's owner does not own, if another owns one) and
bench/stand_in.py's stand-in TaskExecutors (enough 4-slot ones for both jobs): the small job (two
no-op vertices of one subtask, POINTWISE-free, EAGER) is run alone `--quiet-runs` times (its
quiet time: the median), then the giant job (P x P, PIPELINED, EAGER) is submitted, and once
the first of its slot requests (`--beside deployments`: of its deployments) is on the log the
small job is submitted again. Printed: the quiet times, the small job's time under the giant,
its hops (each of its records with milliseconds since its submission, from broker timestamps),
the giant's seconds to all deployed and to its end, and how it ended (FINISHED, or FAILED:
a slot request or a deployment timed out). The last line is one JSON object. Nothing is
asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import load
import stand_in
from brokers import bench_broker
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from jobledger.projections.log.log_file import read_events
from jobledger.schemas import EventSerde, topic_name
from jobledger.schemas.jobs import JobStatusChanged, JobSubmitted
from jobledger.schemas.slots import SlotRequested
from jobledger.schemas.tasks import TaskDeploymentRequested
from jobledger.schemas.topics import TopicRole
from jobledger.services.client import dispatcher
from jobledger.services.control.partitioning import partition_of
from jobledger.services.kafka import TYPE_HEADER, read_committed_consumer, transactional_producer
from jobledger.services.kafka_topics import create_topics, partitions_of

SLOTS = 4


def first_record(bootstrap: str, prefix: str, job_id: str, kind: type, limit_s: float) -> float:
    """Seconds waited until a record of `kind` of `job_id` is on its topic (partition 0 of
    the ResourceManager's, or any of the TaskExecutors')."""
    consumer = read_committed_consumer(bootstrap, extra={"fetch.wait.max.ms": 10})
    role = TopicRole.RESOURCE_MANAGER if kind is SlotRequested else TopicRole.TASK_EXECUTOR
    topic = topic_name(role, prefix)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING)
                     for p in range(len(partitions_of(consumer, topic)))])  # fmt: skip
    serde, wanted = EventSerde(), kind.type_name().encode()
    started = time.monotonic()
    try:
        while time.monotonic() - started < limit_s:
            for msg in consumer.consume(500, 0.05):
                if msg.error() or dict(msg.headers() or []).get(TYPE_HEADER) != wanted:
                    continue
                if serde.decode(msg.value(), topic).job_id == job_id:
                    return time.monotonic() - started
    finally:
        consumer.close()
    raise TimeoutError(f"no {kind.type_name()} of {job_id} in {limit_s:.0f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parallelism", type=int, default=10_000, help="the giant's P")
    parser.add_argument("--quiet-runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--instances", type=int, default=1, help="`services run` processes")
    parser.add_argument("--beside", choices=("requests", "deployments"), default="requests",
                        help="submit the small job at the giant's first slot request, or "
                        "at its first deployment (its last offer derives them all)")  # fmt: skip
    parser.add_argument("--limit", type=float, default=600.0)
    parser.add_argument("--heartbeat-interval", type=float, default=10.0,
                        help="the stand-ins' beat, s (Flink's heartbeat.interval)")  # fmt: skip
    parser.add_argument("--timer-interval-ms", type=int,
                        help="`services run --timer-interval-ms`: its clock's tick "
                        "(1,000; a JobMaster heartbeats its TaskManagers every tick)")  # fmt: skip
    parser.add_argument("-D", dest="conf", metavar="KEY=VALUE", action="append", default=[])
    parser.add_argument("--bootstrap")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="jobledger-stall-"))
    task_executors = -(-(2 * args.parallelism + 2 * (args.quiet_runs + 1)) // SLOTS)
    with bench_broker(args.bootstrap, work / "broker") as bootstrap:
        prefix = f"stall-{uuid.uuid4().hex[:8]}."
        create_topics(bootstrap, prefix, partitions=args.partitions)
        home = os.environ.get("JOBLEDGER_HOME", str(work / "home"))
        env = {**os.environ, "JOBLEDGER_BOOTSTRAP": bootstrap, "JOBLEDGER_TOPIC_PREFIX": prefix,
               "JOBLEDGER_HOME": home}  # fmt: skip
        options = tuple(arg for pair in args.conf for arg in ("-D", pair))
        if args.timer_interval_ms is not None:
            options += ("--timer-interval-ms", str(args.timer_interval_ms))
        instances = [load.Services(f"stall-{k}", env, work, options=options)
                     for k in range(args.instances)]  # fmt: skip
        watch = load.Watch(bootstrap, prefix)
        stand_ins: subprocess.Popen | None = None
        try:
            for instance in instances:
                instance.start()
            if args.instances > 1 and not load.until(
                lambda: load.ownership_settled(instances, args.partitions), 300
            ):
                raise RuntimeError(f"the services never settled their ownership: {work}")
            with (work / "stand-in.log").open("w") as log:
                stand_ins = stand_in.start(
                    prefix,
                    bootstrap,
                    task_executors,
                    te_slots=SLOTS,
                    heartbeat_interval=args.heartbeat_interval,
                    env=env,
                    cwd=work,
                    log=log,
                )
            if not load.until(lambda: len(watch.registered) >= task_executors, 300):
                raise RuntimeError("the stand-ins never registered")
            client = transactional_producer(bootstrap, "stall-client")
            serde = EventSerde()

            giant = load.wide_job(f"giant-{uuid.uuid4().hex[:8]}", args.parallelism, True)
            job_topic = topic_name(TopicRole.JOB, prefix)
            owners = {name: i.name for i in instances for name in i.ownership()[0]}

            def owner(job_id: str) -> str:
                return owners.get(f"{job_topic}/{partition_of(job_id, args.partitions)}", "?")

            def small() -> JobSubmitted:
                """A small job, on a job partition of another owner than the giant's if
                there is one (an instance may own every job partition)."""
                ids = [f"small-{uuid.uuid4().hex[:8]}" for _ in range(4 * args.partitions)]
                others = [i for i in ids if owner(i) != owner(giant.job_id)]
                job = load.wide_job((others or ids)[0], 1, eager=True)
                dispatcher.submit(client, prefix, job, serde)
                client.flush(10)
                return job

            quiet = []
            for _ in range(args.quiet_runs):
                job = small()
                load.until(lambda j=job: j.job_id in watch.ends, 60)
                quiet.append(job)
            dispatcher.submit(client, prefix, giant, serde)
            client.flush(10)
            kind = SlotRequested if args.beside == "requests" else TaskDeploymentRequested
            waited = first_record(bootstrap, prefix, giant.job_id, kind, args.limit)
            beside = small()
            if not load.until(lambda: beside.job_id in watch.ends and giant.job_id in watch.ends,
                              args.limit):  # fmt: skip
                raise RuntimeError(f"the jobs did not end within {args.limit:.0f} s: {work}")
            rss_mb = max((load.vm_hwm_kb(i.pid) or 0) / 1024 for i in instances)
        finally:
            watch.close()
            if stand_ins is not None:
                stand_ins.terminate()
                stand_ins.wait(30)
            for instance in instances:
                instance.stop()
        records = read_events(bootstrap, prefix)

    def span_ms(job_id: str) -> int:
        mine = [r for r in records if getattr(r.event, "job_id", None) == job_id]
        start = min(r.timestamp for r in mine if isinstance(r.event, JobSubmitted))
        end = max(r.timestamp for r in mine if isinstance(r.event, JobStatusChanged))
        return end - start

    quiet_ms = [span_ms(j.job_id) for j in quiet]
    beside_ms = span_ms(beside.job_id)
    start = min(r.timestamp for r in records if getattr(r.event, "job_id", None) == beside.job_id)
    print(f"small job alone: {quiet_ms} ms; beside a P={args.parallelism} giant: {beside_ms} ms "
          f"(submitted {waited:.1f} s after the giant, at its first "
          f"{kind.type_name()})")  # fmt: skip
    giant_partition = next(
        r.partition
        for r in records
        if isinstance(r.event, JobSubmitted) and r.event.job_id == giant.job_id
    )
    print(f"the giant's job partition: {giant_partition} ({owner(giant.job_id)})")
    for r in sorted(records, key=lambda r: r.timestamp):
        if (
            getattr(r.event, "job_id", None) == beside.job_id
            or (getattr(r.event, "allocation_id", None) or "").find(beside.job_id) >= 0
        ):
            where = f"{r.role.value}/{r.partition}@{r.offset}"
            by = owners.get(f"{topic_name(r.role, prefix)}/{r.partition}", "")
            print(f"  {r.timestamp - start:6d} ms {r.event.type_name():28} {where} {by}")
    giant_records = [r for r in records if getattr(r.event, "job_id", None) == giant.job_id]
    g0 = min(r.timestamp for r in giant_records)
    deployed = max(r.timestamp for r in records if isinstance(r.event, TaskDeploymentRequested)
                   and r.event.job_id == giant.job_id)  # fmt: skip
    ends = [r for r in giant_records if isinstance(r.event, JobStatusChanged)]
    finished = max(r.timestamp for r in ends)
    summary = {
        "parallelism": args.parallelism,
        "instances": args.instances,
        "beside": args.beside,
        "quiet_ms": quiet_ms,
        "beside_ms": beside_ms,
        "over_quiet_ms": beside_ms - statistics.median(quiet_ms),
        "giant_deployed_s": (deployed - g0) / 1000,
        "giant_finished_s": (finished - g0) / 1000,
        "giant_status": max(ends, key=lambda r: (r.timestamp, r.offset)).event.to_status.value,
        "services_rss_mb": round(rss_mb),
        "work": str(work),
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
