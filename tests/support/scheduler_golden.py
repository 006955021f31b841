"""The scheduler's golden: scenarios played through the pure
in-process driver, every event of their logs recorded whole, so that moving the scheduler out
of the JobMaster is proven to change no event and no event id.

Each scenario is seeded and deterministic: whole jobs (EAGER, LAZY_FROM_SOURCES, with batch
slot requests) under every restart strategy and cluster size, driven by random steps that
reach every JobMaster handler (task reports, timers, cancellation, rescale, lost
TaskManagers, leadership, KvState, slot inputs made directly of the pool), the slot-management
scenario, and SlotPools fed random slot inputs both inside the cluster and alone.

`python -m tests.support.scheduler_golden` writes tests/golden/scheduler.jsonl.gz (run it on the
code the golden is to hold, never to make a failing comparison pass).
"""

from __future__ import annotations

import gzip
import json
import random
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from jobledger.schemas import Event
from jobledger.schemas.cluster import (
    JobMasterRegistrationRequested,
    ResourceManagerConnected,
    ResourceManagerDisconnected,
    TaskManagerDisconnected,
    TaskManagerLost,
)
from jobledger.schemas.jobs import (
    JobCancellationRequested,
    JobMasterLeadershipGranted,
    JobMasterLeadershipRevoked,
    JobMasterStopped,
    JobSubmitted,
    RescaleRequested,
)
from jobledger.schemas.json_form import event_to_dict
from jobledger.schemas.kvstate import KvStateRegistered, KvStateUnregistered
from jobledger.schemas.slots import (
    AllocationFailed,
    AvailableSlotAllocationRequested,
    BatchSlotRequestTimeoutCheckDisabled,
    NewAllocatedSlotRequested,
    SlotOffered,
    SlotRequested,
    SlotRequestFulfilled,
    SlotRequestReleased,
)
from jobledger.schemas.tasks import (
    TaskDeploymentRequested,
    TaskSubmissionRejected,
)
from jobledger.schemas.types import (
    ExecutionState,
    KeyGroupRange,
    RestartStrategy,
    RestartStrategyKind,
    ScheduleMode,
)
from jobledger.services.control.driver import ReducerDriver
from jobledger.services.control.job_master import JobMasterConfig
from jobledger.services.control.resource_manager import ResourceManager, ResourceManagerConfig
from jobledger.services.control.slot_pool import SlotPool, SlotPoolConfig

from ..control import test_slot_properties as slot_chaos
from . import scenario as slot_scenario
from .events import ANY, UNKNOWN, Clock, profile
from .jobs import JM, JOB, JobCluster, Runner, finishes, fixed_delay, vertex

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "scheduler.jsonl.gz"

GRAPHS = {
    "pipeline": [vertex("src", 2), vertex("sink", 2, ("src", "ALL_TO_ALL", "PIPELINED"))],
    "blocking": [vertex("src", 2), vertex("sink", 1, ("src", "POINTWISE", "BLOCKING"))],
    "single": [vertex("only", 1)],
    "three": [
        vertex("a", 2, max_p=8),
        vertex("b", 3, ("a", "POINTWISE", "PIPELINED")),
        vertex("c", 1, ("b", "ALL_TO_ALL", "BLOCKING")),
    ],
}
RESTARTS = {
    "none": RestartStrategy(),
    "fixed-0": fixed_delay(attempts=3, delay_ms=0),
    "fixed-100": fixed_delay(attempts=2, delay_ms=100),
    "rate": RestartStrategy(
        kind=RestartStrategyKind.FAILURE_RATE, max_failures_per_interval=2,
        failure_rate_interval_ms=1_000, delay_ms=50,
    ),
}  # fmt: skip
CLUSTERS = [(1, 1), (1, 2), (2, 4), (3, 2)]
MODES = [
    ScheduleMode.EAGER,
    ScheduleMode.LAZY_FROM_SOURCES,
    ScheduleMode.LAZY_FROM_SOURCES_WITH_BATCH_SLOT_REQUEST,
]
REPORTABLE = [
    ExecutionState.INITIALIZING, ExecutionState.RUNNING, ExecutionState.FINISHED,
    ExecutionState.FAILED, ExecutionState.CANCELED, ExecutionState.SCHEDULED,
]  # fmt: skip
RUNNERS: list[Runner] = [
    finishes,
    lambda d: [ExecutionState.RUNNING],
    lambda d: [ExecutionState.INITIALIZING, ExecutionState.FAILED],
    lambda d: [ExecutionState.RUNNING, ExecutionState.FAILED] if d.attempt_number == 0 else [],
    lambda d: [ExecutionState.FAILED] if d.subtask_index == 0 else finishes(d),
]
STEPS = (
    ["report"] * 6 + ["run"] * 4 + ["tick"] * 3 + ["lose", "lead", "revoke", "connect"]
    + ["cancel", "rescale", "kv", "kv", "unregister", "slot_input", "slot_input", "reject"]
    + ["disconnect", "lose_tm"]
)  # fmt: skip
SLOT_INPUTS = ["offer", "fail", "request", "take", "release", "batch_off", "stop", "register"]


Played = tuple[list[Event], dict[str, Any]]
"""A scenario's log, and the state it left (to_dict and next_timer of its reducers)."""


def job_masters(driver: ReducerDriver) -> dict[str, Any]:
    return {
        job: {"state": jm.to_dict(), "next_timer": jm.next_timer()}
        for job, jm in sorted(driver.job_masters.items())
    }


class JobScript:
    """One seeded job scenario: a JobCluster and random steps against it. Ids to aim at are
    taken from the log, never from reducer state, so the script is the same on any code."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        tms, slots = self.rng.choice(CLUSTERS)
        self.cluster = JobCluster(task_executors=tms, slots=slots)
        self.graph = self.rng.choice(list(GRAPHS))
        self.mode = self.rng.choice(MODES)
        self.restart = self.rng.choice(list(RESTARTS))
        self.tms = tms

    def play(self, steps: int) -> Played:
        """The log, and the JobMaster's state and next timer after the last step."""
        c, rng = self.cluster, self.rng
        lead = rng.random() < 0.8
        c.submit(GRAPHS[self.graph], mode=self.mode, restart=RESTARTS[self.restart], lead=lead)
        timers = []
        for _ in range(steps):
            getattr(self, f"_{rng.choice(STEPS)}")()
            timers.append(c.jm.next_timer() if JOB in c.driver.job_masters else None)
        return c.log, {**job_masters(c.driver), "next_timers": timers}

    def _of(self, cls: type[Event], field: str) -> list[str]:
        return [getattr(e, field) for e in self.cluster.log if isinstance(e, cls)]

    def _pick(self, choices: list[str], fallback: str) -> str:
        return self.rng.choice(choices) if choices else fallback

    def _leader(self) -> str:
        return self.rng.choice([JM, JM, JM, "jm-2", "jm-3"])

    def _report(self) -> None:
        attempts = self._of(TaskDeploymentRequested, "execution_attempt_id")
        if attempts:
            error = self.rng.choice([None, "java.lang.RuntimeException: boom"])
            self.cluster.report(
                self.rng.choice(attempts), self.rng.choice(REPORTABLE), error, self._leader()
            )

    def _run(self) -> None:
        self.cluster.play(self.rng.choice(RUNNERS))

    def _tick(self) -> None:
        c = self.cluster
        c.tick(c.clock.now + self.rng.choice([0, 1, 50, 100, 1_000, 60_000, 300_001]))

    def _input(self, cls: type[Event], **fields: Any) -> None:
        c = self.cluster
        c.run([c.clock(cls, **fields)])

    def _lose(self) -> None:
        tm = f"tm-{self.rng.randrange(self.tms + 1)}"
        self._input(TaskManagerDisconnected, job_id=JOB, resource_id=tm, cause="lost")

    def _lose_tm(self) -> None:
        tm = f"tm-{self.rng.randrange(self.tms)}"
        self._input(TaskManagerLost, resource_id=tm, cause="TaskExecutor process killed")

    def _lead(self) -> None:
        self._input(JobMasterLeadershipGranted, job_id=JOB, job_master_id=self._leader())

    def _revoke(self) -> None:
        self._input(JobMasterLeadershipRevoked, job_id=JOB, job_master_id=self._leader())

    def _connect(self) -> None:
        self._input(ResourceManagerConnected, job_id=JOB, resource_manager_id="resourcemanager")

    def _disconnect(self) -> None:
        self._input(
            ResourceManagerDisconnected, job_id=JOB, resource_manager_id="resourcemanager",
            cause="gone",
        )  # fmt: skip

    def _cancel(self) -> None:
        self._input(JobCancellationRequested, job_id=JOB)

    def _rescale(self) -> None:
        target = self.rng.choice([None, None, "src", "a", "nope"])
        parallelism = self.rng.choice([0, 1, 2, 3, 9])
        self._input(RescaleRequested, job_id=JOB, new_parallelism=parallelism, vertex_id=target)

    def _kv_fields(self) -> dict[str, Any]:
        rng = self.rng
        start = rng.choice([0, 0, 4, 64, 5, -1])
        end = start + rng.choice([3, 63, -2])
        return dict(
            job_id=JOB, job_master_id=rng.choice([JM, JM, None, "jm-2"]),
            job_vertex_id=rng.choice([*(v.vertex_id for v in GRAPHS[self.graph]), "ghost"]),
            key_group_range=KeyGroupRange(start_key_group=start, end_key_group=end),
            registration_name=rng.choice(["counts", "sums"]),
        )  # fmt: skip

    def _kv(self) -> None:
        n = self.rng.randrange(4)
        self._input(
            KvStateRegistered, **self._kv_fields(), kv_state_id=f"kv-{n}", server_host="h",
            server_port=9000 + n,
        )  # fmt: skip

    def _unregister(self) -> None:
        self._input(KvStateUnregistered, **self._kv_fields())

    def _reject(self) -> None:
        deployed = [
            e for e in self.cluster.log if isinstance(e, TaskDeploymentRequested)
        ] or [None]  # fmt: skip
        d = self.rng.choice(deployed)
        self._input(
            TaskSubmissionRejected, job_id=JOB,
            resource_id=d.resource_id if d else "tm-0",
            execution_attempt_id=d.execution_attempt_id if d else "ghost",
            allocation_id=d.allocation_id if d else "ghost", reason="no such slot",
        )  # fmt: skip

    def _slot_input(self) -> None:
        """A slot input made directly of the job's pool (as the log may carry them)."""
        rng = self.rng
        kind = rng.choice(SLOT_INPUTS)
        allocations = self._of(SlotRequested, "allocation_id") + self._of(
            SlotRequestFulfilled, "allocation_id"
        )
        allocation = self._pick(allocations, "ghost")
        requests = self._of(SlotRequestFulfilled, "slot_request_id") + [
            f"foreign-{n}" for n in range(3)
        ]
        tm = f"tm-{rng.randrange(self.tms + 1)}"
        if kind == "offer":
            self._input(
                SlotOffered, job_id=JOB, job_master_id=rng.choice([JM, None, "jm-2"]),
                resource_id=tm, slot_index=rng.randrange(3), allocation_id=allocation,
                resource_profile=rng.choice([ANY, UNKNOWN, profile(1.0, 1024)]),
            )  # fmt: skip
        elif kind == "fail":
            self._input(
                AllocationFailed, job_id=JOB, allocation_id=allocation, cause="chaos",
                resource_id=rng.choice([None, tm]), unfulfillable=rng.random() < 0.3,
            )  # fmt: skip
        elif kind == "request":
            self._input(
                NewAllocatedSlotRequested, job_id=JOB,
                slot_request_id=f"foreign-{rng.randrange(3)}",
                resource_profile=rng.choice([UNKNOWN, profile(1.0, 1024), profile(8.0)]),
                batch_request=rng.random() < 0.3, timeout_ms=rng.choice([100, 5_000]),
            )  # fmt: skip
        elif kind == "take":
            self._input(
                AvailableSlotAllocationRequested, job_id=JOB,
                slot_request_id=rng.choice(requests), allocation_id=allocation,
            )  # fmt: skip
        elif kind == "release":
            self._input(SlotRequestReleased, job_id=JOB, slot_request_id=rng.choice(requests))
        elif kind == "batch_off":
            self._input(BatchSlotRequestTimeoutCheckDisabled, job_id=JOB)
        elif kind == "stop":
            self._input(JobMasterStopped, job_id=JOB, cause="chaos")
        else:
            self._input(
                JobMasterRegistrationRequested, job_id=JOB,
                job_master_id=rng.choice([JM, None, "jm-2"]), resource_id=tm,
            )  # fmt: skip


def lead_then_submit(seed: int) -> Played:
    """Leadership (and a second JobSubmitted) before and around the submission."""
    rng = random.Random(seed)
    c = JobCluster(task_executors=2, slots=2)
    graph = rng.choice(list(GRAPHS))
    c.run([c.clock(JobMasterLeadershipGranted, job_id=JOB, job_master_id=JM)])
    c.submit(GRAPHS[graph], mode=rng.choice(MODES), restart=RESTARTS["fixed-0"], lead=False)
    c.run([
        c.clock(ResourceManagerConnected, job_id=JOB, resource_manager_id="resourcemanager"),
        c.clock(JobSubmitted, job_id=JOB, job_name="again", vertices=GRAPHS["single"]),
    ])  # fmt: skip
    c.play(rng.choice(RUNNERS))
    c.tick(c.clock.now + 10)
    c.play()
    return c.log, job_masters(c.driver)


def invalid_submissions() -> Played:
    c = JobCluster()
    for vertices in (
        [vertex("a", 0)],
        [vertex("a", 4, max_p=2)],
        [vertex("a", 1, ("b", "ALL_TO_ALL", "BLOCKING")),
         vertex("b", 1, ("a", "ALL_TO_ALL", "BLOCKING"))],
        [vertex("a", 1, ("zzz", "ALL_TO_ALL", "PIPELINED"))],
    ):  # fmt: skip
        c.submit(vertices, lead=False)
    c.run([
        c.clock(JobMasterLeadershipGranted, job_id="ghost", job_master_id=JM),
        c.clock(
            KvStateRegistered, job_id="nobody", job_vertex_id="v",
            key_group_range=KeyGroupRange(start_key_group=0, end_key_group=0),
            registration_name="n", kv_state_id="k", server_host="h", server_port=1,
        ),
    ])  # fmt: skip
    return c.log, job_masters(c.driver)


def slot_management() -> Played:
    clock = Clock()
    driver = ReducerDriver()
    log = driver.run(slot_scenario.start_cluster(clock))
    log += driver.run(slot_scenario.finish_job_a(clock))
    log += driver.run(slot_scenario.lose_tm_4(clock))
    log += driver.run(slot_scenario.re_request_failed(clock, log))
    return log, job_masters(driver)


def slot_chaos_run(seed: int) -> Played:
    """The slot invariants' random steps, over two jobs' pools in the whole cluster."""
    pool = SlotPoolConfig(idle_slot_timeout_ms=3_000, batch_slot_timeout_ms=4_000)
    driver = ReducerDriver(
        resource_manager=ResourceManager(ResourceManagerConfig(heartbeat_timeout_ms=50_000)),
        job_master_config=JobMasterConfig(pool=pool),
    )
    log: list[Event] = []
    for n, step in enumerate(slot_chaos_script(seed)):
        log += driver.run([slot_chaos.to_event(step, n, driver)])
    return log, job_masters(driver)


def _chaos_step(rng: random.Random, time: int) -> dict[str, Any]:
    return {
        "kind": rng.choice(["request"] * 4 + ["release"] * 2 + ["tick"] * 2 + [
            "fail", "take", "free", "offer", "register", "lost", "disconnect", "stop",
            "revoke", "start", "connect",
        ]),
        "time": time, "job": rng.choice(slot_chaos.JOBS), "tm": rng.choice(slot_chaos.TMS),
        "req": rng.choice(["r1", "r2", "r3", "r4"]), "alloc": rng.choice(["x1", "x2"]),
        "profile": rng.choice(slot_chaos.PROFILES), "batch": rng.random() < 0.5,
        "jm": rng.choice(["jm-a", "jm-b"]),
    }  # fmt: skip


def slot_chaos_script(seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    prelude = [{**_chaos_step(rng, 0), **step} for step in slot_chaos.PRELUDE]
    return prelude + [_chaos_step(rng, 1_000 * (i + 1)) for i in range(rng.randrange(10, 40))]


def lone_pool(seed: int) -> Played:
    """A SlotPool alone (producer "slotpool"), fed the chaos steps of one job."""
    pool = SlotPool(slot_chaos.JOBS[0], SlotPoolConfig(3_000, 4_000))
    holder = SimpleNamespace(pools={pool.job_id: pool})
    log: list[Event] = []
    for n, step in enumerate(slot_chaos_script(seed)):
        event = slot_chaos.to_event({**step, "job": pool.job_id}, n, holder)
        if getattr(event, "job_id", None) != pool.job_id:
            continue
        log += [event, *pool.apply(event)]
    return log, {"pool": pool.to_dict(), "next_timer": pool.next_timer()}


REDELIVERED = [350, 376, 394, 462, 545, 553, 579, 754]
"""Job seeds that met a slot completion told twice to the scheduler (a nested SlotPool call
told it, then the outer call again), which put two attempts in one slot. Their logs, and
job-69's, are the only ones the fix changed: the golden was recorded before the scheduler
split, and re-recorded once, for that fix alone."""


SCENARIOS: dict[str, Callable[[], Played]] = {
    "invalid-submissions": invalid_submissions,
    "slot-management": slot_management,
    **{f"lead-then-submit-{s}": (lambda s=s: lead_then_submit(s)) for s in range(8)},
    **{f"job-{s}": (lambda s=s: JobScript(s).play(30)) for s in [*range(120), *REDELIVERED]},
    **{f"slot-chaos-{s}": (lambda s=s: slot_chaos_run(s)) for s in range(30)},
    **{f"lone-pool-{s}": (lambda s=s: lone_pool(s)) for s in range(20)},
}
"""Every scenario by name, in the golden's order."""


def records() -> Iterator[dict[str, Any]]:
    """Every event of every scenario, whole, in log order, then the state it left."""
    for name, play in SCENARIOS.items():
        log, state = play()
        for index, event in enumerate(log):
            yield {"scenario": name, "index": index, "event": event_to_dict(event)}
        yield {"scenario": name, "state": state}


def write(path: Path = GOLDEN) -> int:
    lines = [json.dumps(r, sort_keys=True, separators=(",", ":")) for r in records()]
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode(), mtime=0))
    return len(lines)


if __name__ == "__main__":
    sys.exit(print(write(), "records written to", GOLDEN))
