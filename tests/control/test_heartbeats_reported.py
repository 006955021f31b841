"""A runner's TaskExecutors beat in one record (`TaskManagerHeartbeatsReported`):
each beat decides what a `TaskManagerHeartbeat` of its instance would, so every
TaskExecutor's loss is decided alike however its beats were carried, and again by replay."""

from __future__ import annotations

from jobledger.schemas import Event
from jobledger.schemas.cluster import (
    MAX_BEATS_PER_RECORD,
    TaskManagerConnectionClosed,
    TaskManagerHeartbeat,
    TaskManagerHeartbeatsReported,
    TaskManagerLost,
    TaskManagerRegistered,
)
from jobledger.schemas.slots import SlotAllocationRequested
from jobledger.schemas.timers import CLOCK, TimerFired
from jobledger.schemas.topics import TopicRole
from jobledger.schemas.types import ExecutionState, OwnerKind, TaskManagerBeat
from jobledger.services.control.driver import ReducerDriver
from jobledger.services.control.resource_manager import ResourceManager, ResourceManagerConfig
from jobledger.services.runner.heartbeats import heartbeats_reported

from ..support.events import UNKNOWN, Clock, Derived, assert_derived, expect, profile, rejection
from ..support.jobs import JobCluster, fixed_delay, vertex

SCOPE = dict(scope=OwnerKind.RESOURCE_MANAGER, owner_id="rm")


def beats(*pairs: tuple[str, str | None]) -> list[TaskManagerBeat]:
    return [TaskManagerBeat(resource_id=rid, instance_id=instance) for rid, instance in pairs]


def closed(tm: str, cause: str, instance: str | None) -> object:
    return expect(
        TaskManagerConnectionClosed, resource_id=tm, resource_manager_id="rm", cause=cause,
        instance_id=instance, replaced_by_instance_id=None,
    )  # fmt: skip


def test_each_beat_of_a_runner_s_record_decides_as_its_own_heartbeat_would():
    """tm-1's registered instance is kept alive; tm-9, unknown, has its connection closed;
    tm-2's replaced instance is refused and keeps nothing alive: in the record's order, whole.
    The clock then loses tm-2 alone."""
    clock = Clock()
    rm = ResourceManager(ResourceManagerConfig("rm", heartbeat_timeout_ms=1_000))
    registrations = (("tm-1", "i1", 10_000), ("tm-2", "a", 10_000), ("tm-2", "b", 10_100))
    for rid, instance, at in registrations:
        rm.apply(clock(TaskManagerRegistered, at=at, resource_id=rid, address="x",
                       number_of_slots=1, resource_profile=profile(1.0),
                       instance_id=instance))  # fmt: skip
    batch = clock(
        TaskManagerHeartbeatsReported, at=10_900, runner_id="r",
        beats=beats(("tm-1", "i1"), ("tm-9", "z"), ("tm-2", "a")),
    )  # fmt: skip
    not_registered = "TaskExecutor tm-9 is not registered"
    assert_derived(Derived(rm.apply(batch), batch, "resourcemanager"), [
        rejection(batch, OwnerKind.RESOURCE_MANAGER, "rm", not_registered),
        closed("tm-9", not_registered, "z"),
        rejection(batch, OwnerKind.RESOURCE_MANAGER, "rm",
                  "heartbeat of instance a of TaskExecutor tm-2, which is registered as "
                  "instance b"),
    ])  # fmt: skip
    tick = clock(TimerFired, at=11_101, **SCOPE)
    cause = "The heartbeat of TaskManager with id tm-2 timed out."
    assert_derived(Derived(rm.apply(tick), tick, "resourcemanager"), [
        expect(TaskManagerLost, resource_id="tm-2", cause=cause), closed("tm-2", cause, "b"),
    ])  # fmt: skip
    assert list(rm.task_executors) == ["tm-1"]


def test_a_record_of_more_beats_than_the_bound_is_refused_whole():
    clock = Clock()
    rm = ResourceManager(ResourceManagerConfig("rm"))
    too_many = beats(*[(f"tm-{i}", None) for i in range(MAX_BEATS_PER_RECORD + 1)])
    batch = clock(TaskManagerHeartbeatsReported, runner_id="r", beats=too_many)
    reason = (
        f"{MAX_BEATS_PER_RECORD + 1} heartbeats in one record, more than the "
        f"{MAX_BEATS_PER_RECORD} one may carry"
    )
    assert_derived(Derived(rm.apply(batch), batch, "resourcemanager"),
                   [rejection(batch, OwnerKind.RESOURCE_MANAGER, "rm", reason)])  # fmt: skip


def test_a_runner_batches_its_beats_within_the_bound_in_its_own_order():
    instances = {f"r-{i}": f"i{i}" for i in range(5)}
    records = heartbeats_reported("r", instances, "runner", 50, per_record=2)
    assert [[(b.resource_id, b.instance_id) for b in e.beats] for e in records] == [
        [("r-0", "i0"), ("r-1", "i1")], [("r-2", "i2"), ("r-3", "i3")], [("r-4", "i4")],
    ]  # fmt: skip
    assert {(e.runner_id, e.event_time, e.producer) for e in records} == {("r", 50, "runner")}
    assert len({e.event_id for e in records}) == 3
    assert heartbeats_reported("r", instances, "runner", 50, per_record=2) == records


class Beating(JobCluster):
    """Three TaskExecutors of one slot, a one-task job RUNNING on one of them; every batch of
    inputs run is kept, so that replay can run the same batches through fresh reducers."""

    def __init__(self) -> None:
        self.batches: list[list[Event]] = []
        super().__init__(task_executors=3, slots=1)
        self.submit([vertex("v", 1)], restart=fixed_delay(1, 0))
        (self.deployment,) = self.deployments()
        for state in (ExecutionState.INITIALIZING, ExecutionState.RUNNING):
            self.report(self.deployment.execution_attempt_id, state)

    def run(self, events: list[Event]) -> list[Event]:
        self.batches.append(list(events))
        return super().run(events)

    def silent_run(self, batched: bool) -> list[Event]:
        """The TaskExecutor running the task falls silent; the others beat at 20 s and 40 s
        (in one record each time, or one record each); the clock looks at 55 s and 65 s.
        Returns the log from the first beat on."""
        start = len(self.log)
        alive = sorted({"tm-0", "tm-1", "tm-2"} - {self.deployment.resource_id})
        for at in (20_000, 40_000):
            if batched:
                self.run([self.clock(TaskManagerHeartbeatsReported, at=at, runner_id="tm",
                                     beats=beats(*[(rid, None) for rid in alive]))])  # fmt: skip
            else:
                self.run([self.clock(TaskManagerHeartbeat, at=at, resource_id=rid)
                          for rid in alive])  # fmt: skip
        for at in (55_000, 65_000):
            tick = self.clock(TimerFired, at=at, scope=OwnerKind.RESOURCE_MANAGER,
                              owner_id="resourcemanager")  # fmt: skip
            self.run([tick.model_copy(update={"producer": CLOCK})])
        return self.log[start:]


def _outcome(log: list[Event]) -> list[tuple]:
    """Every decision but the answers to beats (none here), without ids, which derive from
    inputs of different ids: what the cluster decided, in order."""
    return [
        (type(e).__name__, e.event_time, getattr(e, "resource_id", None),
         getattr(e, "cause", None), getattr(e, "to_status", None))
        for e in log if e.cause_event_id is not None
    ]  # fmt: skip


def test_losses_are_decided_alike_from_batched_or_single_beats_and_again_by_replay():
    batched, single = Beating(), Beating()
    silent = batched.deployment.resource_id
    outcome = _outcome(batched.silent_run(batched=True))
    assert outcome == _outcome(single.silent_run(batched=False))
    cause = f"The heartbeat of TaskManager with id {silent} timed out."
    lost = [o for o in outcome if o[0] == "TaskManagerLost"]
    assert lost == [("TaskManagerLost", 55_000, silent, cause, None)]
    assert [o[4].value for o in outcome if o[0] == "JobStatusChanged"] == ["RESTARTING", "RUNNING"]
    replay = ReducerDriver()
    assert [e for batch in batched.batches for e in replay.run(batch)] == batched.log


def _passed_over(driver: ReducerDriver, role, now: int) -> list[str]:
    """What the clock's look answered before the indexes: a pass over every owner."""
    owners = {
        TopicRole.JOB: driver.job_masters,
        TopicRole.TASK_EXECUTOR: driver.task_executors,
        TopicRole.RESOURCE_MANAGER: {"resourcemanager": driver.resource_manager},
    }[role]
    return [o for o, r in sorted(owners.items()) if (d := r.next_timer()) is not None and d <= now]


def test_the_clock_s_look_answers_what_a_pass_over_every_owner_would():
    """The indexes of next timers (the ResourceManager's heap of beats, the driver's per topic)
    answer the clock as a pass over all owners did, through registrations, beats, a loss, a
    job's slots and their timeouts, and a driver rebuilt without its indexes (a snapshot's)."""
    cluster = Beating()
    driver = cluster.driver
    looks = [0, 1_000, 20_000, 50_000, 60_000, 10**12]

    def agree(d: ReducerDriver) -> None:
        for now in looks:
            for role in TopicRole.JOB, TopicRole.TASK_EXECUTOR, TopicRole.RESOURCE_MANAGER:
                assert d.due_timers(role, now) == _passed_over(d, role, now), (role, now)

    agree(driver)
    cluster.silent_run(batched=True)
    agree(driver)
    [free] = [rid for rid, te in driver.resource_manager.task_executors.items() if te.free]
    cluster.run([cluster.clock(  # a slot nobody takes: its TaskExecutor's timer runs
        SlotAllocationRequested, resource_id=free, slot_index=0, allocation_id="a-x",
        job_id="job-x", resource_profile=UNKNOWN, resource_manager_id="resourcemanager",
        job_master_id="jm-x",
    )])  # fmt: skip
    looks.append(driver.task_executors[free].next_timer())
    assert driver.due_timers(TopicRole.TASK_EXECUTOR, looks[-1]) == [free]
    agree(driver)
    rebuilt = ReducerDriver(
        resource_manager=ResourceManager(
            driver.resource_manager.config, task_executors=driver.resource_manager.task_executors
        ),
        job_masters=driver.job_masters,
        task_executors=driver.task_executors,
    )
    agree(rebuilt)
    rm = driver.resource_manager
    for k in range(3_000):  # beats by the thousand: the heap is rebuilt, never unbounded
        alive = beats(*[(rid, None) for rid in rm.task_executors])
        rm.apply(cluster.clock(TaskManagerHeartbeatsReported, at=70_000 + k, runner_id="tm",
                               beats=alive))  # fmt: skip
    assert len(rm.beat_order) <= 2 * len(rm.task_executors) + 1024
    agree(driver)
