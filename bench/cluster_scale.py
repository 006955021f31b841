"""Cluster scale: many TaskExecutors beating, small jobs at a rising rate, and how both grow
with `services run` instances.

    python bench/cluster_scale.py --task-executors 100000 --instances 1 2
    ... [--task-executors 10000 100000] [--instances 1 2 4] [--rates 10 25 50 100 150]
        [--heartbeats batched|single] [--beat-seconds 30] [--rate-seconds 8] [--nodes 3]

Per `--instances` count n, each part on fresh topics of one broker (`--nodes 3`: three):
- (a) liveness, per `--task-executors` N: N stand-in TaskExecutors x `--te-slots` in one
  process (bench/stand_in.py, which registers, beats at `--heartbeat-interval`,
  runs and reports deployments as the runner does) register, then beat for `--beat-seconds`.
  Measured: seconds until all are registered (the ResourceManager partition's registrations
  per second); in the beating window, records per second on that partition, its lag in records
  (high watermark less the services' committed offset, sampled every 0.5 s) and in seconds (a
  probe beat of an unknown TaskExecutor each second: broker time from the probe to the
  ResourceManager's answer, `TaskManagerConnectionClosed`), the services' CPU (from /proc), and
  the heartbeat bytes a day (bytes of beat records in the window, scaled). The reducer alone is
  measured too, in this process: N registrations, N beats, and one clock look (`next_timer`).
- (b) small jobs: one-vertex no-op jobs of parallelism 1-4 (in turn) submitted at each rate of
  `--rates` for `--rate-seconds` on `--job-task-executors` stand-ins: the sustained rate is the
  highest whose p99 from submission (the client's clock as it commits) to FINISHED (the
  broker's time of `JobStatusChanged FINISHED`) is within 2 s and whose jobs all finished. The
  rate rises on until the services no longer keep up (a job unfinished 20 s after its step),
  so the last step measures the decisions per second at saturation. The hops of a job's path
  (broker ms from a cause to its decision) say where its time went. Per step, decisions per
  second (records a reducer wrote, read back from the log) on the ResourceManager's
  partition, the busiest other partition, and per instance; and each instance's loop (its
  `--metrics-port`, scraped before and after the step): transactions and the seconds their
  commits took, decisions, CPU, and its thread's time on a core and waiting for one
  (/proc/PID/schedstat).
- (c) is (a) and (b) side by side for each n, with the model of bench/README.md ("The
  cluster's throughput") checked against them: its prediction for n instances from the
  1-instance loop's measured costs and the partitions each instance owns, against what n
  measured.

Last line JSON. Every child is killed in a finally, with all it started.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from brokers import bench_broker
from confluent_kafka import OFFSET_BEGINNING, KafkaError, Message, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from jobledger.projections.log.log_file import LogRecord, read_events
from jobledger.schemas import EventSerde, topic_name
from jobledger.schemas.cluster import (
    TaskManagerConnectionClosed,
    TaskManagerHeartbeat,
    TaskManagerHeartbeatsReported,
    TaskManagerRegistered,
    TaskManagerRegistrationAccepted,
)
from jobledger.schemas.jobs import JobStatusChanged, JobSubmitted
from jobledger.schemas.timers import TimerFired
from jobledger.schemas.topics import TopicRole
from jobledger.schemas.types import JobStatus, JobVertex, OwnerKind, ScheduleMode
from jobledger.services.client import dispatcher
from jobledger.services.control.driver import DECIDING_PRODUCERS
from jobledger.services.control.job_status import GLOBALLY_TERMINAL
from jobledger.services.control.resource_manager import ResourceManager
from jobledger.services.kafka import (
    SERVICES_GROUP_PREFIX,
    TYPE_HEADER,
    append_events,
    read_committed_consumer,
    transactional_producer,
)
from jobledger.services.kafka_topics import create_topics, partitions_of
from jobledger.services.local import broker
from jobledger.services.runner import instances as runner_instances
from jobledger.services.runner.heartbeats import heartbeats_reported

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import stand_in  # noqa: E402
from bench.follower import TopicFollower  # noqa: E402
from bench.load import NO_RESTART, Services, ownership_settled  # noqa: E402
from bench.soak import until  # noqa: E402
from tests.support.processes import kill_tree  # noqa: E402

START_LIMIT_S = 600.0
"""How long the stand-ins' registrations and the services' ownership may take (100,000
registrations through one partition take minutes on a busy 2-core machine)."""
P99_LIMIT_MS = 2_000
"""The sustained rate's p99. The rate rises past it until a step's jobs do not all finish 20 s
after it: the last steps measure the decisions per second at saturation, which the model
needs (a p99 of seconds is not saturation: one instance's loop of 17 commits makes every hop
of a job slow long before it runs out of time)."""
BEAT_TYPES = {k.type_name().encode() for k in (TaskManagerHeartbeat, TaskManagerHeartbeatsReported)}
PROBE = "probe"


# -- the processes ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Loop:
    """One instance's transaction loop as counters (two of them make a window's figures): per
    role, the transactions it committed and the seconds their commits took (`services run
    --metrics-port`: a transaction per owned partition with input, per loop), the decisions
    they held; its CPU seconds; the partitions it owns."""

    transactions: dict[str, float]
    commit_s: dict[str, float]
    decisions: dict[str, float]
    cpu_s: float
    owned: frozenset[str]
    on_core_s: float
    """The loop's thread (the process' main thread, /proc/PID/schedstat): seconds on a core."""
    runqueue_s: float
    """... and seconds it was runnable but waited for a core (the machine's contention)."""

    @classmethod
    def scraped(cls, pid: int, port: int, cpu_s: float, owned: set[str]) -> Loop:
        url = f"http://{broker.LOOPBACK}:{port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as answer:
            text = answer.read().decode()
        found: dict[str, dict[str, float]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                role = sample.labels.get("role")
                if role is not None:
                    found.setdefault(sample.name, {})[role] = sample.value
        return cls(
            found.get("jobledger_services_commit_latency_seconds_count", {}),
            found.get("jobledger_services_commit_latency_seconds_sum", {}),
            found.get("jobledger_services_decisions_total", {}),
            cpu_s,
            frozenset(owned),
            *schedstat(pid),
        )

    def since(self, before: Loop, seconds: float) -> dict[str, object]:
        """The window from `before`: per second, and each commit's mean ms."""

        def per_s(now: dict[str, float], then: dict[str, float]) -> dict[str, float]:
            return {r: (v - then.get(r, 0)) / seconds for r, v in now.items()}

        transactions = per_s(self.transactions, before.transactions)
        commit = per_s(self.commit_s, before.commit_s)
        return {
            "owned": sorted(self.owned),
            "decisions_per_s": {
                r: round(v, 1) for r, v in per_s(self.decisions, before.decisions).items()
            },
            "transactions_per_s": {r: round(v, 2) for r, v in transactions.items()},
            "commit_ms": {r: round(1000 * commit[r] / t, 2) for r, t in transactions.items() if t},
            "commit_share": round(sum(commit.values()), 3),
            "cpu_share": round((self.cpu_s - before.cpu_s) / seconds, 3),
            "loop_on_core_share": round((self.on_core_s - before.on_core_s) / seconds, 3),
            "loop_runqueue_share": round((self.runqueue_s - before.runqueue_s) / seconds, 3),
        }


def schedstat(pid: int) -> tuple[float, float]:
    """Seconds the process' main thread ran on a core, and waited runnable for one."""
    try:
        on_core, waiting, _ = Path(f"/proc/{pid}/schedstat").read_text().split()
    except (OSError, ValueError):
        return 0.0, 0.0
    return int(on_core) / 1e9, int(waiting) / 1e9


@dataclass
class Cluster:
    """n `services run` instances and one stand-in process on fresh topics."""

    args: argparse.Namespace
    env: dict[str, str]
    work: Path
    n: int
    task_executors: int
    prefix: str = field(default_factory=lambda: f"scale-{uuid.uuid4().hex[:8]}.")
    instances: list[Services] = field(default_factory=list)
    stand_in: subprocess.Popen | None = None

    def __post_init__(self) -> None:
        self.dir = self.work / self.prefix.rstrip(".")
        self.dir.mkdir()
        self.bootstrap = self.env["JOBLEDGER_BOOTSTRAP"]
        create_topics(self.bootstrap, self.prefix, partitions=self.args.partitions)
        self.env = {**self.env, "JOBLEDGER_TOPIC_PREFIX": self.prefix}

    def topic(self, role: TopicRole) -> str:
        return topic_name(role, self.prefix)

    def start(self) -> None:
        options = tuple(self.args.services_arg)
        self.metrics_ports = [broker.free_port() for _ in range(self.n)]
        self.instances = [Services(f"s{k}", self.env, self.dir,
                                   options=(*options, "--metrics-port", str(port)))
                          for k, port in enumerate(self.metrics_ports)]  # fmt: skip
        for instance in self.instances:
            instance.start()
        if not until(lambda: ownership_settled(self.instances, self.args.partitions), 180):
            raise RuntimeError(f"the services never settled their ownership: {self.dir}")
        with (self.dir / "stand-in.log").open("w") as log:
            self.stand_in = stand_in.start(
                self.prefix,
                self.bootstrap,
                self.task_executors,
                te_slots=self.args.te_slots,
                heartbeat_interval=self.args.heartbeat_interval,
                heartbeats=self.args.heartbeats,
                env=self.env,
                cwd=self.dir,
                log=log,
                new_session=True,
            )

    def check(self) -> None:
        for instance in self.instances:
            if not instance.alive():
                raise RuntimeError(f"services {instance.name} died: {instance.log_path}")
        if self.stand_in is not None and self.stand_in.poll() is not None:
            raise RuntimeError(f"the stand-in exited: {self.dir / 'stand-in.log'}")

    def cpu_s(self) -> list[float]:
        """Each instance's CPU seconds so far (its own and its waited-for children's)."""
        tick = os.sysconf("SC_CLK_TCK")
        out = []
        for instance in self.instances:
            try:
                fields = Path(f"/proc/{instance.pid}/stat").read_text().rsplit(")", 1)[1].split()
                out.append(sum(int(f) for f in fields[11:15]) / tick)
            except OSError:
                out.append(0.0)
        return out

    def loops(self) -> list[Loop]:
        """Each instance's loop counters so far, from its Prometheus endpoint, with its CPU
        and the partitions it owns."""
        return [
            Loop.scraped(instance.pid, port, cpu, instance.ownership()[0])
            for port, cpu, instance in zip(
                self.metrics_ports, self.cpu_s(), self.instances, strict=True
            )
        ]

    def stop(self) -> None:
        if self.stand_in is not None and self.stand_in.poll() is None:
            self.stand_in.send_signal(signal.SIGTERM)
            try:
                self.stand_in.wait(30)
            except subprocess.TimeoutExpired:
                kill_tree(self.stand_in.pid)
        for instance in self.instances:
            if instance.alive():
                instance.stop()

    def kill(self) -> None:
        if self.stand_in is not None and self.stand_in.poll() is None:
            kill_tree(self.stand_in.pid)
        for instance in self.instances:
            if instance.alive():
                kill_tree(instance.pid)


class Follower(TopicFollower):
    """Decodes nothing but job ends: acceptances are counted by key (the TaskExecutor)."""

    wait_ms = 20
    ACCEPTED = TaskManagerRegistrationAccepted.type_name().encode()
    STATUS = JobStatusChanged.type_name().encode()

    def __init__(self, cluster: Cluster) -> None:
        self.accepted: set[bytes] = set()
        self.ends: dict[str, tuple[JobStatus, int]] = {}
        self.serde = EventSerde()
        super().__init__(cluster.bootstrap, cluster.prefix)

    def seen(self, kind: bytes | None, msg: Message) -> None:
        if kind == self.ACCEPTED:
            self.accepted.add(msg.key())
        elif kind == self.STATUS:
            e = self.serde.decode(msg.value(), msg.topic())
            if e.to_status in GLOBALLY_TERMINAL and e.producer in DECIDING_PRODUCERS:
                self.ends[e.job_id] = (e.to_status, msg.timestamp()[1])


def registered(cluster: Cluster, follower: Follower, count: int) -> float:
    """Seconds until `count` TaskExecutors are accepted (RuntimeError past the limit)."""
    began = time.monotonic()

    def done() -> bool:
        cluster.check()
        return len(follower.accepted) >= count

    if not until(done, START_LIMIT_S, every_s=0.5):
        raise RuntimeError(f"{len(follower.accepted)} of {count} TaskExecutors registered in "
                           f"{START_LIMIT_S:.0f} s: {cluster.dir}")  # fmt: skip
    return time.monotonic() - began


# -- (a) liveness -----------------------------------------------------------------------------


def reducer_alone(count: int, slots: int) -> dict[str, float]:
    """The ResourceManager reducer with `count` TaskExecutors, in this process: registrations
    and beats (batched, as the runner writes them) per second, the ms of a clock look in the
    steady state, and of a TimerFired that loses nobody (a pass over every TaskExecutor)."""
    rm = ResourceManager()
    profile = runner_instances.PROFILE
    began = time.perf_counter()
    for i in range(count):
        rm.apply(TaskManagerRegistered(
            event_id=f"r{i}", event_time=1, producer="bench", resource_id=f"te-{i}",
            address="x", number_of_slots=slots, resource_profile=profile,
        ))  # fmt: skip
    registering = time.perf_counter() - began
    batches = heartbeats_reported("bench", {f"te-{i}": None for i in range(count)}, "bench", 2)
    began = time.perf_counter()
    for batch in batches:
        rm.apply(batch)
    beating = time.perf_counter() - began
    rm.next_timer()  # the first look after a round of beats drops the round before: once
    began = time.perf_counter()
    rm.next_timer()
    look = time.perf_counter() - began
    tick = TimerFired(event_id="t", event_time=3, producer="clock",
                      scope=OwnerKind.RESOURCE_MANAGER, owner_id="resourcemanager")  # fmt: skip
    began = time.perf_counter()
    rm.apply(tick)
    fired = time.perf_counter() - began
    return {
        "registrations_per_s": round(count / registering),
        "beats_per_s": round(count / beating),
        "clock_look_ms": round(look * 1000, 1),
        "timer_fired_ms": round(fired * 1000, 1),
    }


def liveness(args: argparse.Namespace, env: dict[str, str], work: Path, n: int,
             count: int) -> dict[str, object]:  # fmt: skip
    """Part (a) for `count` TaskExecutors and `n` instances."""
    cluster = Cluster(args, env, work, n, count)
    follower = Follower(cluster)
    rm_tp = TopicPartition(cluster.topic(TopicRole.RESOURCE_MANAGER), 0)
    probe_producer = transactional_producer(cluster.bootstrap, f"scale-probe-{cluster.prefix}")
    serde = EventSerde()
    group = read_committed_consumer(cluster.bootstrap, f"{SERVICES_GROUP_PREFIX}{cluster.prefix}")
    result: dict[str, object] = {"task_executors": count, "instances": n}
    try:
        cluster.start()
        seconds = registered(cluster, follower, count)
        result["registration_s"] = round(seconds, 1)
        result["registrations_per_s"] = round(count / seconds)
        _, start_hw = group.get_watermark_offsets(rm_tp, timeout=10)
        cpu0, began = cluster.cpu_s(), time.monotonic()
        lags, k = [], 0
        while time.monotonic() - began < args.beat_seconds:
            cluster.check()
            probe = TaskManagerHeartbeat(
                event_id=uuid.uuid4().hex, event_time=dispatcher.now_ms(), producer="bench",
                resource_id=f"{PROBE}-{k}", instance_id="probe",
            )  # fmt: skip
            append_events(probe_producer, cluster.prefix, [probe], serde)
            k += 1
            for _ in range(2):
                _, hw = group.get_watermark_offsets(rm_tp, timeout=10)
                [committed] = group.committed([rm_tp], timeout=10)
                lags.append(max(0, hw - max(committed.offset, 0)))
                time.sleep(0.5)
        window = time.monotonic() - began
        cpu = [b - a for a, b in zip(cpu0, cluster.cpu_s(), strict=True)]
        _, end_hw = group.get_watermark_offsets(rm_tp, timeout=10)
        ended_ms = dispatcher.now_ms()
        cluster.stop()
        beats = beat_records(cluster, start_hw, end_hw)
        probes, in_order = probe_lags_ms(cluster, ended_ms)
        result |= {
            "rm_records_per_s": round((end_hw - start_hw) / window, 1),
            "rm_lag_records_max": max(lags, default=0),
            "rm_lag_s_max": round(max(in_order, default=0) / 1000, 2),
            "rm_lag_s_p50": round(statistics.median(probes) / 1000, 2) if probes else None,
            "rm_lag_s_max_last_10_probes": round(max(in_order[-10:], default=0) / 1000, 2),
            "rm_lag_s_max_last_60_probes": round(max(in_order[-60:], default=0) / 1000, 2),
            "probes_answered": f"{len(probes)}/{k}",
            "services_cpu_percent": [round(100 * c / window) for c in cpu],
            "heartbeat_records_per_s": round(beats["records"] / window, 1),
            "heartbeat_bytes_per_day": round(beats["bytes"] / window * 86_400),
            "reducer_alone": reducer_alone(count, args.te_slots),
        }
        return result
    finally:
        follower.close()
        group.close()
        cluster.kill()


def beat_records(cluster: Cluster, start: int, end: int) -> dict[str, int]:
    """The beat records (not the probes) on the ResourceManager's partition in [start, end),
    and their bytes (key, value, headers)."""
    found = Counter[str]()
    consumer = read_committed_consumer(cluster.bootstrap, extra={"enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(cluster.topic(TopicRole.RESOURCE_MANAGER), 0, start)])
        offset = start
        while offset < end:
            msgs = consumer.consume(5000, 5)
            if not msgs:
                break
            for msg in msgs:
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        offset = end
                    continue
                offset = msg.offset() + 1
                if msg.offset() >= end:
                    break
                headers = msg.headers() or []
                if dict(headers).get(TYPE_HEADER) in BEAT_TYPES and not (
                    msg.key() or b""
                ).startswith(PROBE.encode()):
                    found["records"] += 1
                    found["bytes"] += (
                        len(msg.key() or b"")
                        + len(msg.value() or b"")
                        + sum(len(k) + len(v or b"") for k, v in headers)
                    )
    finally:
        consumer.close()
    return dict(found)


def probe_lags_ms(cluster: Cluster, ended_ms: int) -> tuple[list[int], list[int]]:
    """Broker ms from each probe answered to the ResourceManager's answer; and every probe's
    lag in the order they were sent, one not answered by the window's end (`ended_ms`) at its
    age then, the least its lag was."""
    sent: dict[bytes, int] = {}
    answered: dict[bytes, int] = {}
    closed = TaskManagerConnectionClosed.type_name().encode()
    consumer = read_committed_consumer(cluster.bootstrap, extra={"enable.partition.eof": True})
    try:
        tps = [TopicPartition(t, p, OFFSET_BEGINNING)
               for t in (cluster.topic(TopicRole.RESOURCE_MANAGER),
                         cluster.topic(TopicRole.TASK_EXECUTOR))
               for p in partitions_of(consumer, t)]  # fmt: skip
        consumer.assign(tps)
        ended: set[tuple[str, int]] = set()
        idle = 0
        while len(ended) < len(tps) and idle < 10:
            msgs = consumer.consume(5000, 1)
            idle = 0 if msgs else idle + 1
            for msg in msgs:
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        ended.add((msg.topic(), msg.partition()))
                    continue
                key = msg.key() or b""
                if not key.startswith(PROBE.encode()):
                    continue
                if msg.topic() == cluster.topic(TopicRole.RESOURCE_MANAGER):
                    if dict(msg.headers() or []).get(TYPE_HEADER) == BEAT_PROBE:
                        sent[key] = msg.timestamp()[1]
                elif dict(msg.headers() or []).get(TYPE_HEADER) == closed:
                    answered[key] = msg.timestamp()[1]
    finally:
        consumer.close()
    lags = {k: answered[k] - at if k in answered else ended_ms - at for k, at in sent.items()}
    in_order = [lags[k] for k in sorted(lags, key=lambda k: int(k.rsplit(b"-", 1)[1]))]
    return [lags[k] for k in answered if k in sent], in_order


BEAT_PROBE = TaskManagerHeartbeat.type_name().encode()


# -- (b) small jobs ---------------------------------------------------------------------------


def small_job(job_id: str, parallelism: int) -> JobSubmitted:
    """One no-op vertex of `parallelism` subtasks, never restarted."""
    return JobSubmitted(
        event_id=uuid.uuid4().hex, event_time=dispatcher.now_ms(), producer="scale",
        job_id=job_id, job_name=f"small P={parallelism}",
        vertices=[JobVertex(vertex_id="v", name="noop", invokable_class_name="noop",
                            parallelism=parallelism)],
        schedule_mode=ScheduleMode.EAGER, restart_strategy=NO_RESTART,
    )  # fmt: skip


def submit_at(cluster: Cluster, rate: float, seconds: float) -> dict[str, int]:
    """Submit `rate` jobs a second for `seconds`, those due each 50 ms in one transaction (a
    transaction per job bounds one client near 50 a second); each job's submission time."""
    client = transactional_producer(cluster.bootstrap, f"scale-client-{uuid.uuid4().hex[:6]}")
    serde = EventSerde()
    submitted: dict[str, int] = {}
    began = time.monotonic()
    total = round(rate * seconds)
    while len(submitted) < total:
        due = min(total, int((time.monotonic() - began) * rate) + 1) - len(submitted)
        if due > 0:
            jobs = [small_job(f"s{rate:g}-{len(submitted) + i}-{uuid.uuid4().hex[:6]}",
                              1 + (len(submitted) + i) % 4) for i in range(due)]  # fmt: skip
            events = [e for job in jobs for e in dispatcher.submission(job, job.producer)]
            now = dispatcher.now_ms()
            append_events(client, cluster.prefix, events, serde)
            submitted |= {job.job_id: now for job in jobs}
        time.sleep(0.05)
    return submitted


def percentile(ordered: list[int], q: float) -> int | None:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else None


def jobs(args: argparse.Namespace, env: dict[str, str], work: Path, n: int) -> dict[str, object]:
    """Part (b) for `n` instances: the rising rate, step by step."""
    cluster = Cluster(args, env, work, n, args.job_task_executors)
    follower = Follower(cluster)
    steps: list[dict[str, object]] = []
    try:
        cluster.start()
        registered(cluster, follower, args.job_task_executors)
        windows = []
        for rate in args.rates:
            began_ms, began, loops = dispatcher.now_ms(), time.monotonic(), cluster.loops()
            submitted = submit_at(cluster, rate, args.rate_seconds)

            def ended(ours: dict[str, int] = submitted) -> bool:
                cluster.check()
                return all(j in follower.ends for j in ours)

            until(ended, args.rate_seconds + 20, every_s=0.25)
            window = time.monotonic() - began
            loops = [after.since(before, window)
                     for before, after in zip(loops, cluster.loops(), strict=True)]  # fmt: skip
            ends = {j: follower.ends[j] for j in submitted if j in follower.ends}
            latencies = sorted(ends[j][1] - at for j, at in submitted.items() if j in ends)
            finished = sum(status is JobStatus.FINISHED for status, _ in ends.values())
            p99 = percentile(latencies, 0.99)
            step = {
                "rate": rate, "jobs": len(submitted), "finished": finished,
                "p50_ms": percentile(latencies, 0.5), "p99_ms": p99,
                "sustained": finished == len(submitted) and p99 is not None
                and p99 <= P99_LIMIT_MS, "loops": loops,
            }  # fmt: skip
            steps.append(step)
            windows.append((began_ms, max((t for _, t in ends.values()), default=began_ms)))
            print(f"  [{n}x] {rate:g} jobs/s: {step}", flush=True)
            if finished < len(submitted):
                break  # past the rate the services keep up with: the decisions/s saturated
        cluster.stop()
        records = read_events(cluster.bootstrap, cluster.prefix)
        for step, (lo, hi) in zip(steps, windows, strict=True):
            step |= decisions(records, lo, hi, n)
        sustained = [s["rate"] for s in steps if s["sustained"]]
        return {"instances": n, "sustained_jobs_per_s": max(sustained, default=0),
                "hops_ms": hops(records), "steps": steps}  # fmt: skip
    finally:
        follower.close()
        cluster.kill()


def decisions(records: list[LogRecord], lo: int, hi: int, n: int) -> dict[str, object]:
    """Decisions per second in [lo, hi] (broker time): all, the ResourceManager partition's,
    the busiest other partition's, and per instance."""
    per = Counter(
        (r.role.value, r.partition) for r in records
        if lo <= r.timestamp <= hi and r.event.cause_event_id is not None
        and r.event.producer in DECIDING_PRODUCERS
    )  # fmt: skip
    span = max(0.001, (hi - lo) / 1000)
    rm = per.pop((TopicRole.RESOURCE_MANAGER.value, 0), 0)
    busiest = max(per.values(), default=0)
    total = rm + sum(per.values())
    return {
        "decisions_per_s": round(total / span),
        "rm_partition_decisions_per_s": round(rm / span),
        "busiest_other_partition_decisions_per_s": round(busiest / span),
        "decisions_per_s_per_instance": round(total / span / n),
    }


def hops(records: list[LogRecord]) -> dict[str, object]:
    """Broker ms from each input (or decision read back as one) to each decision it caused:
    one hop of a job's path, which is about eight of them in a row (submission, slot request,
    allocation, offer, deployment, acceptance, task reports, end)."""
    by_id = {r.event.event_id: r for r in records}
    ms = sorted(
        r.timestamp - cause.timestamp for r in records
        if r.event.producer in DECIDING_PRODUCERS
        and (cause := by_id.get(r.event.cause_event_id or "")) is not None
    )  # fmt: skip
    return {"p50": percentile(ms, 0.5), "p99": percentile(ms, 0.99), "decisions": len(ms)}


# -- (c) the model ----------------------------------------------------------------------------


@dataclass(frozen=True)
class LoopCosts:
    """One instance's loop at saturation (bench/README.md, "The cluster's throughput"), from
    the 1-instance run's fastest step: each second of it is spent committing or not, and
    both are measured per decision. A loop takes what has arrived (up to `--batch-size`
    inputs) and commits one transaction per owned partition that had input, one after
    another: fewer partitions owned, as many inputs per loop, fewer transactions per decision.
    The rest (reducing, encoding, polling, waiting for a core) is the same per decision
    however many partitions it owns."""

    commit_s: float
    """Seconds one transaction's commit holds the loop (the commit latency histogram's mean)."""
    transactions_per_decision: float
    """... and how many a decision costs, owning `owned` partitions: the per-owned-partition
    cost of a loop is commit_s x transactions_per_decision / owned per decision."""
    owned: int
    rest_s: float
    """Seconds of loop per decision outside commits: the loop's time less its commits, over
    its decisions."""
    on_core_s: float
    """Seconds the loop's thread ran on a core per decision (/proc/PID/schedstat) ..."""
    runqueue_s: float
    """... and waited runnable for one (the machine's other work), inside commits or not."""
    cpu_s: float
    """The process' CPU seconds per decision, all threads (librdkafka's too)."""

    @classmethod
    def measured(cls, step: dict[str, object]) -> LoopCosts | None:
        [loop] = step["loops"]  # type: ignore[misc]
        decisions = sum(loop["decisions_per_s"].values())
        transactions = sum(loop["transactions_per_s"].values())
        if not decisions or not transactions:
            return None
        return cls(
            commit_s=loop["commit_share"] / transactions,
            transactions_per_decision=transactions / decisions,
            owned=len(loop["owned"]),
            rest_s=max(0.0, 1 - loop["commit_share"]) / decisions,
            on_core_s=loop["loop_on_core_share"] / decisions,
            runqueue_s=loop["loop_runqueue_share"] / decisions,
            cpu_s=loop["cpu_share"] / decisions,
        )

    def decisions_per_s(self, owned: int) -> float:
        """One saturated instance owning `owned` partitions."""
        per_partition = self.commit_s * self.transactions_per_decision / self.owned
        return 1 / (self.rest_s + owned * per_partition)

    def as_json(self) -> dict[str, float]:
        return {
            "commit_ms": round(1000 * self.commit_s, 2),
            "transactions_per_decision": round(self.transactions_per_decision, 4),
            "owned": self.owned,
            "commit_ms_per_decision_per_owned_partition": round(
                1000 * self.commit_s * self.transactions_per_decision / self.owned, 4
            ),
            "rest_ms_per_decision": round(1000 * self.rest_s, 3),
            "on_core_ms_per_decision": round(1000 * self.on_core_s, 3),
            "runqueue_ms_per_decision": round(1000 * self.runqueue_s, 3),
            "cpu_ms_per_decision": round(1000 * self.cpu_s, 3),
        }


def shares(step: dict[str, object], partitions: dict[str, int]) -> dict[str, float]:
    """Each owned partition's share of the decisions (a role's share, spread evenly over its
    partitions: jobs and TaskExecutors hash over them), keyed by `partition_of`."""
    [loop] = step["loops"]  # type: ignore[misc]
    total = sum(loop["decisions_per_s"].values()) or 1
    by_role = {role: d / total for role, d in loop["decisions_per_s"].items()}
    return {partition_of(name): by_role.get(role_of(name), 0) / partitions[role_of(name)]
            for name in loop["owned"]}  # fmt: skip


def partition_of(owned: str) -> str:
    """`<role>/<partition>` of a partition as the services log it (`<prefix><role>/<n>`): the
    same in every run, whatever its topics' prefix."""
    return owned.rsplit(".", 1)[-1]


def role_of(owned: str) -> str:
    return partition_of(owned).split("/")[0]


def model_check(parts: dict[int, dict[str, object]]) -> dict[str, object]:
    """The model of bench/README.md against each n: an instance's decisions/s at saturation
    from the 1-instance loop's measured costs (`LoopCosts`) and the partitions it owns; a job
    needs decisions on every instance's partitions, so the cluster decides at the rate its
    busiest instance saturates at (its decisions/s over its share of all decisions), bounded
    by the ResourceManager partition's ceiling. Checked against the fastest step measured;
    within 20%?"""
    if 1 not in parts:
        return {}

    def saturated(p: dict[str, object]) -> dict[str, object] | None:
        steps = p.get("jobs", {}).get("steps", [])  # type: ignore[union-attr]
        return max(steps, key=lambda s: s.get("decisions_per_s", 0), default=None)

    one = saturated(parts[1])
    costs = LoopCosts.measured(one) if one else None
    if one is None or costs is None:
        return {}
    [loop] = one["loops"]  # type: ignore[misc]
    counts = Counter(role_of(name) for name in loop["owned"])
    share = shares(one, counts)
    rm_ceiling = parts[1].get("rm_ceiling_records_per_s")
    checks: dict[str, object] = {"costs": costs.as_json()}
    for n, p in sorted(parts.items()):
        measured = saturated(p)
        if measured is None:
            continue
        owned = [[partition_of(x) for x in loop["owned"]]
                 for loop in measured["loops"]]  # type: ignore[union-attr]  # fmt: skip
        instances = [costs.decisions_per_s(len(names)) / sum(share.get(x, 0) for x in names)
                     for names in owned if any(share.get(x, 0) for x in names)]  # fmt: skip
        predicted = min(instances)
        bounds = {}
        rm_share = one["rm_partition_decisions_per_s"] / max(1, one["decisions_per_s"])
        if rm_ceiling and rm_share:
            bounds["resource_manager"] = round(rm_ceiling / rm_share)
            predicted = min(predicted, bounds["resource_manager"])
        error = (measured["decisions_per_s"] - predicted) / predicted if predicted else None
        checks[str(n)] = {
            "owned_partitions": [len(names) for names in owned],
            "saturates_at_decisions_per_s": [round(x) for x in instances],
            "bounds_decisions_per_s": bounds,
            "predicted_decisions_per_s": round(predicted),
            "measured_decisions_per_s": measured["decisions_per_s"],
            "error": round(error, 2) if error is not None else None,
            "within_20_percent": error is not None and abs(error) <= 0.2,
        }
    return checks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task-executors", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--instances", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--te-slots", type=int, default=4)
    parser.add_argument("--heartbeat-interval", type=float, default=10.0,
                        help="Flink's heartbeat.interval, seconds")  # fmt: skip
    parser.add_argument("--heartbeats", choices=("batched", "single"), default="batched",
                        help="one record per runner's beats (as the runner writes them) or one "
                        "per TaskExecutor (as a client of the old event does)")  # fmt: skip
    parser.add_argument("--beat-seconds", type=float, default=30.0, help="(a) beating window")
    parser.add_argument("--rates", type=float, nargs="+", default=[10, 25, 50, 100, 150, 200])
    parser.add_argument("--rate-seconds", type=float, default=8.0, help="(b) per step")
    parser.add_argument("--job-task-executors", type=int, default=500, help="(b) stand-ins")
    parser.add_argument("--skip", choices=("liveness", "jobs"), action="append", default=[])
    parser.add_argument("--services-arg", action="append", default=[], metavar="ARG",
                        help="an argument of `services run`, e.g. "
                        "--services-arg=--snapshot-interval-s=3600")  # fmt: skip
    parser.add_argument("--partitions", type=int, default=8, help="of the job and TE topics")
    parser.add_argument("--nodes", type=int, choices=(1, 3), default=1)
    parser.add_argument("--bootstrap", help="an already running Kafka (default: start one)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="jobledger-scale-"))
    parts: dict[int, dict[str, object]] = {}
    failure = None
    try:
        with broker_for(args, work) as bootstrap:
            home = os.environ.get("JOBLEDGER_HOME", str(work / "home"))
            env = {**os.environ, "JOBLEDGER_BOOTSTRAP": bootstrap, "JOBLEDGER_HOME": home}
            for n in args.instances:
                part: dict[str, object] = {"liveness": []}
                parts[n] = part
                if "liveness" not in args.skip:
                    for count in args.task_executors:
                        a = liveness(args, env, work, n, count)
                        print(f"(a) {n}x {count} TaskExecutors: {json.dumps(a)}", flush=True)
                        part["liveness"].append(a)  # type: ignore[union-attr]
                    part["rm_ceiling_records_per_s"] = max(
                        a["registrations_per_s"]
                        for a in part["liveness"]  # type: ignore[union-attr]
                    )
                if "jobs" not in args.skip:
                    b = jobs(args, env, work, n)
                    print(f"(b) {n}x: sustained {b['sustained_jobs_per_s']} jobs/s", flush=True)
                    part["jobs"] = b
    except (RuntimeError, KeyboardInterrupt) as exc:
        failure = str(exc) or type(exc).__name__
        print(f"FAILED: {failure}", flush=True)
    summary = {
        "heartbeats": args.heartbeats, "heartbeat_interval_s": args.heartbeat_interval,
        "te_slots": args.te_slots, "cores": os.cpu_count(), "work": str(work),
        "load_average_at_end": os.getloadavg()[0],
        "instances": {str(n): p for n, p in parts.items()},
        "model_check": model_check(parts),
    }  # fmt: skip
    if failure:
        summary["failure"] = failure[:2000]
    print(json.dumps(summary))
    return 1 if failure else 0


@contextmanager
def broker_for(args: argparse.Namespace, work: Path) -> Iterator[str]:
    """One broker of this run's own (or `--bootstrap`'s), or three with `--nodes 3`, on free
    loopback ports."""
    if args.nodes == 1 or args.bootstrap:
        with bench_broker(args.bootstrap, work / "broker") as bootstrap:
            yield bootstrap
        return
    ports = [broker.free_port() for _ in range(3)]
    procs = broker.spawn_nodes(ports, work / "broker", detach=False)
    try:
        yield ",".join(f"{broker.LOOPBACK}:{port}" for port in ports)
    finally:
        for proc in procs:
            broker.stop_child(proc)


if __name__ == "__main__":
    sys.exit(main())
