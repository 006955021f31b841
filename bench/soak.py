"""Soak: run the main demo N times on one broker and count what ended, what hung, what lied.

    python bench/soak.py --runs 20 [--fail-once] [--master URL]
    python bench/soak.py --runs 20 --kill-runner [--seed 7] [--heartbeat-timeout 6] [--fail-once]
    python bench/soak.py --runs 5 --fail-once --burn 4


Each run is `jobledger demo wordcount FILE` in a subprocess of its own (a fresh Spark, fresh
services, fresh topics) against one broker started here for the whole soak. A run is `ok` when
it exits 0 and `jobledger replay --verify` over its topics finds every recorded decision
re-derived and no derived decision missing; `hung` when the demo says its job did not end (or
the subprocess outlives its limit, which is then killed). Prints one line per run (exit code,
seconds, verdict) and last one JSON line: runs, ok, hung, failed, unverified, p50_s, max_s.

`--burn N` runs N CPU burners (busy Python processes) beside the soak from start to end,
the load under which a run once ended FAILED for a cause nobody kept: on a machine of two
cores, four burners make every process of the demo wait its turn. Whatever a run's verdict,
a run that is not `ok` says why, from its log: the job's last status and its cause, each
failed attempt's error, every TaskManagerLost and the dead letters' reasons (`cause`).

`--kill-runner` soaks the rule that a dead worker never hangs a job: the demo runs services and
runner in one process, which a kill would take down together, so each run instead starts
`jobledger services run` (with `-D heartbeat.timeout=--heartbeat-timeout`) and `jobledger
runner` as subprocesses on fresh topics, submits the demo's word count, SIGKILLs the runner's
whole process tree (Spark's JVM and Python workers too, as when its machine dies) after a
random number of the job's task reports, starts it again with the same runner id and
checkpoint after a random pause (0 to --max-pause s; both drawn from --seed), and waits with
`jobledger job wait`. It is `ok` when the job FINISHED, its counts equal a plain Python count
with no word written twice, and `replay --verify` (under the services' `-D`s) is clean. Each
run records `detection_s`, from the kill's wall-clock time to the TaskManagerLost that the
ResourceManager wrote for the runner's TaskExecutor; the JSON line adds its p50 and max.
Every run is bounded (--job-timeout for the job, a limit for each other step) and kills
every child it started.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from brokers import bench_broker

from jobledger.cli import demo
from jobledger.projections.log.log_file import LogRecord, read_events
from jobledger.schemas import EventSerde
from jobledger.schemas.cluster import TaskManagerLost, TaskManagerRegistrationAccepted
from jobledger.schemas.deadletters import DeadLettered
from jobledger.schemas.jobs import JobStatusChanged
from jobledger.schemas.tasks import TaskExecutionStateChanged
from jobledger.schemas.types import ExecutionState, RestartStrategy, RestartStrategyKind
from jobledger.services.client import dispatcher
from jobledger.services.kafka import transactional_producer
from jobledger.services.kafka_topics import TopicNotFound, create_topics
from jobledger.services.runner.task import PRODUCER as RUNNER_PRODUCER

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the tests' helpers: a signal to a runner with all it started
from tests.support.processes import kill_tree  # noqa: E402

RUNNER_ID = "soak"
PARALLELISM = 4
START_LIMIT_S = 180.0
"""How long a runner (Spark's JVM, the query) may take to register."""
T = TypeVar("T")


def run_once(args: argparse.Namespace, env: dict[str, str]) -> dict[str, object]:
    """One demo on topics this soak names (a prefix the demo picked itself it deletes at its
    end, and the verification reads them after)."""
    prefix = f"soak-{uuid.uuid4().hex[:8]}."
    command = [sys.executable, "-m", "jobledger.cli", "demo", "wordcount", str(args.file),
               "--timeout", str(args.job_timeout), "--topic-prefix", prefix]  # fmt: skip
    if args.fail_once:
        command.append("--fail-once")
    if args.master:
        command += ["--master", args.master]
    started = time.monotonic()
    try:
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=args.job_timeout + 120
        )
        code, out = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        code = None
        out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
    seconds = time.monotonic() - started
    hung = code is None or "did not end within" in out
    verified = verify(prefix, env)
    ok = code == 0 and verified == "clean"
    why = "" if ok else logged_cause(env["JOBLEDGER_BOOTSTRAP"], prefix)
    return {"code": code, "seconds": round(seconds, 1), "hung": hung, "verify": verified,
            "ok": ok, "tail": out[-3000:], "cause": why}  # fmt: skip


def logged_cause(bootstrap: str, prefix: str) -> str:
    """`cause` of the run on `prefix`, or that it left no topics to read it from."""
    try:
        return cause(read_events(bootstrap, prefix))
    except TopicNotFound as exc:
        return f"no log to read: {exc}"


def cause(records: list[LogRecord], most: int = 5) -> str:
    """Why a run went wrong, as its log tells it (one line): the jobs' last status and cause,
    the failed attempts' errors, the TaskExecutors lost and the dead letters' reasons, each
    distinct text once, at most `most` of each kind."""
    last: dict[str, JobStatusChanged] = {}
    failures: list[str] = []
    losses: list[str] = []
    dead: list[str] = []
    for record in records:
        event = record.event
        if isinstance(event, JobStatusChanged):
            last[event.job_id] = event
        elif (isinstance(event, TaskExecutionStateChanged)
              and event.execution_state is ExecutionState.FAILED):  # fmt: skip
            failures.append(f"{event.execution_attempt_id}: {event.error}")
        elif isinstance(event, TaskManagerLost):
            losses.append(f"{event.resource_id}: {event.cause}")
        elif isinstance(event, DeadLettered):
            dead.append(f"{event.source_topic}/{event.source_partition}@{event.source_offset}: "
                        f"{event.reason}")  # fmt: skip

    def first(texts: list[str]) -> str:
        kept = list(dict.fromkeys(" ".join(t.split())[:300] for t in texts))
        return "; ".join(kept[:most]) + (f" (+{len(kept) - most} more)" if len(kept) > most else "")

    parts = [f"job {job} {e.to_status.value}" + (f" ({e.cause})" if e.cause else "")
             for job, e in sorted(last.items())]  # fmt: skip
    for name, texts in (("failed attempts", failures), ("lost", losses), ("dead letters", dead)):
        if texts:
            parts.append(f"{name}: {first(texts)}")
    return " | ".join(parts) or "nothing in the log says"


def verify(prefix: str, env: dict[str, str], configuration: tuple[str, ...] = ()) -> str:
    """`clean`, the first divergence `replay --verify` reports, or why it could not run.
    `configuration`: the services' `-D`s, without which a replay decides otherwise."""
    done = subprocess.run(
        [sys.executable, "-m", "jobledger.cli", "replay", "--verify",
         "--topic-prefix", prefix, *configuration],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if done.returncode == 0:
        return "clean"
    return " ".join((done.stdout + done.stderr).strip().splitlines()[-2:])[:400]


# -- --kill-runner -------------------------------------------------------------------------


class Children:
    """The subprocesses of one run, each logging to a file; `close` kills every one left."""

    def __init__(self, work: Path, env: dict[str, str]) -> None:
        self.work, self.env = work, env
        self.started: list[subprocess.Popen] = []

    def start(self, name: str, *args: str) -> subprocess.Popen:
        with (self.work / f"{name}-{len(self.started)}.log").open("w") as log:
            child = subprocess.Popen(
                [sys.executable, "-m", "jobledger.cli", *args], env=self.env, cwd=self.work,
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.started.append(child)
        return child

    def kill(self, child: subprocess.Popen) -> None:
        kill_tree(child.pid)
        child.wait(30)

    def close(self) -> None:
        for child in self.started:
            if child.poll() is None:  # a reaped child's pid may be another's by now
                self.kill(child)

    def tails(self, lines: int = 15) -> str:
        return "\n".join(
            f"--- {log.name}:\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
            for log in sorted(self.work.glob("*.log"))
        )


def until(found: Callable[[], T | None], limit_s: float, every_s: float = 0.2) -> T | None:
    """What `found` returns once it is something, or None after `limit_s`."""
    deadline = time.monotonic() + limit_s
    while (result := found()) is None or result is False:
        if time.monotonic() > deadline:
            return None
        time.sleep(every_s)
    return result


def run_killed(args: argparse.Namespace, env: dict[str, str], rng: random.Random,
               work: Path) -> dict[str, object]:  # fmt: skip
    """One run of --kill-runner (see the module's docstring)."""
    prefix = f"soak-{uuid.uuid4().hex[:8]}."
    run_dir = work / prefix.rstrip(".")
    run_dir.mkdir()
    bootstrap = env["JOBLEDGER_BOOTSTRAP"]
    create_topics(bootstrap, prefix, partitions=4)
    configuration = ("-D", f"heartbeat.timeout={args.heartbeat_timeout:g}s")
    # Spark's scratch directories, which a killed JVM never removes, stay in the run's own
    children = Children(run_dir, {**env, "JOBLEDGER_TOPIC_PREFIX": prefix,
                                  "SPARK_LOCAL_DIRS": str(run_dir / "spark")})  # fmt: skip
    job_id = f"wordcount-{uuid.uuid4().hex[:8]}"
    text, out = args.file.resolve(), run_dir / job_id / "counts"
    runner_args = [
        "runner", "--runner-id", RUNNER_ID, "--slots", str(2 * PARALLELISM),
        "--heartbeat-interval", str(args.heartbeat_interval), "--master", args.master or "local[*]",
        "--data-root", str(text.parent), "--data-root", str(run_dir),
        "--checkpoint", str(run_dir / "checkpoint"),
    ]  # fmt: skip
    # the kill comes after this many task reports: anywhere from before the first to before
    # the last (INITIALIZING, RUNNING and FINISHED of each of the 2 x PARALLELISM subtasks)
    kill_after = rng.randrange(3 * 2 * PARALLELISM)
    pause_s = rng.uniform(0, args.max_pause)
    started = time.monotonic()
    result: dict[str, object] = {"code": None, "hung": False, "verify": "not run", "tail": "",
                                 "detection_s": None, "pause_s": round(pause_s, 1)}  # fmt: skip
    try:
        children.start("services", "services", "run", *configuration)
        runner = children.start("runner", *runner_args)

        def log() -> list[LogRecord]:
            return read_events(bootstrap, prefix)

        if not runner_registered(bootstrap, prefix):
            result["why"] = "the runner never registered"
            return result
        submit_wordcount(bootstrap, prefix, job_id, text, out, args.fail_once)
        until(lambda: len(task_reports(log())) >= kill_after, args.job_timeout)
        killed_at = time.time()
        children.kill(runner)
        time.sleep(pause_s)
        children.start("runner", *runner_args)
        waited = subprocess.run(
            [sys.executable, "-m", "jobledger.cli", "job", "wait", job_id,
             "--timeout", str(args.job_timeout), *configuration],
            env=children.env, capture_output=True, text=True, timeout=args.job_timeout + 120,
        )  # fmt: skip
        result["code"] = waited.returncode
        result["hung"] = waited.returncode == 124
        result["tail"] = (waited.stdout + waited.stderr)[-3000:]
        records = log()
        losses = [r.timestamp for r in records if isinstance(r.event, TaskManagerLost)
                  and r.timestamp >= killed_at * 1000]  # fmt: skip
        reports = [r.timestamp for r in task_reports(records)]
        # where in the job the kill fell, as the log tells it (the polling lags the target)
        result["reports_before_kill"] = sum(t <= killed_at * 1000 for t in reports)
        result["reports"] = len(reports)
        if losses:
            result["detection_s"] = round(min(losses) / 1000 - killed_at, 2)
        result["counts"] = counts_verdict(text, out)
        result["verify"] = verify(prefix, env, configuration)
    except subprocess.TimeoutExpired:
        result["hung"] = True
    finally:
        children.close()
        result["seconds"] = round(time.monotonic() - started, 1)
    result["ok"] = (result["code"] == 0 and result.get("counts") == "exact"
                    and result["verify"] == "clean")  # fmt: skip
    if not result["ok"]:
        result["tail"] = f"{result['tail']}\n{children.tails()}"
        result["cause"] = cause(read_events(bootstrap, prefix))
    return result


def runner_registered(bootstrap: str, prefix: str) -> bool:
    """Whether a runner's TaskExecutor registered within START_LIMIT_S (Spark's JVM and the
    query take a while to start)."""

    def registered() -> bool:
        records = read_events(bootstrap, prefix)
        return any(isinstance(r.event, TaskManagerRegistrationAccepted) for r in records)

    return bool(until(registered, START_LIMIT_S))


def submit_wordcount(bootstrap: str, prefix: str, job_id: str, text: Path, out: Path,
                     fail_once: bool) -> None:  # fmt: skip
    """Submit the demo's word count with restarts to spare: a fault fails every subtask the
    runner held, a restart each, and the demo's few would run out."""
    job = demo.wordcount_job(job_id, text, out, PARALLELISM, fail_once).model_copy(
        update={"restart_strategy": RestartStrategy(
            kind=RestartStrategyKind.FIXED_DELAY, restart_attempts=50, delay_ms=1_000)}
    )  # fmt: skip
    dispatcher.submit(transactional_producer(bootstrap, f"bench-{uuid.uuid4().hex}"),
                      prefix, job, EventSerde())  # fmt: skip


def task_reports(records: list[LogRecord]) -> list[LogRecord]:
    """The runner's task state reports (the TaskExecutor reducer reports some FAILED too)."""
    return [r for r in records if isinstance(r.event, TaskExecutionStateChanged)
            and r.event.producer == RUNNER_PRODUCER]  # fmt: skip


def counts_verdict(text: Path, out: Path) -> str:
    """`exact`, or how the job's output differs from a plain Python count of `text`."""
    written = [json.loads(line)[0] for part in sorted(out.glob("part-*"))
               for line in part.read_text(encoding="utf-8").splitlines()]  # fmt: skip
    twice = sorted(word for word, n in Counter(written).items() if n > 1)
    if twice:
        return f"written twice: {twice[:5]}"
    expected, counted = demo.python_count(text), demo.read_counts(out)
    if counted != expected:
        wrong = sorted(w for w in expected.keys() | counted.keys() if expected[w] != counted[w])
        return f"{len(wrong)} words miscounted, e.g. {wrong[:5]}"
    return "exact"


@contextlib.contextmanager
def burners(count: int) -> Iterator[None]:
    """`count` busy Python processes for as long as the block runs, then killed."""
    spun = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for burner in spun:
            burner.kill()
            burner.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--fail-once", action="store_true")
    parser.add_argument("--bootstrap", help="an already running Kafka (default: start one)")
    parser.add_argument("--master", help="Spark master for the demo (default: local[*])")
    parser.add_argument("--file", type=Path, default=ROOT / "examples" / "words.txt")
    parser.add_argument("--job-timeout", type=float, default=180)
    parser.add_argument("--keep-going", action="store_true", help="do not stop at a hang")
    parser.add_argument(
        "--kill-runner", action="store_true",
        help="services and runner as subprocesses; SIGKILL the runner mid-job, restart it",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="--kill-runner's moments and pauses")
    parser.add_argument(
        "--heartbeat-timeout", type=float, default=6.0, help="seconds (services' -D)"
    )
    parser.add_argument(
        "--heartbeat-interval", type=float, default=1.0, help="seconds (the runner's)"
    )
    parser.add_argument(
        "--max-pause", type=float, default=10.0, help="longest wait before the restart (s)"
    )
    parser.add_argument(
        "--burn", type=int, default=0, metavar="N", help="N CPU burners for the whole soak"
    )
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="jobledger-soak-"))
    results = []
    rng = random.Random(args.seed)
    with bench_broker(args.bootstrap, work) as bootstrap, burners(args.burn):
        env = {**os.environ, "JOBLEDGER_BOOTSTRAP": bootstrap, "JOBLEDGER_HOME": str(work)}
        for i in range(args.runs):
            result = run_killed(args, env, rng, work) if args.kill_runner else run_once(args, env)
            results.append(result)
            verdict = "ok" if result["ok"] else ("HUNG" if result["hung"] else "FAILED")
            killed = (f", killed after {result.get('reports_before_kill')} of "
                      f"{result.get('reports')} task reports, restarted "
                      f"{result['pause_s']} s later, detected in {result['detection_s']} s, "
                      f"counts: {result.get('counts', result.get('why'))}"
                      if args.kill_runner else "")  # fmt: skip
            print(f"run {i + 1:>3}: exit {result['code']}, {result['seconds']:>6.1f} s, "
                  f"{verdict}, verify: {result['verify']}{killed}", flush=True)  # fmt: skip
            if not result["ok"]:
                log = work / f"run-{i + 1}.out"
                log.write_text(str(result["tail"]))
                print(f"          cause: {result.get('cause')}", flush=True)
                print(f"          output: {log}", flush=True)
                if result["hung"] and not args.keep_going:
                    break
    seconds = [float(r["seconds"]) for r in results]
    detections = [float(r["detection_s"]) for r in results if r.get("detection_s") is not None]
    summary = {
        "runs": len(results),
        "ok": sum(bool(r["ok"]) for r in results),
        "hung": sum(bool(r["hung"]) for r in results),
        "failed": sum(not r["ok"] and not r["hung"] for r in results),
        "unverified": sum(r["verify"] != "clean" for r in results),
        "p50_s": round(statistics.median(seconds), 1) if seconds else None,
        "max_s": round(max(seconds), 1) if seconds else None,
        "broker": args.bootstrap or "kafka",
        "fail_once": args.fail_once,
        "burners": args.burn,
        "load_avg_1m": round(os.getloadavg()[0], 1),
    }
    if args.kill_runner:
        summary |= {
            "kill_runner": True, "seed": args.seed,
            "heartbeat_timeout_s": args.heartbeat_timeout,
            "detection_s": {
                "p50": round(statistics.median(detections), 2) if detections else None,
                "max": round(max(detections), 2) if detections else None,
            },
            "undetected": len(results) - len(detections),
        }  # fmt: skip
    print(json.dumps(summary))
    return 0 if summary["ok"] == summary["runs"] == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
