"""Scheduler benchmark in Flink's shapes (flink-benchmarks, FLINK-20612): a source -> sink job
with one ALL_TO_ALL edge at parallelism P x P, PIPELINED or BLOCKING, EAGER or
LAZY_FROM_SOURCES, each phase timed on its own on the pure reducers (`ReducerDriver`, no
broker), beside Flink 1.14's published figures for 10,000 x 10,000.

    python bench/scheduler.py [--parallelism 4000 10000] [--shape PIPELINED:EAGER ...]
                              [--profile PHASE]

Per P and shape, in a forked child (so each starts from a fresh heap, and its peak RSS is its
own), a cluster of P/2 TaskExecutors x 4 slots is registered untimed, then:

- initialization: JobSubmitted and its leadership, to the job RUNNING with its slots
  requested in its SlotPool: the JobGraph expanded into its ExecutionGraph (Flink's "job
  initialization"); the requests go to the ResourceManager once it is connected;
- scheduling: the ResourceManager connected, to every subtask that may start holding a slot
  and deployed (the reducers decide a deployment as its slot arrives: scheduling and
  deploying are one pass here, as in Flink's `SchedulerBase.startScheduling`); LAZY answers
  the sources' deployments INITIALIZING, RUNNING (BLOCKING: FINISHED), untimed, and times
  the consumers' scheduling that follows as part of this phase;
- deployment: every TaskDeploymentRequested encoded as it goes on the log (Avro single-object
  encoding, the services' own serde): what makes a deployment's cost on the log;
- restart set: the failover strategy's answer alone, on the graph with every task running
  (`tasks_needing_restart`, its topology computed from nothing as on a first failure): Flink's
  "computing the tasks to restart on a failover", under `region` and `full`;
- failover: one task of the sink fails with every task running; the time to the restart
  decisions (the failed task's region, or every task, cancelled: one TaskCancellationRequested
  each, and the restart scheduled);
- release: every task reports FINISHED, to the job's FINISHED and every slot released
  (no partition events exist in jobledger: slot releases stand for partition release).

Each phase prints its CPU seconds (the work is single-threaded; wall beside it), the events
it put on the log and their encoded bytes. The child's peak RSS is printed per shape.
The last line is one JSON object with every figure and, when 1000 and 4000 were both run,
the ratios of scheduling CPU seconds (`ratio_4000_to_1000`).
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import gc
import json
import pstats
import resource
import sys
import time
from collections.abc import Callable
from typing import Any

from forked import in_fork

from jobledger.schemas import Event
from jobledger.schemas.cluster import ResourceManagerConnected, TaskManagerRegistered
from jobledger.schemas.jobs import JobMasterLeadershipGranted, JobStatusChanged, JobSubmitted
from jobledger.schemas.serde import EventSerde
from jobledger.schemas.tasks import TaskDeploymentRequested, TaskExecutionStateChanged
from jobledger.schemas.types import (
    DistributionPattern,
    ExecutionState,
    JobEdge,
    JobStatus,
    JobVertex,
    ResourceProfile,
    ResourceProfileKind,
    RestartStrategy,
    RestartStrategyKind,
    ResultPartitionType,
    ScheduleMode,
)
from jobledger.services.control.driver import ReducerDriver
from jobledger.services.control.failover_strategy import tasks_needing_restart
from jobledger.services.control.job_master import JobMasterConfig
from jobledger.services.host import gc_policy

SLOTS_PER_TASK_EXECUTOR = 4
SLOT = ResourceProfile(kind=ResourceProfileKind.SPECIFIED, cpu_cores=1.0, task_heap_memory_mb=512)
JOB = "job-scheduler"
JM = "jm-scheduler"
PHASES = ("initialization", "scheduling", "deployment", "restart_set_region", "failover_region",
          "restart_set_full", "failover_full", "release")  # fmt: skip

FLINK_1_14_MS = {
    "initialization": 627,
    "deployment": 17_183,
    "restart_set_region": 170,
}
"""Flink 1.14 at 10,000 x 10,000 ALL_TO_ALL ("Scheduler performance part one",
flink.apache.org, 2022-01-04): job initialization, task deployment, computing the tasks to
restart on a failover. JobManager heap 2 GiB. Flink 1.12: 11,431 / 63,118 / 37,195 ms, 30 GiB."""


class Inputs:
    """Input events with unique ids and event times 1 ms apart, as a client would write them."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, cls: type[Event], **fields: Any) -> Event:
        self.count += 1
        return cls(event_id=f"in-{self.count}", event_time=1_700_000_000_000 + self.count,
                   producer="bench", **fields)  # fmt: skip


class Phase:
    """CPU and wall seconds of one phase, and what it put on the log."""

    def __init__(self, serde: EventSerde) -> None:
        self.serde = serde
        self.figures: dict[str, float] = {}

    def timed(self, work: Callable[[], list[Event]], profile: bool = False) -> list[Event]:
        """Run `work`, timed; the CPU seconds of the collector's passes within it (`gc_s`)
        apart, as the full ones walk the whole heap, which grows with the job."""
        collected = {"gc_s": 0.0, "full_gcs": 0}
        started = [0.0]

        def collection(phase: str, info: dict[str, int]) -> None:
            if phase == "start":
                started[0] = time.process_time()
                return
            collected["gc_s"] += time.process_time() - started[0]
            collected["full_gcs"] += info["generation"] == 2

        profiler = cProfile.Profile() if profile else None
        gc.callbacks.append(collection)
        cpu, wall = time.process_time(), time.perf_counter()
        if profiler:
            profiler.enable()
        events = work()
        if profiler:
            profiler.disable()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        gc.callbacks.remove(collection)
        if profiler:
            pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(25)
        self.figures = {"cpu_s": cpu, "wall_s": wall, **collected}
        return events

    def count(self, events: list[Event]) -> None:
        self.figures["events"] = len(events)
        self.figures["bytes"] = sum(len(self.serde.encode(e, "")) for e in events)


def cluster(parallelism: int, strategy: str) -> tuple[ReducerDriver, Inputs]:
    """A driver with enough TaskExecutors for both vertices' subtasks; a restart after 1 ms.
    No deployment window: Flink's benchmark deploys every task at once, and the window is
    fairness between jobs through the services (bench/stall.py), not the reducers' cost."""
    config = JobMasterConfig(failover_strategy=strategy, max_pending_deployments=0)
    driver, make = ReducerDriver(job_master_config=config), Inputs()
    task_executors = -(-2 * parallelism // SLOTS_PER_TASK_EXECUTOR)
    driver.run([make(TaskManagerRegistered, resource_id=f"tm-{i:05d}", address=f"tm-{i}:6122",
                     number_of_slots=SLOTS_PER_TASK_EXECUTOR, resource_profile=SLOT)
                for i in range(task_executors)])  # fmt: skip
    return driver, make


def job(parallelism: int, kind: ResultPartitionType, mode: ScheduleMode) -> dict[str, Any]:
    vertices = [
        JobVertex(vertex_id="source", name="source", invokable_class_name="noop",
                  parallelism=parallelism),
        JobVertex(vertex_id="sink", name="sink", invokable_class_name="noop",
                  parallelism=parallelism,
                  inputs=[JobEdge(source_vertex_id="source", result_partition_type=kind,
                                  distribution_pattern=DistributionPattern.ALL_TO_ALL)]),
    ]  # fmt: skip
    restart = RestartStrategy(kind=RestartStrategyKind.FIXED_DELAY, restart_attempts=1_000_000,
                              delay_ms=1)  # fmt: skip
    return dict(job_id=JOB, job_name="all-to-all", vertices=vertices, schedule_mode=mode,
                restart_strategy=restart)  # fmt: skip


class Run:
    """One job through every phase on one driver."""

    def __init__(self, parallelism: int, kind: ResultPartitionType, mode: ScheduleMode,
                 strategy: str, profile: str | None) -> None:  # fmt: skip
        self.parallelism, self.kind, self.mode = parallelism, kind, mode
        self.driver, self.make = cluster(parallelism, strategy)
        self.serde = EventSerde()
        self.profile = profile
        self.attempts: dict[str, str] = {}
        """Each deployed attempt's TaskExecutor."""
        self.states: dict[str, ExecutionState] = {}
        self.vertex: dict[str, str] = {}
        """Each deployed attempt's JobVertexID."""

    def _report(self, attempt: str, state: ExecutionState) -> list[Event]:
        self.states[attempt] = state
        return self.driver.run([self.make(
            TaskExecutionStateChanged, job_id=JOB, job_master_id=JM, execution_attempt_id=attempt,
            execution_state=state, resource_id=self.attempts[attempt],
            error="java.lang.RuntimeException: injected" if state is ExecutionState.FAILED
            else None,
        )])  # fmt: skip

    def _note(self, events: list[Event]) -> list[Event]:
        for e in events:
            if isinstance(e, TaskDeploymentRequested):
                self.attempts[e.execution_attempt_id] = e.resource_id
                self.vertex[e.execution_attempt_id] = e.vertex_id
                self.states.setdefault(e.execution_attempt_id, ExecutionState.DEPLOYING)
        return events

    def phase(self, name: str, work: Callable[[], list[Event]]) -> tuple[Phase, list[Event]]:
        gc.collect()
        p = Phase(self.serde)
        events = self._note(p.timed(work, profile=self.profile == name))
        p.count(events)
        return p, events

    def started(self) -> list[str]:
        return [a for a, s in self.states.items() if s is ExecutionState.DEPLOYING]

    def run_all(self, attempts: list[str], states: list[ExecutionState]) -> list[Event]:
        out: list[Event] = []
        for attempt in attempts:
            for state in states:
                out += self._note(self._report(attempt, state))
        return out

    def schedule(self) -> list[Event]:
        """The ResourceManager connected; LAZY: sources answered until the sink deploys."""
        events = self.driver.run([self.make(ResourceManagerConnected, job_id=JOB,
                                            resource_manager_id="resourcemanager")])  # fmt: skip
        if self.mode is not ScheduleMode.EAGER:
            self._note(events)
            final = [ExecutionState.INITIALIZING, ExecutionState.RUNNING]
            if self.kind is ResultPartitionType.BLOCKING:
                final.append(ExecutionState.FINISHED)
            events += self.run_all(self.started(), final)
        return events


def measure(parallelism: int, kind: ResultPartitionType, mode: ScheduleMode,
            profile: str | None, collector: str) -> dict[str, Any]:  # fmt: skip
    """Every phase of one shape: the failovers and the release each on a run of their own
    (a failed job restarts only after its cancelled tasks report, which the bench leaves
    out). Under the `service` collector this child collects as a `services run` does
    (`gc_policy.live_service`), each run's registered cluster frozen as a rebuilt state is."""
    if collector == "service":
        gc_policy.live_service()
    figures: dict[str, Any] = {}
    for purpose in ("region", "full", "release"):
        figures.update(one_run(parallelism, kind, mode, purpose, profile))
    figures["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return figures


def one_run(parallelism: int, kind: ResultPartitionType, mode: ScheduleMode, purpose: str,
            profile: str | None) -> dict[str, Any]:  # fmt: skip
    """One job to RUNNING, then failed once (`purpose` region or full, the failover
    strategy) or finished (release); the region run also times its submission, scheduling
    and deployment."""
    figures: dict[str, Any] = {}
    run = Run(parallelism, kind, mode, "full" if purpose == "full" else "region", profile)
    gc_policy.rebuilt()
    submitted = [
        run.make(JobSubmitted, **job(parallelism, kind, mode)),
        run.make(JobMasterLeadershipGranted, job_id=JOB, job_master_id=JM),
    ]
    if purpose == "region":
        init, events = run.phase("initialization", lambda: run.driver.run(submitted))
        if not any(isinstance(e, JobStatusChanged) and e.to_status is JobStatus.RUNNING
                   for e in events):  # fmt: skip
            raise RuntimeError("the job is not RUNNING after its submission")
        sched, events = run.phase("scheduling", run.schedule)
        deployments = [e for e in events if isinstance(e, TaskDeploymentRequested)]
        deploy = Phase(run.serde)
        deploy.timed(lambda: [run.serde.encode(e, "") for e in deployments])
        deploy.count(deployments)
        deploy.figures["largest_bytes"] = max(len(run.serde.encode(e, "")) for e in deployments)
        figures.update(initialization=init.figures, scheduling=sched.figures,
                       deployment=deploy.figures)  # fmt: skip
    else:
        run.driver.run(submitted)
        run._note(run.schedule())
    if len(run.attempts) != 2 * parallelism:
        raise RuntimeError(f"{len(run.attempts)} of {2 * parallelism} subtasks deployed")
    run.run_all(run.started(), [ExecutionState.INITIALIZING, ExecutionState.RUNNING])
    if purpose == "release":
        current = run.driver.job_masters[JOB].scheduler.graph.executions()
        unfinished = [e.attempt_id for e in current if e.state is not ExecutionState.FINISHED]
        release, events = run.phase(
            "release", lambda: run.run_all(unfinished, [ExecutionState.FINISHED])
        )
        if not any(isinstance(e, JobStatusChanged) and e.to_status is JobStatus.FINISHED
                   for e in events):  # fmt: skip
            raise RuntimeError("the job did not finish")
        return {"release": release.figures}
    sink = next(a for a, v in run.vertex.items() if v == "sink")
    graph = run.driver.job_masters[JOB].scheduler.graph
    alone = dataclasses.replace(graph)  # the same vertices, no topology computed yet
    failed = graph.find(sink)
    compute = Phase(run.serde)
    compute.timed(lambda: tasks_needing_restart(purpose, alone, failed))
    compute.figures["restarted"] = len(tasks_needing_restart(purpose, alone, failed))
    figures[f"restart_set_{purpose}"] = compute.figures
    fail, _ = run.phase(f"failover_{purpose}", lambda: run._report(sink, ExecutionState.FAILED))
    figures[f"failover_{purpose}"] = fail.figures
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parallelism", type=int, nargs="+", default=[4000, 10000])
    parser.add_argument(
        "--shape",
        nargs="+",
        default=[
            "PIPELINED:EAGER",
            "BLOCKING:EAGER",
            "PIPELINED:LAZY_FROM_SOURCES",
            "BLOCKING:LAZY_FROM_SOURCES",
        ],
    )
    parser.add_argument("--profile", choices=PHASES, help="cProfile this phase (to stderr)")
    parser.add_argument("--collector", choices=["service", "cpython"], default="service",
                        help="collector: a services run's (default), or CPython's")  # fmt: skip
    args = parser.parse_args()
    results: dict[str, Any] = {}
    for shape in args.shape:
        kind, mode = shape.split(":")
        for p in args.parallelism:
            key = f"{shape} P={p}"
            results[key] = figures = in_fork(
                lambda p=p, k=kind, m=mode: measure(
                    p, ResultPartitionType(k), ScheduleMode(m), args.profile, args.collector
                )
            )
            print(f"{key} (peak RSS {figures['peak_rss_mb']:.0f} MB)", file=sys.stderr)
            for name in PHASES:
                f = figures[name]
                flink = FLINK_1_14_MS.get(name)
                beside = f"   Flink 1.14 at 10,000: {flink} ms" if flink else ""
                in_gc = f.get("gc_s", 0) * 1000
                print(f"  {name:18} {f['cpu_s'] * 1000:7.0f} ms CPU ({in_gc:5.0f} "
                      f"in gc) {f['wall_s'] * 1000:7.0f} ms "
                      f"wall {int(f.get('events', 0)):7d} events {f.get('bytes', 0) / 1e6:9.2f} "
                      f"MB{beside}", file=sys.stderr)  # fmt: skip
    summary: dict[str, Any] = {"results": results}
    for shape in args.shape:
        small, big = results.get(f"{shape} P=1000"), results.get(f"{shape} P=4000")
        if small and big:
            a, b = small["scheduling"], big["scheduling"]
            summary[f"{shape} ratio_4000_to_1000"] = round(b["cpu_s"] / a["cpu_s"], 2)
            summary[f"{shape} ratio_outside_gc_4000_to_1000"] = round(
                (b["cpu_s"] - b["gc_s"]) / (a["cpu_s"] - a["gc_s"]), 2
            )
            print(f"{shape} scheduling P=4000 / P=1000: {summary[f'{shape} ratio_4000_to_1000']}"
                  f" CPU, {summary[f'{shape} ratio_outside_gc_4000_to_1000']} outside the "
                  "garbage collector's passes", file=sys.stderr)  # fmt: skip
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
