"""Load: many jobs on one runner, one wide job over many TaskExecutors, under CPU contention,
on one `services run` instance and then on two, so a second instance is seen to share the work.

    python bench/load.py --jobs 50 [--burn 2] [--slots 4] [--job-parallelism 2]
    python bench/load.py --parallelism 1000 [--burn 2] [--task-executors 500 --te-slots 4]
    ... [--instances 1 2] [-D taskmanager.slot.timeout=1s]   (the services' options)

A clean control plane fails no healthy job, however late its answers come: the TaskExecutors'
slot timeouts once fired while a JobMaster's answer was still in flight, and under load 4 of
50 jobs failed ("no JobManager associated for the job") and a P=1000 job failed ("Could not
mark slot ... active"). Unit tests replay the bad interleavings
(tests/control/test_partition_races.py); this benchmark is what shows it under real load, on a
real broker, with the services as subprocesses, where the ordering is Kafka's and the lateness
the machine's.

Two loads, each run as one phase per `--instances` count (default 1, then 2) on fresh topics:
- `--jobs N`: N word counts (the demo's JobGraph, `--job-parallelism` each, a blocking
  ALL_TO_ALL exchange, LAZY_FROM_SOURCES) submitted at once through the dispatcher, as `job
  submit` writes them, to one real Spark runner (`jobledger runner`) of few `--slots`: the jobs
  queue for slots, so slots are requested, allocated, offered, freed and allocated again to
  another job all through the run, which is where a timeout firing early bites. Every finished
  job's counts are checked against a plain Python count.
- `--parallelism P`: one job of two no-op vertices of P subtasks each, ALL_TO_ALL, PIPELINED and
  EAGER (`--schedule lazy` for the other): EAGER is the heavier test, since all 2P slot
  requests go out at once and every slot is held, allocated and waiting, until all of them are
  there. The 2P subtasks run on stand-in TaskExecutors (`--task-executors` x `--te-slots`,
  default 500 x 4 for P=1000) in one process of their own (bench/stand_in.py) that registers,
  heartbeats and reports exactly as the runner does for a no-op attempt: a Spark runner with
  500 TaskExecutors is beside the point, which is the services' bookkeeping of 2000 slots.
`--burn N` adds N busy-loop processes for the whole benchmark (bounded by its limit): on this
2-core machine they make the services lag, which is the point (c) of the issue.

Every job gets the restart strategy NONE, so a spurious failure cannot hide behind a restart.
Spurious, counted per kind and listed with its evidence: a job FAILED, a restart, and any of
TaskSubmissionRejected, AllocationFailed, SlotOfferRejected, SlotRequestFailed, SlotFreed for a
timeout, SlotRequestTimedOut, TaskManagerLost, TaskManagerConnectionClosed (no TaskExecutor
dies here), EventRejected and DeadLettered. The evidence of each (the decision, its cause
chain, the records of its partition around it: type, partition, offset, timestamp) is written
to `evidence-<phase>.txt` and the phase's log exported to `log-<phase>.avro` for `replay`.

Measured per phase, from the records' broker timestamps: seconds from the first submission to
the last TaskDeploymentRequested (all deployed) and to the last job's end (all finished), the
services' peak RSS (VmHWM of each `services run` process, read before it is stopped), and
decisions per second (records naming a cause, written by the reducers, between the first
submission and the last end). Prints a line per phase and last one JSON line; with two
instances, `scale_out` gives one instance's seconds over two's and two's decisions/s over
one's. Every phase is bounded (`--limit`); every child is killed in a finally, with all it
started (tests/support/processes.py `kill_tree`). Exit 0 only if every phase ended with no spurious
failure and every job FINISHED.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from brokers import bench_broker
from confluent_kafka import Message

from jobledger.cli import demo
from jobledger.projections.log.log_file import LogRecord, read_events
from jobledger.schemas import EventSerde
from jobledger.schemas.cluster import (
    TaskManagerConnectionClosed,
    TaskManagerLost,
    TaskManagerRegistrationAccepted,
)
from jobledger.schemas.deadletters import DeadLettered
from jobledger.schemas.jobs import JobStatusChanged, JobSubmitted
from jobledger.schemas.rejections import EventRejected
from jobledger.schemas.slots import (
    AllocationFailed,
    SlotFreed,
    SlotOfferRejected,
    SlotRequestFailed,
    SlotRequestTimedOut,
)
from jobledger.schemas.tasks import (
    TaskDeploymentRequested,
    TaskSubmissionRejected,
)
from jobledger.schemas.topics import TopicRole
from jobledger.schemas.types import (
    DistributionPattern,
    JobEdge,
    JobStatus,
    JobVertex,
    RestartStrategy,
    RestartStrategyKind,
    ResultPartitionType,
    ScheduleMode,
)
from jobledger.services.client import dispatcher
from jobledger.services.control.driver import DECIDING_PRODUCERS
from jobledger.services.control.job_status import GLOBALLY_TERMINAL
from jobledger.services.kafka import (
    transactional_producer,
)
from jobledger.services.kafka_topics import create_topics

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the tests' and the other benchmarks' helpers
from bench import stand_in  # noqa: E402
from bench.follower import TopicFollower  # noqa: E402
from bench.recovery import Instance  # noqa: E402
from bench.soak import Children, until  # noqa: E402
from tests.support.processes import kill_tree  # noqa: E402

START_LIMIT_S = 180.0
"""How long the TaskExecutors (a Spark runner's JVM and query, or the stand-ins) and the
services' partition ownership may take to be ready."""
WORDS = ROOT / "examples" / "words.txt"
BURN = "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end:\n    pass\n"  # noqa: E501
"""A busy loop that ends on its own after argv[1] seconds, should the benchmark be killed
before its finally runs."""


# -- the spurious ---------------------------------------------------------------------------


SPURIOUS_TYPES = (
    TaskSubmissionRejected, AllocationFailed, SlotOfferRejected, SlotRequestFailed,
    SlotRequestTimedOut, TaskManagerLost, TaskManagerConnectionClosed, DeadLettered,
)  # fmt: skip


def spurious_kind(record: LogRecord) -> str | None:
    """The kind of spurious failure `record` is, or None. Nothing in this benchmark fails a
    task, loses a TaskExecutor or forges an input, so each of these is the control plane
    failing a healthy job or on its way to it."""
    e = record.event
    if isinstance(e, JobStatusChanged):
        if e.to_status is JobStatus.FAILED:
            return "job FAILED"
        if e.to_status is JobStatus.RESTARTING:
            return "restart"
        return None
    if isinstance(e, SlotFreed):
        return "SlotFreed (timed out)" if "timed out" in e.cause else None
    if isinstance(e, SPURIOUS_TYPES):
        return e.type_name()
    if isinstance(e, EventRejected):
        return f"EventRejected ({e.rejected_event_type})"
    return None


def describe(r: LogRecord) -> str:
    """One line of a record: where it is, when, who wrote it, and its fields that say why."""
    e = r.event
    fields = {k: v for k, v in e.model_dump(mode="json").items()
              if k not in ("event_id", "event_time", "producer", "cause_event_id", "vertices",
                           "operators", "inputs", "outputs", "slot_report")}  # fmt: skip
    return (f"{r.role.value}/{r.partition}@{r.offset} ts={r.timestamp} "
            f"{e.type_name()} by {e.producer} id={e.event_id[:12]} "
            f"cause={(e.cause_event_id or '-')[:12]} {json.dumps(fields)[:600]}")  # fmt: skip


def evidence(
    records: list[LogRecord], found: list[LogRecord], around: int = 12, per_kind: int = 20
) -> str:
    """For each spurious record (the first `per_kind` of each kind: a failure that takes every
    slot down at once made 80 MB of it): its cause chain back to an input, and the records of
    its partition around it (and around its cause, which may sit elsewhere), in offset order."""
    counts = Counter(spurious_kind(r) for r in found)
    shown: Counter[str | None] = Counter()
    kept = []
    for r in sorted(found, key=lambda r: r.timestamp):
        shown[spurious_kind(r)] += 1
        if shown[spurious_kind(r)] <= per_kind:
            kept.append(r)
    found = kept
    by_id = {r.event.event_id: r for r in records}
    by_partition: dict[tuple[TopicRole, int], list[LogRecord]] = defaultdict(list)
    for r in records:
        by_partition[(r.role, r.partition)].append(r)
    for rows in by_partition.values():
        rows.sort(key=lambda r: r.offset)
    out = [f"{n} x {kind}" for kind, n in counts.most_common()]
    for r in found:
        out.append(f"=== {spurious_kind(r)}: {describe(r)}")
        chain, cause = [], r.event.cause_event_id
        while cause and cause in by_id and len(chain) < 20:
            chain.append(by_id[cause])
            cause = by_id[cause].event.cause_event_id
        out += ["  caused by " + describe(c) for c in chain]
        for anchor in [r, *chain[:1]]:
            rows = by_partition[(anchor.role, anchor.partition)]
            i = next(k for k, x in enumerate(rows) if x.offset == anchor.offset)
            out.append(f"  -- {anchor.role.value}/{anchor.partition} around @{anchor.offset}:")
            out += [("  >> " if x is anchor else "     ") + describe(x)
                    for x in rows[max(0, i - around): i + around + 1]]  # fmt: skip
    return "\n".join(out)


# -- the jobs ---------------------------------------------------------------------------------


NO_RESTART = RestartStrategy(kind=RestartStrategyKind.NONE)


def wordcount(job_id: str, out: Path, parallelism: int) -> JobSubmitted:
    """The demo's word count, restarted never: a failure shows as FAILED."""
    job = demo.wordcount_job(job_id, WORDS, out, parallelism, fail_once=False)
    return job.model_copy(update={"restart_strategy": NO_RESTART, "producer": "load"})


def wide_job(job_id: str, parallelism: int, eager: bool) -> JobSubmitted:
    """Two no-op vertices of `parallelism` subtasks, ALL_TO_ALL (each consumer reads every
    producer): PIPELINED and EAGER, or BLOCKING and LAZY_FROM_SOURCES."""
    kind = ResultPartitionType.PIPELINED if eager else ResultPartitionType.BLOCKING
    produce = JobVertex(vertex_id="produce", name="produce", invokable_class_name="noop",
                        parallelism=parallelism)  # fmt: skip
    consume = JobVertex(
        vertex_id="consume", name="consume", invokable_class_name="noop", parallelism=parallelism,
        inputs=[JobEdge(source_vertex_id="produce", result_partition_type=kind,
                        distribution_pattern=DistributionPattern.ALL_TO_ALL)],
    )  # fmt: skip
    return JobSubmitted(
        event_id=uuid.uuid4().hex, event_time=dispatcher.now_ms(), producer="load",
        job_id=job_id, job_name=f"wide P={parallelism}", vertices=[produce, consume],
        schedule_mode=ScheduleMode.EAGER if eager else ScheduleMode.LAZY_FROM_SOURCES,
        restart_strategy=NO_RESTART,
    )  # fmt: skip


# -- one phase --------------------------------------------------------------------------------


class Watch(TopicFollower):
    """Decodes only what says a job ended and which TaskExecutors are registered: the rest
    is read once, when the phase is over."""

    WANTED = frozenset({JobStatusChanged.type_name().encode(),
                        TaskManagerRegistrationAccepted.type_name().encode()})  # fmt: skip

    def __init__(self, bootstrap: str, prefix: str) -> None:
        self.ends: dict[str, JobStatus] = {}
        self.registered: set[str] = set()
        self.serde = EventSerde()
        super().__init__(bootstrap, prefix)

    def seen(self, kind: bytes | None, msg: Message) -> None:
        if kind not in self.WANTED:
            return
        e = self.serde.decode(msg.value(), msg.topic())
        if isinstance(e, TaskManagerRegistrationAccepted):
            self.registered.add(e.resource_id)
        elif e.to_status in GLOBALLY_TERMINAL and e.producer in DECIDING_PRODUCERS:
            self.ends[e.job_id] = e.to_status


def vm_hwm_kb(pid: int) -> int | None:
    """The process's peak resident set (VmHWM), in kB; None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def ownership_settled(instances: list[Instance], partitions: int) -> bool:
    """Every instance owns something, as its latest log line says, and together they own
    every input partition once: the group is done rebalancing."""
    total = 2 * partitions + 1  # job, TaskExecutor, and the ResourceManager's one
    views = [i.ownership() for i in instances if i.log_path.is_file()]
    if len(views) < len(instances) or not all(settled and owned for owned, settled in views):
        return False
    owned = [p for names, _ in views for p in names]
    return len(owned) == len(set(owned)) == total


@dataclass
class Services(Instance):
    """A `services run` instance as bench/recovery.py starts it, with the `-D`s given."""

    options: tuple[str, ...] = ()

    def start(self) -> None:
        self.starts += 1
        self.log_path = self.work / f"service-{self.name}-{self.starts}.log"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "jobledger.cli", "services", "run", *self.options],
                env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                start_new_session=True,
            )  # fmt: skip


class PhaseFailed(Exception):
    """A phase could not be run to its end (not a spurious failure: something broke)."""


def run_phase(args: argparse.Namespace, env: dict[str, str], work: Path,
              n_instances: int) -> dict[str, object]:  # fmt: skip
    """One load on fresh topics with `n_instances` services; its figures."""
    name = f"{'jobs' if args.jobs else 'wide'}-{n_instances}x"
    prefix = f"load-{uuid.uuid4().hex[:8]}."
    run_dir = work / prefix.rstrip(".")
    run_dir.mkdir()
    bootstrap = env["JOBLEDGER_BOOTSTRAP"]
    create_topics(bootstrap, prefix, partitions=args.partitions)
    env = {**env, "JOBLEDGER_TOPIC_PREFIX": prefix, "SPARK_LOCAL_DIRS": str(run_dir / "spark")}
    children = Children(run_dir, env)
    options = tuple(arg for pair in args.conf for arg in ("-D", pair))
    instances = [Services(f"{name}-{k}", env, run_dir, options=options)
                 for k in range(n_instances)]  # fmt: skip
    watch = Watch(bootstrap, prefix)
    deadline = time.monotonic() + args.limit
    result: dict[str, object] = {"phase": name, "instances": n_instances, "prefix": prefix}
    try:
        for instance in instances:
            instance.start()
        if n_instances > 1 and not until(lambda: ownership_settled(instances, args.partitions),
                                         START_LIMIT_S):  # fmt: skip
            raise PhaseFailed(f"the services never settled their ownership: {run_dir}")
        if args.jobs:
            expected = 1
            children.start(
                "runner", "runner", "--runner-id", "load", "--slots", str(args.slots),
                "--master", args.master, "--data-root", str(WORDS.parent),
                "--data-root", str(run_dir), "--checkpoint", str(run_dir / "checkpoint"),
            )  # fmt: skip
        else:
            expected = args.task_executors
            with (run_dir / "stand-in.log").open("w") as log:
                children.started.append(stand_in.start(
                    prefix, bootstrap, args.task_executors, te_slots=args.te_slots,
                    heartbeat_interval=args.heartbeat_interval, heartbeats=args.heartbeats,
                    env=env, cwd=run_dir, log=log,
                ))  # fmt: skip
        if not until(lambda: len(watch.registered) >= expected, START_LIMIT_S):
            raise PhaseFailed(f"{len(watch.registered)} of {expected} TaskExecutors registered "
                              f"in {START_LIMIT_S:.0f} s:\n{children.tails()}")  # fmt: skip
        if not until(lambda: ownership_settled(instances, args.partitions), START_LIMIT_S):
            raise PhaseFailed(f"the services never settled their ownership: {run_dir}")
        client = transactional_producer(bootstrap, "load-client")
        serde = EventSerde()
        if args.jobs:
            jobs = [wordcount(f"wc-{k:03d}-{uuid.uuid4().hex[:6]}", run_dir / f"out-{k:03d}",
                              args.job_parallelism) for k in range(args.jobs)]  # fmt: skip
        else:
            jobs = [wide_job(f"wide-{uuid.uuid4().hex[:8]}", args.parallelism,
                             args.schedule == "eager")]  # fmt: skip
        submitted_ms = dispatcher.now_ms()
        for job in jobs:
            dispatcher.submit(client, prefix, job, serde)
        client.flush(10)
        print(f"[{name}] {len(jobs)} job(s) submitted in "
              f"{(dispatcher.now_ms() - submitted_ms) / 1000:.1f} s", flush=True)  # fmt: skip

        def ended() -> bool:
            if watch.error is not None:
                raise PhaseFailed(f"the watch failed: {watch.error!r}")
            for instance in instances:
                if not instance.alive():
                    raise PhaseFailed(f"services {instance.name} died: {instance.log_path}")
            for child in children.started:
                if child.poll() is not None:
                    raise PhaseFailed(f"{child.args[:4]} exited with {child.returncode}:\n"
                                      f"{children.tails()}")  # fmt: skip
            return len(watch.ends) >= len(jobs)

        done = until(ended, max(1.0, deadline - time.monotonic()), every_s=0.5)
        result["timed_out"] = not done
        result["rss_mb"] = [round((vm_hwm_kb(i.pid) or 0) / 1024, 1) for i in instances]
        watch.close()
        quiesce(children, instances)
        if not args.jobs:
            result["stand_in"] = (run_dir / "stand-in.log").read_text().strip()[-400:]
        records = read_events(bootstrap, prefix)
        result |= figures(records, jobs, submitted_ms, args)
        if args.jobs:
            result["wrong_counts"] = wrong_counts(jobs, run_dir, watch.ends)
        found = [r for r in records if spurious_kind(r)]
        if found:
            written = run_dir.parent / f"evidence-{name}.txt"
            written.write_text(evidence(records, found))
            export = run_dir.parent / f"log-{name}.avro"
            subprocess.run([sys.executable, "-m", "jobledger.cli", "export", str(export)],
                           env=env, capture_output=True, timeout=300)  # fmt: skip
            result["evidence"] = f"{written} (log: {export})"
            firsts: dict[str | None, LogRecord] = {}
            for r in sorted(found, key=lambda r: r.timestamp):
                firsts.setdefault(spurious_kind(r), r)  # the first of each kind
            result["first_spurious"] = [describe(r) for r in firsts.values()][:8]
        return result
    finally:
        watch.close()
        children.close()
        for instance in instances:
            if instance.alive():
                kill_tree(instance.pid)
                assert instance.process is not None
                instance.process.wait(30)


def quiesce(children: Children, instances: list[Instance]) -> None:
    """Stop every writer before the log is read back: TaskExecutors beat and the services'
    clock ticks for as long as they run, and a reader waiting for every partition's end at
    once never got there on a log that grows (the P=1000 phase's stand-ins append ~100
    heartbeats a second). Each is asked to stop first (SIGTERM: the runner cancels its tasks
    and the services finish their transaction, so nothing is left open for a read_committed
    reader to wait on; the stand-in prints its counts), killed with all it started after
    30 s."""
    for child in children.started:
        if child.poll() is None:
            child.terminate()
            try:
                child.wait(30)
            except subprocess.TimeoutExpired:
                children.kill(child)
    for instance in instances:
        instance.stop()


def figures(records: list[LogRecord], jobs: list[JobSubmitted], submitted_ms: int,
            args: argparse.Namespace) -> dict[str, object]:  # fmt: skip
    """What the log says of a phase (see the module docstring)."""
    ours = {j.job_id for j in jobs}
    ends = {r.event.job_id: r for r in records if isinstance(r.event, JobStatusChanged)
            and r.event.job_id in ours and r.event.to_status in GLOBALLY_TERMINAL
            and r.event.producer in DECIDING_PRODUCERS}  # fmt: skip
    deployed = [r.timestamp for r in records if isinstance(r.event, TaskDeploymentRequested)]
    end_ms = max((r.timestamp for r in ends.values()), default=None)
    kinds = Counter(k for r in records if (k := spurious_kind(r)))
    decisions = [r for r in records if r.event.cause_event_id
                 and r.event.producer in DECIDING_PRODUCERS
                 and submitted_ms <= r.timestamp <= (end_ms or r.timestamp)]  # fmt: skip
    span_s = ((end_ms or submitted_ms) - submitted_ms) / 1000
    statuses = Counter(r.event.to_status.value for r in ends.values())
    return {
        "jobs": len(jobs),
        "finished": statuses.get("FINISHED", 0),
        "failed": statuses.get("FAILED", 0),
        "unfinished": len(jobs) - len(ends),
        "spurious_failures": sum(kinds.values()),
        "spurious": dict(kinds),
        "deployments": len(deployed),
        "seconds_to_all_deployed": round((max(deployed) - submitted_ms) / 1000, 2)
        if deployed else None,
        "seconds_to_all_finished": round(span_s, 2) if end_ms else None,
        "decisions": len(decisions),
        "decisions_per_s": round(len(decisions) / span_s, 1) if span_s > 0 else None,
        "records": len(records),
        "failure_causes": sorted({(r.event.cause or "")[:300] for r in ends.values()
                                  if r.event.to_status is JobStatus.FAILED}),
    }  # fmt: skip


def wrong_counts(jobs: list[JobSubmitted], run_dir: Path, ends: dict[str, JobStatus]) -> int:
    """Finished word counts whose output differs from a plain Python count of the file."""
    expected = demo.python_count(WORDS)
    finished = [k for k, job in enumerate(jobs) if ends.get(job.job_id) is JobStatus.FINISHED]
    return sum(demo.read_counts(run_dir / f"out-{k:03d}") != expected for k in finished)


# -- the benchmark ----------------------------------------------------------------------------


def phase_line(r: dict[str, object]) -> str:
    rss = "/".join(f"{m:.0f}" for m in r.get("rss_mb", []))  # type: ignore[attr-defined]
    return (f"[{r['phase']}] jobs {r.get('jobs')}, finished {r.get('finished')}, failed "
            f"{r.get('failed')}, unfinished {r.get('unfinished')}, spurious "
            f"{r.get('spurious_failures')} {r.get('spurious') or ''}; all deployed "
            f"{r.get('seconds_to_all_deployed')} s, all finished "
            f"{r.get('seconds_to_all_finished')} s ({r.get('deployments')} deployments); "
            f"{r.get('decisions')} decisions, {r.get('decisions_per_s')}/s; services peak "
            f"RSS {rss} MB" + (f"; wrong counts {r['wrong_counts']}" if "wrong_counts" in r
                               else ""))  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    load = parser.add_mutually_exclusive_group()
    load.add_argument("--jobs", type=int, help="(a) this many word counts on one Spark runner")
    load.add_argument("--parallelism", type=int, help="(b) one wide job of 2 x P subtasks")
    parser.add_argument("--burn", type=int, default=0, help="(c) busy-loop processes")
    parser.add_argument("--instances", type=int, nargs="+", default=[1, 2],
                        help="`services run` instances of each phase, in order")  # fmt: skip
    parser.add_argument("--slots", type=int, default=4, help="(a) the runner's slots")
    parser.add_argument("--job-parallelism", type=int, default=2, help="(a) each word count's")
    parser.add_argument("--master", default="local[*]", help="(a) the runner's Spark master")
    parser.add_argument("--task-executors", type=int, help="(b) default: P/2, so 4 slots each "
                        "hold the 2P subtasks exactly")  # fmt: skip
    parser.add_argument("--te-slots", type=int, default=4, help="(b) slots per TaskExecutor")
    parser.add_argument("--schedule", choices=("eager", "lazy"), default="eager", help="(b)")
    parser.add_argument("--heartbeat-interval", type=float, default=5.0,
                        help="(b) the stand-ins' beat, seconds")  # fmt: skip
    parser.add_argument("--heartbeats", choices=("batched", "single"), default="batched",
                        help="(b) the stand-ins' beats: one record per runner as the runner "
                        "writes them, or one per TaskExecutor")  # fmt: skip
    parser.add_argument("--partitions", type=int, default=8, help="of the job and TE topics")
    parser.add_argument("--limit", type=float, default=900.0, help="seconds per phase, hard")
    parser.add_argument("-D", dest="conf", metavar="KEY=VALUE", action="append", default=[],
                        help="an option of the services (`services run -D`), e.g. "
                        "taskmanager.slot.timeout=1s to widen the window a late answer "
                        "once lost in; default: the services' defaults")  # fmt: skip
    parser.add_argument("--bootstrap", help="an already running Kafka (default: start one)")
    args = parser.parse_args()
    if not args.jobs and not args.parallelism:
        parser.error("give --jobs N or --parallelism P")
    if args.parallelism and args.task_executors is None:
        args.task_executors = max(1, -(-2 * args.parallelism // args.te_slots))

    work = Path(tempfile.mkdtemp(prefix="jobledger-load-"))
    burners: list[subprocess.Popen] = []
    phases: list[dict[str, object]] = []
    failure: str | None = None
    try:
        with bench_broker(args.bootstrap, work / "broker") as bootstrap:
            env = {**os.environ, "JOBLEDGER_BOOTSTRAP": bootstrap,
                   "JOBLEDGER_HOME": os.environ.get("JOBLEDGER_HOME", str(work / "home")),
                   "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}  # fmt: skip
            bound = str(args.limit * len(args.instances) + 300)
            burners = [
                subprocess.Popen([sys.executable, "-c", BURN, bound]) for _ in range(args.burn)
            ]
            for n in args.instances:
                try:
                    result = run_phase(args, env, work, n)
                except PhaseFailed as exc:
                    failure = str(exc)
                    print(f"[{n} instance(s)] FAILED: {exc}", flush=True)
                    break
                phases.append(result)
                print(phase_line(result), flush=True)
                if result.get("first_spurious"):
                    print(
                        f"  spurious, the first of each kind (evidence: {result['evidence']}):",
                        flush=True,
                    )
                    for line in result["first_spurious"]:  # type: ignore[attr-defined]
                        print(f"    {line}", flush=True)
    except KeyboardInterrupt:
        failure = "interrupted"
    finally:
        for burner in burners:
            kill_tree(burner.pid)
            burner.wait(10)
    print(f"work directory: {work}", flush=True)
    summary = summarize(args, phases)
    if failure is not None:
        summary["failure"] = failure[:2000]
    print(json.dumps(summary))
    clean = failure is None and all(
        p["spurious_failures"] == 0 and p["finished"] == p["jobs"] for p in phases
    )
    return 0 if clean else 1


def summarize(args: argparse.Namespace, phases: list[dict[str, object]]) -> dict[str, object]:
    """The JSON line: the first phase's figures at the top, each later phase's under
    `<n>_instances`, and the scale-out ratios of the first two."""
    keys = ("jobs", "finished", "failed", "unfinished", "spurious_failures", "spurious",
            "seconds_to_all_deployed", "seconds_to_all_finished", "decisions", "decisions_per_s",
            "deployments", "timed_out", "wrong_counts", "failure_causes")  # fmt: skip

    def short(p: dict[str, object]) -> dict[str, object]:
        return {k: p[k] for k in keys if k in p} | {"services_peak_rss_mb": p["rss_mb"]}

    summary: dict[str, object] = {
        "load": f"jobs={args.jobs}" if args.jobs else f"parallelism={args.parallelism}",
        "burn": args.burn,
        "services_options": args.conf,
        "instances": [p["instances"] for p in phases],
        "spurious_failures_total": sum(int(p["spurious_failures"]) for p in phases),  # type: ignore[call-overload]
    }
    if phases:
        summary |= short(phases[0])
    for p in phases[1:]:
        summary[f"{p['instances']}_instances"] = short(p)
    if len(phases) >= 2:
        one, two = phases[0], phases[1]
        s1, s2 = one.get("seconds_to_all_finished"), two.get("seconds_to_all_finished")
        d1, d2 = one.get("decisions_per_s"), two.get("decisions_per_s")
        summary["scale_out"] = {
            "seconds_ratio": round(s1 / s2, 2) if s1 and s2 else None,  # type: ignore[operator]
            "decisions_per_s_ratio": round(d2 / d1, 2) if d1 and d2 else None,  # type: ignore[operator]
        }
    if args.jobs:
        summary |= {"slots": args.slots, "job_parallelism": args.job_parallelism}
    else:
        summary |= {"task_executors": args.task_executors, "te_slots": args.te_slots,
                    "schedule": args.schedule}  # fmt: skip
    return summary


if __name__ == "__main__":
    sys.exit(main())
