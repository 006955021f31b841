"""`jobledger demo wordcount FILE`: the whole system on one machine, end to end.

It starts (or reuses) the broker, creates a fresh set of topics, runs the services and the
Spark runner (`local[*]`, or the `--master` given) in this process, submits a word-count
JobGraph (a text source split into words and keyed, an ALL_TO_ALL blocking exchange, a keyed
count registered as queryable state and written to files), waits for the job to end and prints
the top words, each task's timeline, the slot assignment and a queryable-state lookup answered
through the job's KvState location registry. The counts are checked against a plain Python
count of the same file; the exit status is non-zero if anything differs or fails.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from jobledger.projections.debugging.timeline import draw, stalled_job, timeline
from jobledger.projections.log.job_results import JobWatcher, SubmissionRefused
from jobledger.projections.log.log_file import LogRecord, read_events
from jobledger.projections.log.positions import log_order
from jobledger.projections.log.replay import replay
from jobledger.schemas import EventSerde
from jobledger.schemas.jobs import JobStatusChanged, JobSubmitted
from jobledger.schemas.topics import TopicRole
from jobledger.schemas.types import (
    DistributionPattern,
    JobEdge,
    JobStatus,
    JobVertex,
    OperatorSpec,
    RestartStrategy,
    RestartStrategyKind,
    ResultPartitionType,
    ScheduleMode,
)
from jobledger.services.client.dispatcher import now_ms, submit
from jobledger.services.control.key_groups import assign_to_key_group
from jobledger.services.host.transaction_loop import RuntimeConfig, ServiceRuntime
from jobledger.services.kafka import admin_client, client_properties, transactional_producer
from jobledger.services.kafka_topics import create_topics, delete_prefixed
from jobledger.services.runner import functions, kv_state
from jobledger.services.runner.exchange import job_result_prefix
from jobledger.services.runner.reports import first_line
from jobledger.services.runner.runner import RunnerConfig, TaskRunner

REGISTRATION = "word-counts"
MAX_PARALLELISM = 128


def wordcount_job(
    job_id: str, text: Path, out: Path, parallelism: int, fail_once: bool, pipelined: bool = False
) -> JobSubmitted:
    """source: lines -> words -> keyed; count: keyed count (queryable) -> files. Blocking
    exchange with lazy scheduling (counts start once every source finished), or `pipelined`:
    everything deployed at once (EAGER), the counts waiting for the sources' results."""
    failing = {"fail_on_attempt": "0"} if fail_once else {}
    source = JobVertex(
        vertex_id="source", name="read and split", invokable_class_name="chain",
        parallelism=parallelism,
        operators=[
            OperatorSpec(name="text_file", config={"path": str(text)}),
            OperatorSpec(name="flat_map", config={"function": f"{functions.__name__}:words"}),
            OperatorSpec(name="key_by", config={}),
        ],
    )  # fmt: skip
    count = JobVertex(
        vertex_id="count", name="count words", invokable_class_name="chain",
        parallelism=parallelism, max_parallelism=MAX_PARALLELISM,
        inputs=[JobEdge(source_vertex_id="source",
                        distribution_pattern=DistributionPattern.ALL_TO_ALL,
                        result_partition_type=ResultPartitionType.PIPELINED if pipelined
                        else ResultPartitionType.BLOCKING)],
        operators=[
            OperatorSpec(name="count", config={"queryable": REGISTRATION, **failing}),
            OperatorSpec(name="file", config={"path": str(out)}),
        ],
    )  # fmt: skip
    return JobSubmitted(
        event_id=uuid.uuid4().hex, event_time=now_ms(), producer="demo", job_id=job_id,
        job_name=f"wordcount {text.name}", vertices=[source, count],
        schedule_mode=ScheduleMode.EAGER if pipelined else ScheduleMode.LAZY_FROM_SOURCES,
        # region failover restarts each failed count subtask on its own, one attempt each
        restart_strategy=RestartStrategy(kind=RestartStrategyKind.FIXED_DELAY,
                                         restart_attempts=parallelism + 2, delay_ms=1_000),
    )  # fmt: skip


def progress(message: str) -> None:
    """One line of what the demo is doing now, on stderr so results stay clean on stdout."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class ComponentStopped(RuntimeError):
    """A part of the demo's cluster (the services) stopped on an error."""


@dataclass
class DemoCluster:
    """Where one demo run's services and runner work, and with what."""

    bootstrap: str
    prefix: str
    work: Path
    slots: int | None = None
    master: str = "local[*]"
    data_roots: tuple[Path, ...] = ()
    """The runner's `--data-root`s: the files the demo's job may read and write."""

    def await_results_released(self, job_id: str, timeout_s: float) -> bool:
        """Until the runner has deleted the ended job's result topics (it does once the
        JobMaster released them), so that stopping it right after leaves none behind; False
        if some are still there after `timeout_s`."""
        admin = admin_client(self.bootstrap)
        start = job_result_prefix(self.prefix, job_id)
        deadline = time.monotonic() + timeout_s
        while any(t.startswith(start) for t in admin.list_topics(timeout=10).topics):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True


@dataclass
class Cluster(DemoCluster):
    """Services and runner of one demo run, in this process."""

    def __post_init__(self) -> None:
        create_topics(self.bootstrap, self.prefix, partitions=4)
        progress(f"topics {self.prefix}* created")
        # one serde for the run: making one parses every schema (~25 ms, a third of the
        # first hop of a short job when each submission made its own; bench/e2e.py)
        self.serde = EventSerde()
        self.watcher = JobWatcher(self.bootstrap, self.prefix, serde=self.serde)
        self.client = transactional_producer(self.bootstrap, f"demo-{uuid.uuid4().hex[:8]}")
        # the batch size `services run` has: at 200, a P=128 job's offers and deployments
        # (256 records) were decided in two transactions, and the runner often read their
        # acceptances in two micro-batches, each starting a Spark job (bench/e2e.py)
        self.services = ServiceRuntime(
            self.bootstrap, self.prefix, RuntimeConfig(timer_interval_ms=500)
        )
        self.services_thread = threading.Thread(
            target=self.services.run, args=(False,), daemon=True
        )
        self.services_thread.start()
        progress("services started (JobMaster, ResourceManager, TaskExecutors)")
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        config = RunnerConfig(
            self.bootstrap, self.prefix, self.work / "checkpoint", slots=self.slots,
            master=self.master, data_roots=self.data_roots,
            client_properties=tuple(client_properties().items()),
        )  # fmt: skip
        progress(f"starting Spark ({self.master}) ...")
        self.runner = TaskRunner(config)
        self.runner.spark.sparkContext.setLogLevel("ERROR")
        progress("starting the runner's streaming query ...")
        self.runner.start()
        executors = self.runner.task_executors
        progress(f"runner ready: TaskExecutor(s) {', '.join(executors.resource_ids)} with "
                 f"{executors.slots} slots each")  # fmt: skip

    def describe(self) -> str:
        return (f"Spark {self.runner.spark.sparkContext.master}, Kafka read through the "
                f"{self.runner.format!r} format")  # fmt: skip

    def close(self) -> None:
        self.watcher.close()
        self.runner.stop()
        self.services.stop()
        self.services_thread.join(30)

    def submit(self, job: JobSubmitted) -> None:
        submit(self.client, self.prefix, job, self.serde)

    def wait_for_end(self, job_id: str, timeout_s: float) -> JobStatusChanged:
        return self.watcher.wait(job_id, timeout_s, self.check_alive)

    def check_alive(self) -> None:
        """Raise if the services stopped: waiting on would be waiting forever."""
        if not self.services_thread.is_alive():
            raise ComponentStopped(f"the services stopped: {self.services.failure!r}")

    def log(self) -> list[LogRecord]:
        return read_events(self.bootstrap, self.prefix)


def python_count(text: Path) -> Counter[str]:
    counts: Counter[str] = Counter()
    with text.open("rb") as handle:
        for line in handle:
            counts.update(functions.words(line.decode("utf-8", errors="replace").rstrip("\r\n")))
    return counts


def read_counts(out: Path) -> Counter[str]:
    counts: Counter[str] = Counter()
    for part in sorted(out.glob("part-*")):
        for line in part.read_text(encoding="utf-8").splitlines():
            word, n = json.loads(line)
            counts[word] += n
    return counts


RELEASE_WAIT_S = 10.0
"""How long the demo waits for the runner to delete the job's result topics: the next
micro-batch of the runner (0.5 s apart) reads the release."""


def run(text: Path, bootstrap: str, work: Path, parallelism: int = 4, fail_once: bool = False,
        pipelined: bool = False, top: int = 10, timeout_s: float = 300,
        master: str = "local[*]", prefix: str | None = None,
        picture: Path | None = None, cluster_type: type = Cluster) -> int:  # fmt: skip
    """The demo; returns the exit status. Its topics are `prefix`'s (default: a fresh random
    one, so every run starts from an empty log). With `picture`, the job's timeline is also
    drawn there as a Gantt chart (.svg, .png or .pdf). `cluster_type` runs the services and
    the runner: `Cluster` in this process, `demo_secure.SecuredCluster` as principals of
    their own."""
    if not text.is_file():
        raise FileNotFoundError(
            2, "no such file (the demo counts the words of a text file)", str(text)
        )
    own_prefix = prefix is None
    prefix = prefix if prefix is not None else f"demo-{uuid.uuid4().hex[:8]}."
    job_id = f"wordcount-{uuid.uuid4().hex[:8]}"
    out = work / prefix.rstrip(".") / job_id / "counts"
    print(f"topics {prefix}* on {bootstrap}; output in {out}")
    # Slots are not cores: enough of them for both vertices at once (jobledger has no slot
    # sharing), which EAGER scheduling of the pipelined variant needs.
    # The runner may read the input's directory and write the output directory, nothing else.
    cluster = cluster_type(bootstrap, prefix, work / prefix.rstrip("."), slots=2 * parallelism,
                           master=master, data_roots=(text.resolve().parent, out))  # fmt: skip
    print(cluster.describe())
    try:
        started = time.monotonic()
        job = wordcount_job(job_id, text.resolve(), out, parallelism, fail_once, pipelined)
        cluster.submit(job)
        progress(f"submitted job {job_id} (parallelism {parallelism}); waiting for it to end")
        try:
            end = cluster.wait_for_end(job_id, timeout_s)
        except (TimeoutError, ComponentStopped, SubmissionRefused) as exc:
            print(f"\n{exc}")
            print("\n".join(stalled_job(cluster.log(), job_id)))
            return 1
        elapsed = time.monotonic() - started
        if not cluster.await_results_released(job_id, RELEASE_WAIT_S):
            progress(f"the runner has not deleted {job_id}'s result topics yet; they stay")
        records = cluster.log()
        if picture is not None:
            draw(log_order(records), job_id, picture)
            print(f"timeline picture: {picture}")
        return _print_results(records, job_id, end, elapsed, text, out, bootstrap, prefix, top)
    finally:
        stopping = time.monotonic()
        try:
            progress("shutting down the runner and the services")
        finally:  # a reader gone (a closed pipe) still leaves nothing running behind
            cluster.close()
        progress(f"stopped in {time.monotonic() - stopping:.1f} s")
        if own_prefix:
            _delete_run_topics(bootstrap, prefix)
        else:
            progress(f"topics {prefix}* kept: the prefix was given (or --secure's, which only "
                     "the admin may delete)")  # fmt: skip


def _delete_run_topics(bootstrap: str, prefix: str) -> None:
    """The run's own topics go with it: each run picks a fresh prefix, so nothing would ever
    read them again and every run would leave its own behind."""
    try:
        deleted = delete_prefixed(bootstrap, prefix)
    except Exception as exc:  # the results are printed; the topics only stay
        progress(f"could not delete topics {prefix}* ({first_line(exc)}); they stay")
        return
    progress(f"deleted the run's {len(deleted)} topics {prefix}*")


def _print_results(
    records: list[LogRecord], job_id: str, end: JobStatusChanged, elapsed: float, text: Path,
    out: Path, bootstrap: str, prefix: str, top: int,
) -> int:  # fmt: skip
    """Everything the demo has to show, printed the moment the job ends; the exit status."""
    driver = replay(records).driver
    jm = driver.job_masters[job_id]
    print(f"\njob {job_id} {end.to_status.value} in {elapsed:.1f} s after "
          f"{jm.restarts} restart{'' if jm.restarts == 1 else 's'}"
          + (f": {end.cause}" if end.cause else ""))  # fmt: skip
    dead = sum(r.role is TopicRole.DEAD_LETTER for r in records)
    print(f"{len(records) - dead} events in the log, {dead} of them dead-lettered")
    print("\ntimeline (seconds since submission):")
    print("\n".join(timeline(records, job_id)))
    if end.to_status is not JobStatus.FINISHED:
        return 1
    expected, counted = python_count(text), read_counts(out)
    print(f"\ntop {top} words:")
    for word, n in counted.most_common(top):
        print(f"  {n:>8}  {word}")
    graph = jm.archived_graph()
    slots = sorted(
        {(ev.current.resource_id, ev.current.slot_index, ev.current.allocation_id)
         for ev in (graph.execution_vertices() if graph else [])}
    )  # fmt: skip
    print("\nslot assignment (final attempts):")
    for resource_id, index, allocation in slots:
        print(f"  {resource_id} slot {index}: allocation {allocation}")
    word = counted.most_common(1)[0][0] if counted else None
    status = 0
    if word is not None:
        location = jm.kv_state_location(REGISTRATION, word)
        value = kv_state.lookup(bootstrap, prefix, location.kv_state_id, word) if location else None
        print(f"\nqueryable state {REGISTRATION!r}[{word!r}]: key group "
              f"{assign_to_key_group(word, MAX_PARALLELISM)} -> KvState "
              f"{location.kv_state_id if location else None} on "
              f"{location.server_host if location else None} -> {value}")  # fmt: skip
        status |= value != counted[word]
    if counted != expected:
        print(f"\nMISMATCH with a plain Python count: {len(expected)} words expected, "
              f"{len(counted)} counted")  # fmt: skip
        status = 1
    else:
        print(f"\ncounts equal a plain Python count ({sum(expected.values())} words, "
              f"{len(expected)} distinct)")  # fmt: skip
    return int(status)
