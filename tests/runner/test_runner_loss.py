"""A dead worker never hangs a job: the Spark runner killed, restarted, paused,
while the services judge its liveness from its own heartbeats alone.

Everything runs as it does in production: `jobledger services run` and `jobledger runner`
are subprocesses on the real broker, with a short heartbeat timeout and interval, and a "kill"
is SIGKILL to a runner's whole process tree (its Spark JVM and Python workers too), as when
its machine dies. The word count's split is slowed down per line
(`tests/support/slow_functions.py`), so a source task is RUNNING when its runner goes.

A runner takes ~25 s to start on two cores, so runners are shared where that stays honest:
two stages of topics, services and runners start together once for the module. On the stage
`alone` one runner holds three jobs when it dies, and each test asserts one story of that
death: (a) the job restarts on the same runner id 5 s later, (c) a job that `job wait` gives
up on and that is cancelled once no runner is left, (d) a job cancelled while its runner was
already silent. On the stage `shared` a helper runner lives through (b) a second runner
killed for good and (e) a third paused past the timeout and resumed, and is then (f) stopped
with SIGTERM, while the third goes on.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from jobledger.cli import demo
from jobledger.cli.job import TIMED_OUT
from jobledger.projections.log.log_file import LogRecord, read_events
from jobledger.projections.log.replay import replay
from jobledger.schemas import Event, EventSerde
from jobledger.schemas.cluster import (
    TaskManagerDisconnected,
    TaskManagerHeartbeatsReported,
    TaskManagerLost,
    TaskManagerRegistered,
)
from jobledger.schemas.jobs import JobStatusChanged, JobSubmitted
from jobledger.schemas.rejections import EventRejected
from jobledger.schemas.tasks import (
    TaskCancellationRequested,
    TaskDeploymentRequested,
    TaskExecutionStateChanged,
)
from jobledger.schemas.types import ExecutionState, JobStatus, RestartStrategy, RestartStrategyKind
from jobledger.services.client import dispatcher
from jobledger.services.configuration import Configuration
from jobledger.services.control.job_master import PRODUCER as JOB_MASTER
from jobledger.services.control.job_status import GLOBALLY_TERMINAL
from jobledger.services.kafka import transactional_producer

from ..conftest import Cluster, new_cluster
from ..support.processes import freeze_tree, kill_tree, thaw_tree

pytest.importorskip(
    "pyspark", reason="the runner needs the `spark` extra: pip install 'jobledger[spark]'"
)

from jobledger.services.runner.task import PRODUCER as RUNNER

pytestmark = pytest.mark.broker

ROOT = Path(__file__).resolve().parents[2]
HEARTBEAT_INTERVAL_S = 1
SHARED_TIMEOUT_S = 4
ALONE_TIMEOUT_S = 10
"""The stage `alone`'s heartbeat timeout: `job wait` must answer while its runner is silent
but not lost yet, and a `jobledger` command takes seconds to start on two cores."""
DETECTION_SLACK_S = 4.0
"""How long after the heartbeat timeout a silent TaskExecutor may still count as alive: the
services' clock ticks every second, and a tick's decisions take a transaction to appear."""
PARALLELISM = 2
SLOW = "tests.support.slow_functions:slow_words"
LINES = 200
"""Lines of the test's text: each of the PARALLELISM source tasks sleeps 0.05 s per line of
its share (slow_functions.SECONDS_PER_LINE), so it is RUNNING for ~5 s."""
VOCABULARY = ["flink", "kafka", "spark", "slot", "Slot", "don't", "naïve", "über", "x", "42",
              "résumé", "ALLOCATION", "the", "a"]  # fmt: skip
FINAL = frozenset({ExecutionState.FINISHED, ExecutionState.FAILED, ExecutionState.CANCELED})
T = TypeVar("T")


# -- processes -----------------------------------------------------------------------------


class Child:
    """A `jobledger` subprocess logging to a file of its own, in a process group of its own
    as a shell runs a job (`kill %1` signals the whole group)."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], home: Path) -> None:
        self.name = name
        self.log_path = home / f"{name}-{time.monotonic_ns()}.log"
        with self.log_path.open("w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "jobledger.cli", *args], env=env, cwd=home,
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    def kill(self) -> float:
        """SIGKILL to the whole tree; the wall-clock time of the kill."""
        killed_at = time.time()
        kill_tree(self.process.pid)
        self.process.wait(10)
        return killed_at

    def tail(self, lines: int = 12) -> str:
        text = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        return f"--- {self.name} ({self.log_path}):\n" + "\n".join(text)


@dataclass
class Stage:
    """A cluster of its own (topics, services, runners) under `home`."""

    cluster: Cluster
    home: Path
    heartbeat_timeout_s: int
    children: list[Child] = field(default_factory=list)
    runners: dict[str, Child] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.env = self.cluster.env(str(self.home))
        self.client = transactional_producer(self.cluster.bootstrap, f"loss-{uuid.uuid4().hex}")
        self.serde = EventSerde()
        self.start("services", ["services", "run", "--timer-interval-ms", "500",
                                *self.options])  # fmt: skip

    @property
    def options(self) -> list[str]:
        """The services' `-D`s; `job wait` and `replay` here take the same, to decide the
        same."""
        return options((
            f"heartbeat.timeout={self.heartbeat_timeout_s}s", "restart-strategy=fixed-delay",
            "restart-strategy.fixed-delay.attempts=10", "restart-strategy.fixed-delay.delay=500ms",
        ))  # fmt: skip

    def start(self, name: str, args: list[str], env: dict[str, str] | None = None) -> Child:
        child = Child(name, args, env or self.env, self.home)
        self.children.append(child)
        return child

    def runner(self, runner_id: str, cores: int = 4) -> Child:
        """Start `jobledger runner --runner-id runner_id` (again, if it ran before: same
        checkpoint). Its Python workers import SLOW's module from the repository; Spark's
        scratch directories, which a killed JVM never removes, stay under the stage's home."""
        pythonpath = os.pathsep.join(filter(None, [str(ROOT), self.env.get("PYTHONPATH")]))
        env = {**self.env, "PYTHONPATH": pythonpath, "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_LOCAL_DIRS": str(self.home / "spark")}  # fmt: skip
        self.runners[runner_id] = self.start(runner_id, [
            "runner", "--runner-id", runner_id, "--master", f"local[{cores}]",
            "--slots", str(2 * cores), "--heartbeat-interval", str(HEARTBEAT_INTERVAL_S),
            "--allow-module", SLOW.split(":")[0], "--data-root", str(self.home),
            "--checkpoint", str(self.home / "checkpoints" / runner_id),
        ], env)  # fmt: skip
        return self.runners[runner_id]

    def stop(self) -> None:
        for child in self.children:
            if child.process.poll() is None:  # a reaped one's pid may be another's by now
                kill_tree(child.process.pid)
                child.process.wait(10)

    def tails(self) -> str:
        return "\n".join(child.tail() for child in self.children)

    def log(self) -> list[LogRecord]:
        return read_events(self.cluster.bootstrap, self.cluster.prefix)

    def until(self, what: str, found: Callable[[list[LogRecord]], T | None],
              timeout_s: float, required: bool = True) -> T | None:  # fmt: skip
        """What `found` finds in the log, polled until `timeout_s`; else fail saying `what`
        was awaited, with the end of every child's output (or, not `required`, None: the
        test that needs it says so)."""
        deadline = time.monotonic() + timeout_s
        while True:
            result = found(self.log())
            if result:
                return result
            if time.monotonic() > deadline:
                if not required:
                    return None
                pytest.fail(f"not within {timeout_s:g} s: {what}\n{self.tails()}")
            time.sleep(0.25)

    def cli(self, *args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
        command = self.cli_start(*args)
        out, err = command.communicate(timeout=timeout_s)
        return subprocess.CompletedProcess(command.args, command.returncode, out, err)

    def cli_start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "jobledger.cli", *args], env=self.env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def submit(self, name: str) -> Job:
        text = self.home / "input" / f"{name}.txt"
        text.parent.mkdir(parents=True, exist_ok=True)
        rng = random.Random(name)
        text.write_text("\n".join(" ".join(rng.choices(VOCABULARY, k=rng.randint(0, 8)))
                                  for _ in range(LINES)) + "\n", encoding="utf-8")  # fmt: skip
        job = Job(f"{name}-{uuid.uuid4().hex[:8]}", text, self.home / "out" / name)
        dispatcher.submit(self.client, self.cluster.prefix, slow_wordcount(job), self.serde)
        return job

    def cancel(self, job: Job) -> None:
        dispatcher.cancel(self.client, self.cluster.prefix, job.job_id, "test", self.serde)


def options(configuration: tuple[str, ...]) -> list[str]:
    return [arg for pair in configuration for arg in ("-D", pair)]


@dataclass(frozen=True)
class Job:
    job_id: str
    text: Path
    out: Path


def slow_wordcount(job: Job) -> JobSubmitted:
    """The demo's word count (parallelism 2) with its split slowed down (SLOW) and restarts
    enough for every loss here."""
    graph = demo.wordcount_job(job.job_id, job.text, job.out, PARALLELISM, fail_once=False)
    source, *others = graph.vertices
    operators = [
        op.model_copy(update={"config": {"function": SLOW}}) if op.name == "flat_map" else op
        for op in source.operators
    ]
    restarts = RestartStrategy(
        kind=RestartStrategyKind.FIXED_DELAY, restart_attempts=10, delay_ms=500
    )
    return graph.model_copy(update={
        "vertices": [source.model_copy(update={"operators": operators}), *others],
        "restart_strategy": restarts,
    })  # fmt: skip


# -- reading the log -----------------------------------------------------------------------


def of(records: list[LogRecord], kind: type[Event], **fields: Any) -> list[LogRecord]:
    """The records of events of type `kind` whose fields have the values given."""
    return [
        r for r in records
        if isinstance(r.event, kind) and all(getattr(r.event, k) == v for k, v in fields.items())
    ]  # fmt: skip


def registered(records: list[LogRecord], resource_id: str) -> list[LogRecord]:
    return of(records, TaskManagerRegistered, resource_id=resource_id)


def descendants(pid: int) -> set[int]:
    """The processes `pid` started, and theirs (a runner's JVM runs in a session of its own,
    so its process group does not name them)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def until_gone(pids: set[int], timeout_s: float) -> None:
    """Until none of `pids` runs."""
    deadline = time.monotonic() + timeout_s
    while any(running(pid) for pid in pids):
        if time.monotonic() > deadline:
            raise AssertionError(f"processes {sorted(pids)} the runner started still run")
        time.sleep(0.2)


def running(pid: int) -> bool:
    """Alive and not a zombie (one whose parent has not reaped it has ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def end_of(records: list[LogRecord], job: Job) -> LogRecord | None:
    """The job's globally terminal status, as its JobMaster decided it."""
    ends = [r for r in of(records, JobStatusChanged, job_id=job.job_id, producer=JOB_MASTER)
            if r.event.to_status in GLOBALLY_TERMINAL]  # fmt: skip
    return ends[0] if ends else None


def running_on(records: list[LogRecord], job: Job, resource_id: str) -> list[LogRecord]:
    """Deployments of the job to `resource_id` whose attempt reported RUNNING."""
    running = {r.event.execution_attempt_id for r in of(
        records, TaskExecutionStateChanged, job_id=job.job_id, producer=RUNNER,
        execution_state=ExecutionState.RUNNING)}  # fmt: skip
    return [r for r in of(records, TaskDeploymentRequested, job_id=job.job_id,
                          resource_id=resource_id)
            if r.event.execution_attempt_id in running]  # fmt: skip


def replacement(records: list[LogRecord], lost: TaskDeploymentRequested) -> LogRecord | None:
    """The next attempt of the subtask whose attempt `lost` was."""
    later = [r for r in of(records, TaskDeploymentRequested, job_id=lost.job_id,
                           vertex_id=lost.vertex_id, subtask_index=lost.subtask_index)
             if r.event.attempt_number > lost.attempt_number]  # fmt: skip
    return min(later, key=lambda r: r.event.attempt_number, default=None)


def reports(records: list[LogRecord], attempt_id: str) -> list[LogRecord]:
    """The runner's reports of an attempt (the TaskExecutor reducer also reports an attempt
    FAILED when its slot goes)."""
    return of(records, TaskExecutionStateChanged, execution_attempt_id=attempt_id,
              producer=RUNNER)  # fmt: skip


def reported(records: list[LogRecord], attempt_id: str, state: ExecutionState) -> bool:
    return any(r.event.execution_state is state for r in reports(records, attempt_id))


def refused(records: list[LogRecord], event: Event) -> bool:
    return bool(of(records, EventRejected, rejected_event_id=event.event_id))


def registered_again(records: list[LogRecord], resource_id: str) -> float:
    """When the TaskExecutor registered for the second time (ms; infinite: it did not)."""
    registrations = registered(records, resource_id)
    return registrations[1].timestamp if len(registrations) > 1 else math.inf


def lost_cause(resource_id: str) -> str:
    return f"The heartbeat of TaskManager with id {resource_id} timed out."


def assert_lost_in_time(stage: Stage, records: list[LogRecord], resource_id: str,
                        silent_since: float) -> None:  # fmt: skip
    """One TaskManagerLost for the TaskExecutor, with Flink's cause; not before the timeout
    had passed since its last sign of life before `silent_since` (event times: the rule the
    ResourceManager applies), nor more than DETECTION_SLACK_S after that (append time)."""
    losses = of(records, TaskManagerLost, resource_id=resource_id)
    assert [r.event.cause for r in losses] == [lost_cause(resource_id)], losses
    beats = [r for r in of(records, TaskManagerHeartbeatsReported)
             if any(b.resource_id == resource_id for b in r.event.beats)]  # fmt: skip
    signs = [r.event.event_time for r in [*of(records, TaskManagerRegistered,
                                               resource_id=resource_id), *beats]
             if r.event.event_time <= silent_since * 1000]  # fmt: skip
    last_sign = max(signs)
    assert losses[0].event.event_time - last_sign > stage.heartbeat_timeout_s * 1000, (
        f"{resource_id} lost {losses[0].event.event_time - last_sign} ms after its last beat"
    )
    late_s = (losses[0].timestamp - last_sign) / 1000 - stage.heartbeat_timeout_s
    assert late_s <= DETECTION_SLACK_S, f"{resource_id} lost {late_s:.1f} s past the timeout"


def assert_counts_exact(job: Job) -> None:
    """The counts equal a plain Python count, and no word was written twice (a part file
    per count subtask, each word in one)."""
    written = [json.loads(line)[0] for part in sorted(job.out.glob("part-*"))
               for line in part.read_text(encoding="utf-8").splitlines()]  # fmt: skip
    twice = [word for word, n in Counter(written).items() if n > 1]
    assert not twice, f"words written more than once: {twice}"
    assert len(list(job.out.glob("part-*"))) == PARALLELISM
    assert demo.read_counts(job.out) == demo.python_count(job.text)


def assert_finished_exactly(records: list[LogRecord], job: Job, tails: str) -> None:
    end = end_of(records, job)
    assert end is not None, f"job {job.job_id} did not end\n{tails}"
    assert end.event.to_status is JobStatus.FINISHED, f"{end.event}\n{tails}"
    assert_counts_exact(job)


def assert_re_ran(records: list[LogRecord], lost: list[TaskDeploymentRequested],
                  resource_id: str) -> None:  # fmt: skip
    """Each attempt running on the lost TaskExecutor was replaced, after the loss, by one
    that ran elsewhere (or on a later instance) and FINISHED."""
    loss = of(records, TaskManagerLost, resource_id=resource_id)[0]
    for attempt in lost:
        again = replacement(records, attempt)
        assert again is not None, f"{attempt.vertex_id}[{attempt.subtask_index}] never re-ran"
        assert again.timestamp >= loss.timestamp, "re-deployed before its TaskExecutor was lost"
        assert reported(records, again.event.execution_attempt_id, ExecutionState.FINISHED), (
            f"the re-run attempt {again.event.execution_attempt_id} never finished"
        )


def assert_never_lost(records: list[LogRecord], resource_id: str) -> None:
    """A healthy runner (beating every HEARTBEAT_INTERVAL_S) is never judged lost."""
    assert not of(records, TaskManagerLost, resource_id=resource_id), (
        f"{resource_id}, alive all along, was lost"
    )


def assert_new_instance(records: list[LogRecord], resource_id: str, after_ms: float) -> None:
    """The TaskExecutor registered again after `after_ms`, as another instance."""
    first, *again = registered(records, resource_id)
    assert again, f"{resource_id} never registered again"
    assert again[0].timestamp > after_ms
    instances = [getattr(r.event, "instance_id", None) for r in (first, again[0])]
    assert None not in instances, f"a registration of {resource_id} has no instance_id"
    assert instances[0] != instances[1], f"{resource_id} came back as the same instance"


# -- the stages ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stages(kafka_bootstrap: str, tmp_path_factory) -> Iterator[dict[str, Stage]]:
    """Both stages, their services and first runners started at once (their ~25 s starts
    overlap): `alone` has runner `rk` (6 cores: three jobs' sources run at once), `shared`
    has `helper` and `rb`."""
    made: dict[str, Stage] = {}
    try:
        for name, timeout_s in (("alone", ALONE_TIMEOUT_S), ("shared", SHARED_TIMEOUT_S)):
            made[name] = Stage(
                new_cluster(kafka_bootstrap), tmp_path_factory.mktemp(name), timeout_s
            )
        made["alone"].runner("rk", cores=6)
        made["shared"].runner("helper")
        made["shared"].runner("rb")
        yield made
    finally:
        for stage in made.values():
            stage.stop()


@dataclass
class Death:
    """What happened on the stage `alone` when `rk` died holding jobs a, c and d."""

    jobs: dict[str, Job]
    on_rk: dict[str, list[TaskDeploymentRequested]]
    """Each job's attempts RUNNING on rk-0 when it was frozen."""
    frozen_at: float
    restarted_at: float
    cancelled_at: float
    wait: subprocess.CompletedProcess[str]
    cancel: subprocess.CompletedProcess[str]
    records: list[LogRecord]
    tails: str
    stage: Stage


@pytest.fixture(scope="module")
def death(stages: dict[str, Stage]) -> Death:
    """rk runs jobs a, c and d, then freezes (it answers nothing from then on), job d is
    cancelled, and rk is killed once d's tasks are asked to cancel; meanwhile `job wait`
    gives up on job c. 5 s after the kill rk starts again, with the same id and checkpoint
    (it takes ~25 s to register), and job a has to finish on it; c is cancelled once rk-0 is
    lost, when no runner is left."""
    stage = stages["alone"]
    stage.until("rk-0 registered", lambda log: registered(log, "rk-0"), 150)
    jobs = {name: stage.submit(name) for name in "acd"}
    on_rk = stage.until(
        "a task of each job RUNNING on rk-0",
        lambda log: (found := {n: running_on(log, j, "rk-0") for n, j in jobs.items()})
        and all(found.values()) and found,
        90,
    )  # fmt: skip
    frozen_at = time.time()
    freeze_tree(stage.runners["rk"].process.pid)
    waiting = stage.cli_start("job", "wait", jobs["c"].job_id, "--timeout", "1", *stage.options)
    stage.cancel(jobs["d"])
    stage.until(
        "job d's tasks asked to cancel on rk-0",
        lambda log: of(log, TaskCancellationRequested, job_id=jobs["d"].job_id), 10,
    )  # fmt: skip
    killed_at = stage.runners["rk"].kill()
    out, err = waiting.communicate(timeout=60)
    wait = subprocess.CompletedProcess(waiting.args, waiting.returncode, out, err)
    time.sleep(max(0.0, killed_at + 5 - time.time()))
    restarted_at = time.time()
    stage.runner("rk", cores=6)
    stage.until("rk-0 lost", lambda log: of(log, TaskManagerLost, resource_id="rk-0"), 30)
    cancelled_at = time.time()
    cancel = stage.cli("job", "cancel", jobs["c"].job_id)
    for name, limit in (("c", 30), ("d", 30), ("a", 150)):
        stage.until(f"job {name} ended", lambda log, n=name: end_of(log, jobs[n]), limit,
                    required=False)  # fmt: skip
    return Death(jobs, {n: [r.event for r in rs] for n, rs in on_rk.items()}, frozen_at,
                 restarted_at, cancelled_at, wait, cancel, stage.log(), stage.tails(),
                 stage)  # fmt: skip


# -- (a) killed, restarted with the same id -------------------------------------------------


def test_a_killed_runner_restarted_with_its_id_finishes_the_job_exactly(death):
    log, job = death.records, death.jobs["a"]
    assert_finished_exactly(log, job, death.tails)
    assert_lost_in_time(death.stage, log, "rk-0", death.frozen_at)
    told = of(log, TaskManagerDisconnected, job_id=job.job_id, resource_id="rk-0")
    assert told and all(r.event.cause == lost_cause("rk-0") for r in told), told
    assert_re_ran(log, death.on_rk["a"], "rk-0")
    assert_new_instance(log, "rk-0", death.restarted_at * 1000)


# -- (c) killed, no runner at all: wait says why, cancel ends it ---------------------------


def test_c_a_job_whose_only_runner_died_says_so_and_can_be_cancelled(death):
    log, job = death.records, death.jobs["c"]
    out = death.wait.stdout + death.wait.stderr
    assert death.wait.returncode == TIMED_OUT, out
    assert "did not end within" in death.wait.stderr
    silent = re.compile(rf"TaskExecutor rk-0 silent for \d+ s; lost after {ALONE_TIMEOUT_S} s")
    running = [
        line
        for line in death.wait.stdout.splitlines()
        if re.search(r"attempt \d+ is RUNNING", line)
    ]
    assert running and all(silent.search(line) for line in running), (
        f"`job wait` does not say that the tasks' TaskExecutor went silent:\n{out}"
    )
    # cancelled once rk-0 was lost, with no runner left
    assert death.cancel.returncode == 0, death.cancel.stderr
    loss = of(log, TaskManagerLost, resource_id="rk-0")[0]
    assert loss.timestamp <= death.cancelled_at * 1000
    end = end_of(log, job)
    assert end is not None and end.event.to_status is JobStatus.CANCELED, f"{end}\n{death.tails}"
    assert end.timestamp < registered_again(log, "rk-0"), "it ended only once rk came back"


# -- (d) killed while its tasks were CANCELING ---------------------------------------------


def test_d_a_job_cancelling_on_a_runner_that_died_is_canceled_once_it_is_lost(death):
    log, job = death.records, death.jobs["d"]
    asked = {r.event.execution_attempt_id for r in of(log, TaskCancellationRequested,
                                                      job_id=job.job_id)}  # fmt: skip
    assert {a.execution_attempt_id for a in death.on_rk["d"]} <= asked
    # rk was frozen before the cancellation: none of d's tasks could report CANCELED
    said = [r for r in of(log, TaskExecutionStateChanged, job_id=job.job_id, producer=RUNNER,
                          execution_state=ExecutionState.CANCELED)
            if death.frozen_at * 1000 <= r.timestamp <= death.restarted_at * 1000]  # fmt: skip
    assert not said, said
    end = end_of(log, job)
    assert end is not None and end.event.to_status is JobStatus.CANCELED, end
    loss = of(log, TaskManagerLost, resource_id="rk-0")[0]
    assert loss.timestamp <= end.timestamp < registered_again(log, "rk-0")


# -- (b) killed for good while another runner lives ----------------------------------------


def test_b_a_runner_killed_for_good_is_replaced_by_another(stages):
    stage = stages["shared"]
    for rid in ("helper-0", "rb-0"):
        stage.until(f"{rid} registered", lambda log, r=rid: registered(log, r), 150)
    job = stage.submit("b")
    victims = stage.until("a task RUNNING on rb-0", lambda log: running_on(log, job, "rb-0"), 90)
    stage.runner("re")  # test (e)'s runner: its start overlaps this test
    killed_at = stage.runners["rb"].kill()
    stage.until("job b ended", lambda log: end_of(log, job), 120, required=False)
    log = stage.log()
    assert_finished_exactly(log, job, stage.tails())
    assert_lost_in_time(stage, log, "rb-0", killed_at)
    assert_re_ran(log, [r.event for r in victims], "rb-0")
    assert_never_lost(log, "helper-0")


# -- (e) paused past the timeout, resumed --------------------------------------------------


def test_e_a_runner_paused_past_the_timeout_comes_back_new_and_its_late_reports_are_refused(
    stages,
):
    stage = stages["shared"]
    if "re" not in stage.runners:  # test (b) failed before it started it
        stage.runner("re")
    stage.until("re-0 registered", lambda log: registered(log, "re-0"), 150)
    job = stage.submit("e")
    paused = [r.event for r in stage.until(
        "a task RUNNING on re-0", lambda log: running_on(log, job, "re-0"), 90)]  # fmt: skip
    paused_at = time.time()
    frozen = freeze_tree(stage.runners["re"].process.pid)
    try:
        stage.until("re-0 lost", lambda log: of(log, TaskManagerLost, resource_id="re-0"), 20)
        stage.until(
            "the paused attempts RUNNING again on helper-0",
            lambda log: all(
                (again := replacement(log, p)) is not None
                and again.event.resource_id == "helper-0"
                and reported(log, again.event.execution_attempt_id, ExecutionState.RUNNING)
                for p in paused
            ),
            60,
        )  # fmt: skip
    finally:
        thaw_tree(frozen)
    resumed_at = time.time()
    stage.until("job e ended", lambda log: end_of(log, job), 120, required=False)
    stage.until(
        "the resumed runner's last word on its old attempts",
        lambda log: all(
            any(r.event.execution_state in FINAL and r.timestamp >= resumed_at * 1000
                for r in reports(log, p.execution_attempt_id))
            for p in paused
        ),
        60, required=False,
    )  # fmt: skip
    stage.until("re-0 registered again", lambda log: registered_again(log, "re-0") < math.inf,
                60, required=False)  # fmt: skip
    log = stage.log()
    assert_finished_exactly(log, job, stage.tails())
    assert_lost_in_time(stage, log, "re-0", paused_at)
    assert_re_ran(log, paused, "re-0")
    for attempt in paused:
        late = [r for r in reports(log, attempt.execution_attempt_id)
                if r.timestamp >= resumed_at * 1000]  # fmt: skip
        assert all(refused(log, r.event) for r in late), f"a late report was taken: {late}"
        assert [r.event.execution_state for r in late] == [ExecutionState.CANCELED], (
            f"the resumed runner did not cancel what it was running: {late}"
        )
    loss = of(log, TaskManagerLost, resource_id="re-0")[0]
    assert_new_instance(log, "re-0", loss.timestamp)
    assert_never_lost(log, "helper-0")


# -- (f) stopped with SIGTERM: gone at once ------------------------------------------------


def test_f_a_runner_stopped_with_sigterm_deregisters_and_its_tasks_run_elsewhere_at_once(stages):
    """A runner that stops cleanly tells the ResourceManager first, as
    Flink's TaskExecutor disconnects as it shuts down: its TaskExecutor is no longer
    registered, its RUNNING tasks fail over at once (not after the heartbeat timeout), and a
    job submitted next is not placed there. The runner stopped is one running a task, by
    SIGTERM to its process group as a shell's `kill %1` sends it (Spark's JVM in that group
    must not die under the runner, whose stop would then end in a Py4J trace). Its log has no
    trace once the runner and everything it started (its JVM, the Python daemons) ended: the
    data source planners' idle workers printed a BrokenPipeError trace when the JVM closed
    their sockets, a minute after the query started and as Spark stopped
    (`worker_python.py`)."""
    stage = stages["shared"]
    if "re" not in stage.runners:  # test (b) failed before it started it
        stage.runner("re")
    live = {f"{name}-0": child for name, child in stage.runners.items()
            if child.process.poll() is None}  # fmt: skip
    for rid in live:
        stage.until(f"{rid} registered", lambda log, r=rid: registered(log, r), 150)
    job = stage.submit("f")
    on_any = stage.until(
        "a task RUNNING", lambda log: [r for rid in live for r in running_on(log, job, rid)], 90
    )
    gone = on_any[0].event.resource_id
    victims = [r.event for r in on_any if r.event.resource_id == gone]
    runner = live[gone].process
    started = descendants(runner.pid)
    os.killpg(runner.pid, signal.SIGTERM)
    assert runner.wait(120) == 0, stage.tails()
    until_gone(started, 60)
    said = live[gone].log_path.read_text(errors="replace")
    assert "Traceback" not in said and "BrokenPipeError" not in said, said[-6000:]
    stage.until("job f ended", lambda log: end_of(log, job), 120, required=False)
    after = stage.submit("f-after")
    stage.until("job f-after ended", lambda log: end_of(log, after), 120, required=False)
    log = stage.log()

    cause = f"TaskExecutor {gone} is shutting down."
    current = registered(log, gone)[-1]
    instance = current.event.instance_id
    # the losses of the instance stopped: a runner of this shared stage may have been lost
    # before (test e pauses `re` past its heartbeat timeout), and registered again since
    losses = [r for r in of(log, TaskManagerLost, resource_id=gone) if r.offset > current.offset]
    assert [(r.event.producer, r.event.cause, r.event.instance_id) for r in losses] == [
        (RUNNER, cause, instance)
    ], losses
    told = of(log, TaskManagerDisconnected, job_id=job.job_id, resource_id=gone)
    assert [r.event.cause for r in told] == [cause], told
    assert_re_ran(log, victims, gone)
    assert_finished_exactly(log, job, stage.tails())
    assert_finished_exactly(log, after, stage.tails())
    assert not of(log, TaskDeploymentRequested, job_id=after.job_id, resource_id=gone)
    state = replay(log, Configuration.parse(stage.options[1::2]).new_driver).driver
    assert gone not in state.resource_manager.task_managers()
    assert set(state.resource_manager.task_managers()) == set(live) - {gone}


# -- and the logs replay to what was decided -----------------------------------------------


def test_every_decision_of_these_logs_replays_the_same(stages, death):
    """After every story above (`death` makes sure the stage `alone` has told its own)."""
    for name, stage in stages.items():
        done = stage.cli("replay", "--verify", *stage.options, timeout_s=120)
        assert done.returncode == 0, f"{name}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
