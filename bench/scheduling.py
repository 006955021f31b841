"""Scheduling benchmark: the pure reducers schedule and deploy a two-vertex ALL_TO_ALL job
(Flink's scheduler benchmark topology, FLINK-20612) at parallelism 1000 and 4000, in one
process, with no broker: does the control plane's cost grow linearly with the job?

    python bench/scheduling.py [--parallelism 1000 4000] [--repeats 5] [--mode EAGER ...]

Per parallelism P a cluster of P/2 TaskExecutors x 4 slots (2P slots: no slot sharing) is
registered at the ResourceManager, untimed; then each round, in a forked child of that
process (so every round starts from the same fresh state and none from what an earlier one
left), the job is submitted (JobSubmitted, leadership, ResourceManager connected) and run
through `ReducerDriver` (slot requests, TaskExecutor allocations, offers, accepts) until
every one of its 2P subtasks has a TaskDeploymentRequested. LAZY_FROM_SOURCES deploys the
consumers only once their producers run, so there every source deployment is answered with
INITIALIZING and RUNNING, one report at a time, as a runner would (timed: it is the
schedule). Each figure is the median of `--repeats` rounds: this child's CPU seconds, wall
seconds beside them, and the CPU seconds of the garbage collector's passes among them
(`gc_s`, with `full_gcs` the full ones). The last line is one JSON object with these per
mode and P, and for EAGER `ratio_4000_to_1000` (CPU seconds: the work is single-threaded,
and on a shared machine wall seconds move with the load, not with the code),
`wall_ratio_4000_to_1000`, and `ratio_outside_gc_4000_to_1000`; LAZY_FROM_SOURCES's carry
its name as a prefix. Four times the subtasks at linear cost is a ratio near 4. Each round
runs under the collector policy of a `services run` (`--collector service`:
`gc_policy.live_service`, the registered cluster frozen as a rebuilt state is) and under
CPython's own (`cpython`, its ratios prefixed `cpython_`). Outside the collector the ratio is
4.0-4.2 either way; CPython's full passes add the rest: each walks the whole heap, and CPython
runs one once enough objects survived (10 middle passes, a quarter of the heap), which a job
of 1000 barely reaches (0 or 1) and one of 4000 does 3 or 4 times, over a heap of 150k-340k
objects (the events in the driver's queue and log). The services' policy makes none here.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from typing import Any

from forked import in_fork

from jobledger.schemas import Event
from jobledger.schemas.cluster import ResourceManagerConnected, TaskManagerRegistered
from jobledger.schemas.jobs import JobMasterLeadershipGranted, JobSubmitted
from jobledger.schemas.tasks import TaskDeploymentRequested, TaskExecutionStateChanged
from jobledger.schemas.types import (
    DistributionPattern,
    ExecutionState,
    JobEdge,
    JobVertex,
    ResourceProfile,
    ResourceProfileKind,
    ScheduleMode,
)
from jobledger.services.control.driver import ReducerDriver
from jobledger.services.control.job_master import JobMasterConfig
from jobledger.services.host import gc_policy

SLOTS_PER_TASK_EXECUTOR = 4
SLOT = ResourceProfile(kind=ResourceProfileKind.SPECIFIED, cpu_cores=1.0, task_heap_memory_mb=512)
JOB = "job-scheduling"
JM = "jm-scheduling"


class Inputs:
    """Input events with unique ids and event times 1 ms apart, as a client would write them."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, cls: type[Event], **fields: Any) -> Event:
        self.count += 1
        return cls(event_id=f"in-{self.count}", event_time=1_700_000_000_000 + self.count,
                   producer="bench", **fields)  # fmt: skip


def cluster(parallelism: int) -> tuple[ReducerDriver, Inputs]:
    """A driver with enough TaskExecutors registered for both vertices' subtasks, and no
    deployment window (Flink's benchmark deploys every task at once)."""
    unbounded = JobMasterConfig(max_pending_deployments=0)
    driver, make = ReducerDriver(job_master_config=unbounded), Inputs()
    task_executors = -(-2 * parallelism // SLOTS_PER_TASK_EXECUTOR)
    driver.run([make(TaskManagerRegistered, resource_id=f"tm-{i:05d}", address=f"tm-{i}:6122",
                     number_of_slots=SLOTS_PER_TASK_EXECUTOR, resource_profile=SLOT)
                for i in range(task_executors)])  # fmt: skip
    return driver, make


def submission(make: Inputs, parallelism: int, mode: ScheduleMode) -> list[Event]:
    """The two-vertex ALL_TO_ALL job, submitted and led."""
    vertices = [
        JobVertex(vertex_id="source", name="source", invokable_class_name="noop",
                  parallelism=parallelism),
        JobVertex(vertex_id="sink", name="sink", invokable_class_name="noop",
                  parallelism=parallelism,
                  inputs=[JobEdge(source_vertex_id="source",
                                  distribution_pattern=DistributionPattern.ALL_TO_ALL)]),
    ]  # fmt: skip
    return [
        make(JobSubmitted, job_id=JOB, job_name="all-to-all", vertices=vertices,
             schedule_mode=mode),
        make(JobMasterLeadershipGranted, job_id=JOB, job_master_id=JM),
        make(ResourceManagerConnected, job_id=JOB, resource_manager_id="resourcemanager"),
    ]  # fmt: skip


def schedule(driver: ReducerDriver, make: Inputs, parallelism: int, mode: ScheduleMode) -> int:
    """Submit the job and run it until every subtask was deployed; LAZY_FROM_SOURCES's
    deployments are answered (INITIALIZING, RUNNING) one report at a time until none is new.
    Returns the number of deployments."""
    deployed = 0
    pending = [e for e in driver.run(submission(make, parallelism, mode))
               if isinstance(e, TaskDeploymentRequested)]  # fmt: skip
    while pending:
        deployed += len(pending)
        if deployed >= 2 * parallelism:
            break
        new: list[Event] = []
        for d in pending:
            for state in (ExecutionState.INITIALIZING, ExecutionState.RUNNING):
                report = make(TaskExecutionStateChanged, job_id=JOB, job_master_id=JM,
                              execution_attempt_id=d.execution_attempt_id, execution_state=state,
                              resource_id=d.resource_id)  # fmt: skip
                new += driver.run([report])
        pending = [e for e in new if isinstance(e, TaskDeploymentRequested)]
    if deployed != 2 * parallelism:
        raise RuntimeError(f"{deployed} of {2 * parallelism} subtasks deployed")
    return deployed


def one_round(driver: ReducerDriver, make: Inputs, parallelism: int, mode: ScheduleMode):
    """One timed submission: wall and CPU seconds, and the CPU seconds of the cyclic garbage
    collector's passes within it (`gc_s`) and how many of them were full (`full_gcs`)."""
    collector = {"gc_s": 0.0, "full_gcs": 0}
    started = [0.0]

    def timed_collection(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.process_time()
            return
        collector["gc_s"] += time.process_time() - started[0]
        collector["full_gcs"] += info["generation"] == 2

    gc.callbacks.append(timed_collection)
    cpu, wall = time.process_time(), time.perf_counter()
    schedule(driver, make, parallelism, mode)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    gc.callbacks.remove(timed_collection)
    return {"wall_s": wall, "cpu_s": cpu, **collector}


def measured_round(
    driver: ReducerDriver, make: Inputs, parallelism: int, mode: ScheduleMode, collector: str
) -> dict[str, float]:
    """One round in this (forked) child, under `collector`: `cpython`'s own thresholds, or
    `service`, the policy a `services run` process serves under (`gc_policy.live_service`,
    with the state rebuilt before the job came, here the registered cluster, frozen)."""
    if collector == "service":
        gc_policy.live_service()
        gc_policy.rebuilt()
    return one_round(driver, make, parallelism, mode)


def measure(parallelism: int, mode: ScheduleMode, repeats: int, collector: str) -> dict[str, float]:
    """Medians over `repeats` forked rounds, from one cluster registered once. A small job
    is scheduled first, on a throwaway cluster: the builders of the events a job derives are
    compiled on their first use in a process (a running service's compiled long before), a
    fixed 0.04 s that would otherwise be in every round."""
    warm_up, made = cluster(2)
    schedule(warm_up, made, 2, mode)
    driver, make = cluster(parallelism)
    rounds = [in_fork(lambda: measured_round(driver, make, parallelism, mode, collector))
              for _ in range(repeats)]  # fmt: skip
    return {key: round(statistics.median(r[key] for r in rounds), 4)
            for key in ("wall_s", "cpu_s", "gc_s", "full_gcs")}  # fmt: skip


def ratios(by_p: dict[str, dict[str, float]], prefix: str) -> dict[str, float]:
    """P=4000 over P=1000: of CPU seconds, of wall seconds, and of CPU outside the collector."""
    outside_gc = {p: by_p[p]["cpu_s"] - by_p[p]["gc_s"] for p in ("1000", "4000")}
    return {
        f"{prefix}ratio_4000_to_1000": round(by_p["4000"]["cpu_s"] / by_p["1000"]["cpu_s"], 2),
        f"{prefix}wall_ratio_4000_to_1000": round(
            by_p["4000"]["wall_s"] / by_p["1000"]["wall_s"], 2
        ),
        f"{prefix}ratio_outside_gc_4000_to_1000": round(outside_gc["4000"] / outside_gc["1000"], 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parallelism", type=int, nargs="+", default=[1000, 4000])
    parser.add_argument("--repeats", type=int, default=5, help="rounds per figure (median)")
    parser.add_argument("--mode", nargs="+", default=["EAGER", "LAZY_FROM_SOURCES"],
                        choices=["EAGER", "LAZY_FROM_SOURCES"])  # fmt: skip
    parser.add_argument("--collector", nargs="+", default=["service", "cpython"],
                        choices=["service", "cpython"],
                        help="collector policy: a services run's, or CPython's")  # fmt: skip
    args = parser.parse_args()
    if args.repeats < 1 or any(p < 1 for p in args.parallelism):
        parser.error("--repeats and every --parallelism must be at least 1")
    results: dict[str, dict[str, dict[str, float]]] = {}
    summary: dict[str, Any] = {"repeats": args.repeats, "seconds": results}
    for collector in args.collector:
        for mode in args.mode:
            name = mode if collector == "service" else f"{mode}/cpython"
            by_p = results[name] = {}
            for p in args.parallelism:
                figures = by_p[str(p)] = measure(p, ScheduleMode(mode), args.repeats, collector)
                print(f"{name} P={p}: {figures['wall_s']:.3f} s wall, {figures['cpu_s']:.3f} s "
                      f"CPU, of which {figures['gc_s']:.3f} s in {figures['full_gcs']:g} full and "
                      f"the young garbage collections (median of {args.repeats})",
                      file=sys.stderr)  # fmt: skip
            if "1000" in by_p and "4000" in by_p:
                prefix = ("" if mode == "EAGER" else f"{mode.lower()}_") + (
                    "" if collector == "service" else "cpython_"
                )
                summary.update(ratios(by_p, prefix))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
