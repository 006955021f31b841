"""Broker faults on a three-node Kafka, each while a word count runs, and a check of every run.

    python bench/faults.py --nodes 3 --fault kill --runs 5
    python bench/faults.py --nodes 3 --fault kill pause lose roll --runs 1   # what CI runs

A KRaft cluster of three nodes (each broker and controller) is started here on loopback, its
topics replicated on all three (min.insync.replicas 2). Each run makes fresh topics, starts
`jobledger services run` and `jobledger runner` as subprocesses, submits the demo's fail-once
word count and, after a random number of the job's task reports (from --seed), hurts the node
that coordinates the transactions of the ResourceManager's partition (and leads some control
partitions; the run says which):

- `kill`: SIGKILL, started again after --down-s;
- `pause`: SIGSTOP for --pause-s, then SIGCONT (Jepsen's pause: a node that neither answers
  nor dies, whose leases run out while it sleeps);
- `lose`: SIGKILL, not started again while the job runs (it rejoins before the next run);
- `roll`: a rolling restart of all three nodes, one after another (SIGTERM, Kafka's controlled
  shutdown; started again; the next once every partition is back in sync).

The checker, after Jepsen's Kafka checker and Kafka's transactions system test, reads back
everything read_committed and holds every run to:
- the job FINISHED (`job wait` exit 0);
- input equals output: the counts equal a plain Python count of the text; a word short is
  `lost`, a word counted over or written on two lines is `duplicated`;
- no input decided twice: the decisions' ids derive from their cause, so one id committed
  twice is an input whose decisions were committed twice (`duplicated` too);
- every committed input has its decisions, in order: `jobledger replay --verify` re-derives
  every partition's decisions from its inputs, in log order, and finds them all, none extra;
- the stall: the longest time, from the fault to the job's end, in which the services
  committed no decision (`stall_s`). A task that waited for a node that is down would hold it
  for the outage (--down-s, --pause-s); bounded by leader election it stays near Kafka's
  broker session timeout.

One line per run, then one JSON line: runs, ok, lost, duplicated, max_stall_s, and per fault.
Every run is bounded (--job-timeout, a limit per step) and kills every child it started.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from soak import (
    PARALLELISM,
    Children,
    runner_registered,
    submit_wordcount,
    task_reports,
    until,
    verify,
)

from jobledger.cli import demo
from jobledger.projections.log.log_file import LogRecord, read_events
from jobledger.schemas.topics import TopicRole, topic_name
from jobledger.services.control import job_master, resource_manager, slot_pool, task_executor
from jobledger.services.kafka import admin_client
from jobledger.services.kafka_topics import create_topics
from jobledger.services.local import apache_kafka, broker
from jobledger.services.local.loopback import free_port, port_answers

ROOT = Path(__file__).resolve().parent.parent
FAULTS = ("kill", "pause", "lose", "roll")
START_LIMIT_S = 180.0
IN_SYNC_LIMIT_S = 120.0
TRANSACTION_STATE_PARTITIONS = 8
"""`transaction.state.log.num.partitions` of the cluster `apache_kafka` starts."""
DECIDERS = {job_master.PRODUCER, slot_pool.PRODUCER, resource_manager.PRODUCER,
            task_executor.PRODUCER, "clock", "runtime"}  # fmt: skip
"""The `producer` of every record the services write: their decisions, timers, dead letters."""


def java_hash(text: str) -> int:
    """Java's `String.hashCode` (Kafka places a transactional id by it)."""
    h = 0
    for unit in text.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def transaction_state_partition(transactional_id: str) -> int:
    """The `__transaction_state` partition whose leader coordinates `transactional_id`
    (Kafka's `TransactionStateManager.partitionFor`: `Utils.abs(hashCode) % partitions`)."""
    h = java_hash(transactional_id)
    return (0 if h == -(1 << 31) else abs(h)) % TRANSACTION_STATE_PARTITIONS


class Cluster:
    """The nodes this bench started: each can be killed, paused, stopped and started again."""

    def __init__(self, work: Path, nodes: int) -> None:
        self.work = work
        self.ports = [free_port() for _ in range(nodes)]
        self.procs = broker.spawn_nodes(self.ports, work, detach=False)
        self.bootstrap = ",".join(f"{broker.LOOPBACK}:{port}" for port in self.ports)
        self.admin = admin_client(self.bootstrap, quiet=True)

    def leader_of(self, topic: str, partition: int) -> int:
        return self.admin.list_topics(topic, timeout=30).topics[topic].partitions[partition].leader

    def coordinator_of(self, transactional_id: str) -> int:
        return self.leader_of("__transaction_state", transaction_state_partition(transactional_id))

    def led_by(self, node: int, prefix: str) -> list[str]:
        """The control partitions `node` leads."""
        return sorted(
            f"{topic}/{p}" for topic, t in self.admin.list_topics(timeout=30).topics.items()
            if topic.startswith(prefix) for p, info in t.partitions.items() if info.leader == node
        )  # fmt: skip

    def send(self, node: int, signum: int) -> None:
        self.procs[node - 1].send_signal(signum)

    def kill(self, node: int) -> None:
        self.procs[node - 1].kill()
        self.procs[node - 1].wait()

    def stop(self, node: int) -> None:
        broker.stop_child(self.procs[node - 1])

    def start(self, node: int) -> None:
        """Start a stopped node and return once every partition has all its replicas in
        sync again (a node back but still catching up would lose the next fault's data)."""
        log = broker.log_path_of(self.ports[node - 1], self.work)
        self.procs[node - 1] = apache_kafka.start_node(
            self.work / "kafka-cluster", node, log, detach=False
        )
        until(lambda: port_answers(self.ports[node - 1]), START_LIMIT_S)
        if not until(self.in_sync, IN_SYNC_LIMIT_S, every_s=0.5):
            raise RuntimeError(f"node {node} did not catch up within {IN_SYNC_LIMIT_S:.0f} s")

    def in_sync(self) -> bool:
        topics = self.admin.list_topics(timeout=10).topics.values()
        return all(len(p.isrs) == len(p.replicas) for t in topics for p in t.partitions.values())

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)  # a paused node cannot shut down
        broker.terminate_all(tuple(p.pid for p in self.procs if p.poll() is None), 30)


@dataclass
class Fault:
    """One fault, done in a thread of its own while the job runs."""

    kind: str
    cluster: Cluster
    node: int
    down_s: float
    pause_s: float
    at: float = 0.0
    steps: list[str] = field(default_factory=list)
    error: str | None = None

    def begin(self) -> threading.Thread:
        self.at = time.time()
        thread = threading.Thread(target=self._run, name=f"fault-{self.kind}", daemon=True)
        thread.start()
        return thread

    def _run(self) -> None:
        try:
            {"kill": self._kill, "pause": self._pause, "lose": self._lose, "roll": self._roll}[
                self.kind
            ]()
        except Exception as exc:  # reported with the run, which then fails
            self.error = f"{type(exc).__name__}: {exc}"

    def _step(self, what: str, action: Callable[[], None]) -> None:
        action()
        self.steps.append(f"{time.time() - self.at:.1f}s {what}")

    def _kill(self) -> None:
        self._step(f"SIGKILL node {self.node}", lambda: self.cluster.kill(self.node))
        time.sleep(self.down_s)
        self._step(f"node {self.node} back in sync", lambda: self.cluster.start(self.node))

    def _pause(self) -> None:
        self._step(
            f"SIGSTOP node {self.node}", lambda: self.cluster.send(self.node, signal.SIGSTOP)
        )
        time.sleep(self.pause_s)
        self._step(
            f"SIGCONT node {self.node}", lambda: self.cluster.send(self.node, signal.SIGCONT)
        )

    def _lose(self) -> None:
        self._step(f"SIGKILL node {self.node} for good", lambda: self.cluster.kill(self.node))

    def _roll(self) -> None:
        for node in range(1, len(self.cluster.procs) + 1):
            self._step(f"SIGTERM node {node}", lambda n=node: self.cluster.stop(n))
            self._step(f"node {node} back in sync", lambda n=node: self.cluster.start(n))

    def heal(self) -> None:
        """After the run: a lost node rejoins, so the next run has the whole cluster."""
        if self.kind == "lose":
            self.cluster.start(self.node)


def run_once(args: argparse.Namespace, cluster: Cluster, kind: str, rng: random.Random,
             work: Path) -> dict[str, object]:  # fmt: skip
    """One run (see the module's docstring)."""
    prefix = f"faults-{uuid.uuid4().hex[:8]}."
    run_dir = work / prefix.rstrip(".")
    run_dir.mkdir()
    bootstrap = cluster.bootstrap
    env = {**os.environ, "JOBLEDGER_BOOTSTRAP": bootstrap, "JOBLEDGER_HOME": str(work),
           "JOBLEDGER_TOPIC_PREFIX": prefix,
           "SPARK_LOCAL_DIRS": str(run_dir / "spark")}  # fmt: skip
    create_topics(bootstrap, prefix, partitions=4)
    configuration = ("-D", f"heartbeat.timeout={args.heartbeat_timeout:g}s")
    children = Children(run_dir, env)
    job_id = f"wordcount-{uuid.uuid4().hex[:8]}"
    text, out = args.file.resolve(), run_dir / job_id / "counts"
    # after this many of the job's task reports (of 3 per subtask attempt; the fail-once
    # source fails each first attempt)
    fault_after = rng.randrange(1, 2 * PARALLELISM)
    rm_id = f"jobledger-{topic_name(TopicRole.RESOURCE_MANAGER, prefix)}-0"
    node = cluster.coordinator_of(rm_id)
    fault = Fault(kind, cluster, node, args.down_s, args.pause_s)
    result: dict[str, object] = {"fault": kind, "node": node, "ok": False, "code": None,
                                 "led": cluster.led_by(node, prefix), "lost": 0,
                                 "duplicated": 0, "stall_s": None, "verify": "not run"}  # fmt: skip
    started = time.monotonic()
    try:
        children.start("services", "services", "run", *configuration)
        children.start(
            "runner", "runner", "--runner-id", "faults", "--slots", str(2 * PARALLELISM),
            "--master", args.master, "--data-root", str(text.parent),
            "--data-root", str(run_dir), "--checkpoint", str(run_dir / "checkpoint"),
        )  # fmt: skip

        def log() -> list[LogRecord]:
            return read_events(bootstrap, prefix)

        if not runner_registered(bootstrap, prefix):
            result["why"] = "the runner never registered"
            return result
        submit_wordcount(bootstrap, prefix, job_id, text, out, fail_once=True)
        until(lambda: len(task_reports(log())) >= fault_after, args.job_timeout)
        acting = fault.begin()
        waited = subprocess.run(
            [sys.executable, "-m", "jobledger.cli", "job", "wait", job_id,
             "--timeout", str(args.job_timeout), *configuration],
            env=env, capture_output=True, text=True, timeout=args.job_timeout + 120,
        )  # fmt: skip
        ended = time.time()
        acting.join(IN_SYNC_LIMIT_S * len(cluster.procs) + args.down_s + args.pause_s)
        result["code"] = waited.returncode
        # librdkafka's connection lines (stderr) would push the verdict (stdout) out
        result["tail"] = (
            f"job wait exit {waited.returncode}: {waited.stdout[-1000:]}"
            + "\n".join(line for line in waited.stderr.splitlines() if not line.startswith("%"))[
                -2000:
            ]
        )
        result |= check(log(), text, out, fault.at, ended)
        result["verify"] = verify(prefix, env, configuration)
    except subprocess.TimeoutExpired:
        result["why"] = "a step outlived its limit"
    finally:
        children.close()
        result["steps"], result["fault_error"] = fault.steps, fault.error
        if fault.at:
            fault.heal()
        result["seconds"] = round(time.monotonic() - started, 1)
        # here, so a run that returned early (its runner never registered) has its verdict
        # and its processes' output too
        result["ok"] = (result["code"] == 0 and result["verify"] == "clean"
                        and not result["lost"] and not result["duplicated"]
                        and fault.error is None)  # fmt: skip
        if not result["ok"]:
            result["tail"] = f"{result.get('tail', '')}\n{children.tails()}"
    return result


def check(records: list[LogRecord], text: Path, out: Path, fault_at: float,
          ended: float) -> dict[str, object]:  # fmt: skip
    """The checker's verdicts that need no replay (see the module's docstring)."""
    written = [json.loads(line)[0] for part in sorted(out.glob("part-*"))
               for line in part.read_text(encoding="utf-8").splitlines()]  # fmt: skip
    expected, counted = demo.python_count(text), demo.read_counts(out)
    lost = sum(max(0, expected[w] - counted[w]) for w in expected)
    over = sum(max(0, counted[w] - expected[w]) for w in counted)
    twice = sum(n - 1 for n in Counter(written).values() if n > 1)
    decided = Counter(r.event.event_id for r in records if r.event.producer in DECIDERS)
    decided_twice = sorted(i for i, n in decided.items() if n > 1)
    moments = sorted(r.timestamp / 1000 for r in records if r.event.producer in DECIDERS
                     and fault_at < r.timestamp / 1000 <= ended)  # fmt: skip
    gaps = [b - a for a, b in zip([fault_at, *moments], [*moments, ended], strict=True)]
    return {"lost": lost, "duplicated": over + twice + len(decided_twice),
            "decided_twice": decided_twice[:5], "stall_s": round(max(gaps), 1)}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3, choices=[3])
    parser.add_argument("--fault", nargs="+", choices=FAULTS, default=list(FAULTS))
    parser.add_argument("--runs", type=int, default=1, help="runs of each fault")
    parser.add_argument("--seed", type=int, default=0, help="when in the job each fault falls")
    parser.add_argument("--down-s", type=float, default=20.0, help="kill: restarted after this")
    parser.add_argument("--pause-s", type=float, default=30.0, help="pause: SIGCONT after this")
    parser.add_argument("--heartbeat-timeout", type=float, default=10.0, help="services' -D (s)")
    parser.add_argument("--master", default="local[*]", help="the runner's Spark master")
    parser.add_argument("--file", type=Path, default=ROOT / "examples" / "words.txt")
    parser.add_argument("--job-timeout", type=float, default=240)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="jobledger-faults-"))
    rng = random.Random(args.seed)
    results = []
    cluster = Cluster(work, args.nodes)
    try:
        for kind in args.fault:
            for i in range(args.runs):
                result = run_once(args, cluster, kind, rng, work)
                results.append(result)
                print(f"{kind} run {i + 1}: {'ok' if result['ok'] else 'FAILED'}, "
                      f"job wait exit {result['code']}, "
                      f"{result['seconds']} s, node {result['node']} (leads "
                      f"{len(result['led'])} control partitions), stall {result['stall_s']} s, "
                      f"lost {result['lost']}, duplicated {result['duplicated']}, verify: "
                      f"{result['verify']}; {'; '.join(result['steps'])}", flush=True)  # fmt: skip
                if not result["ok"]:
                    log = work / f"{kind}-{i + 1}.out"
                    log.write_text(f"{result.get('why', '')}\n{result.get('fault_error')}\n"
                                   f"{result['tail']}")  # fmt: skip
                    print(f"          output: {log}", flush=True)
    finally:
        cluster.close()
    print(json.dumps(summary(results) | {"by_fault": {
        kind: summary([r for r in results if r["fault"] == kind]) for kind in args.fault
    }}))  # fmt: skip
    return 0 if all(r["ok"] for r in results) else 1


def summary(results: list[dict[str, object]]) -> dict[str, object]:
    stalls = [float(r["stall_s"]) for r in results if r["stall_s"] is not None]
    return {"runs": len(results), "ok": sum(bool(r["ok"]) for r in results),
            "lost": sum(int(r["lost"]) for r in results),
            "duplicated": sum(int(r["duplicated"]) for r in results),
            "max_stall_s": max(stalls) if stalls else None}  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
