"""Fairness between tenants, in event time, on the reducers alone (no broker, no Spark): one
client floods 10,000 one-task jobs in a minute, another submits a job three times wider than the
cluster (its subtasks deployed as slots come, LAZY_FROM_SOURCES),
and a third submits a small job every half second. Prints the third client's p50/p99 from
submission to FINISHED, first come first served (every job `anonymous`, as before tenants)
and with principals and the default limits; last line JSON.

    python bench/fairness.py [--jobs 10000] [--task-executors 16]
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
import time
from itertools import count

from jobledger.schemas import Event
from jobledger.schemas.cluster import TaskManagerRegistered
from jobledger.schemas.jobs import JobStatusChanged, JobSubmitted
from jobledger.schemas.tasks import (
    TaskDeploymentRequested,
    TaskExecutionStateChanged,
    TaskFinalStateReported,
)
from jobledger.schemas.types import ExecutionState, JobVertex, ResourceProfile, ScheduleMode
from jobledger.services.client.dispatcher import submission
from jobledger.services.configuration import Configuration

RUN_MS = {"flood": 500, "hog": 20_000, "small": 200}
"""How long each client's tasks run."""


def vertex(parallelism: int) -> JobVertex:
    return JobVertex(vertex_id="v", name="v", invokable_class_name="noop:source",
                     parallelism=parallelism)  # fmt: skip


def simulate(jobs: int, task_executors: int, tenants: bool) -> dict[str, list[int]]:
    """Each client's latencies (ms of event time from submission to FINISHED), one per job
    that finished."""
    options = ["heartbeat.timeout=1 h"]
    if not tenants:
        options += ["jobledger.principal.max-jobs-in-flight=0",
                    "jobledger.principal.max-submissions-per-second=0"]  # fmt: skip
    driver = Configuration.parse(options).new_driver()
    ids = count()
    inbox: list[tuple[int, int, Event]] = []

    def at(t: int, cls: type, **fields) -> None:
        n = next(ids)
        heapq.heappush(inbox, (t, n, cls(event_id=f"in-{n}", event_time=t, producer="bench",
                                         **fields)))  # fmt: skip

    for i in range(task_executors):
        at(0, TaskManagerRegistered, resource_id=f"tm-{i}", address=f"tm-{i}:1", number_of_slots=4,
           resource_profile=ResourceProfile())  # fmt: skip
    slots = 4 * task_executors
    plan = [(1, "hog", "bob", 3 * slots)]
    plan += [(2 + i * 60_000 // jobs, "flood", "mallory", 1) for i in range(jobs)]
    plan += [(5 + i * 500, "small", "alice", 2) for i in range(120)]
    submitted: dict[str, int] = {}
    for t, kind, who, parallelism in plan:
        job_id = f"{kind}-{t}-{next(ids)}"
        submitted[job_id] = t
        lazy = ScheduleMode.LAZY_FROM_SOURCES
        at(t, JobSubmitted, job_id=job_id, job_name=kind, vertices=[vertex(parallelism)],
           schedule_mode=lazy, principal=who if tenants else None)  # fmt: skip
    finished: dict[str, list[int]] = {}
    while inbox:
        t, _, event = heapq.heappop(inbox)
        events = [event]
        if isinstance(event, JobSubmitted):
            events = submission(event, "bench")
            events[1:] = [e.model_copy(update={"event_time": t}) for e in events[1:]]
        for derived in driver.run(events):
            if isinstance(derived, TaskDeploymentRequested):
                kind = derived.job_id.split("-")[0]
                fields = {"job_id": derived.job_id, "job_master_id": derived.job_master_id,
                          "execution_attempt_id": derived.execution_attempt_id}  # fmt: skip
                for state in (ExecutionState.INITIALIZING, ExecutionState.RUNNING):
                    at(t, TaskExecutionStateChanged, execution_state=state, **fields)
                done = t + RUN_MS[kind]
                at(done, TaskFinalStateReported, job_id=derived.job_id,
                   resource_id=derived.resource_id,
                   execution_attempt_id=derived.execution_attempt_id,
                   execution_state=ExecutionState.FINISHED)  # fmt: skip
                at(done, TaskExecutionStateChanged, execution_state=ExecutionState.FINISHED,
                   **fields)  # fmt: skip
            elif isinstance(derived, JobStatusChanged) and derived.to_status.value == "FINISHED":
                finished.setdefault(derived.job_id.split("-")[0], []).append(
                    derived.event_time - submitted[derived.job_id]
                )
    return finished


def percentile(values: list[int], p: float) -> int | None:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))] if ordered else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--task-executors", type=int, default=16)
    args = parser.parse_args(argv)
    result = {}
    for name, tenants in (("fifo", False), ("tenants", True)):
        started = time.monotonic()
        finished = simulate(args.jobs, args.task_executors, tenants)
        lat = finished.get("small", [])
        result[name] = {"small_finished": len(lat), "small_submitted": 120,
                        "p50_ms": percentile(lat, 0.5), "p99_ms": percentile(lat, 0.99),
                        "flood_finished": len(finished.get("flood", [])),
                        "hog_ms": max(finished.get("hog", [0])),
                        "wall_s": round(time.monotonic() - started, 1)}  # fmt: skip
        print(
            f"{name}: the small client's jobs finished {len(lat)}/120, p50 "
            f"{result[name]['p50_ms']} ms, p99 {result[name]['p99_ms']} ms; the flood's "
            f"{result[name]['flood_finished']}/{args.jobs}; the hog in "
            f"{result[name]['hog_ms']} ms",
            file=sys.stderr,
        )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
