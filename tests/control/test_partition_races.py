"""No interleaving of partitions fails a healthy job (load issue, item 1).

The services read each partition on its own, so events that one reducer writes to two
partitions, or that travel there and back, can be read in any order relative to the others,
and the clock's TimerFired comes between them whenever the machine is slow. Under load a
TaskExecutor's slot timeout (`taskmanager.slot.timeout`, 10 s) fired before the JobMaster's
answer to its registration or to its offer arrived: the slot was freed, and the job failed
("Could not mark slot ... active", "no JobManager associated for the job") or waited for a
slot the ResourceManager had forgotten. Here the partitions are queues delivered in the bad
order on purpose, with no broker and no sleeping: the same reducers, the same routing.
"""

from __future__ import annotations

import random
from collections import defaultdict, deque
from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobledger.schemas import Event
from jobledger.schemas.cluster import (
    JobMasterRegistrationRequested,
    ResourceManagerConnected,
    TaskManagerRegistered,
)
from jobledger.schemas.jobs import JobMasterLeadershipGranted, JobSubmitted
from jobledger.schemas.rejections import EventRejected
from jobledger.schemas.slots import SlotOffered
from jobledger.schemas.tasks import TaskDeploymentRequested, TaskExecutionStateChanged
from jobledger.schemas.timers import TimerFired
from jobledger.schemas.topics import TopicRole
from jobledger.schemas.types import ExecutionState, OwnerKind, RestartStrategy, ScheduleMode
from jobledger.services.control.driver import ReducerDriver
from jobledger.services.control.task_executor import TaskExecutorConfig

from ..support.events import Clock, profile
from ..support.jobs import JM, JOB, vertex

SLOT_TIMEOUT_MS = 10_000
"""Flink's `taskmanager.slot.timeout`."""

Partition = tuple[TopicRole, str]
FAILURES = ("TaskSubmissionRejected", "AllocationFailed", "SlotRequestFailed", "SlotOfferRejected")
"""Decisions a healthy job never needs."""


class Partitions:
    """The cluster's reducers behind one FIFO queue per partition (the ResourceManager's
    topic is one partition); `step` delivers the head of the partition chosen, and what it
    derives joins the queues its routes name. Deployments are answered the way a runner
    does, its reports queued on the job's partition."""

    def __init__(self, task_executors: int, slots: int) -> None:
        self.clock = Clock()
        self.driver = ReducerDriver(task_executor_config=TaskExecutorConfig(SLOT_TIMEOUT_MS))
        self.queues: defaultdict[Partition, deque[Event]] = defaultdict(deque)
        self.log: list[Event] = []
        for i in range(task_executors):
            self.put(self.clock(
                TaskManagerRegistered, resource_id=f"tm-{i}", address="tm:1",
                number_of_slots=slots, resource_profile=profile(1.0, 1024),
            ))  # fmt: skip

    def submit(self, parallelism: int) -> None:
        """A two-vertex ALL_TO_ALL job, deployed at once (EAGER), with no restarts: any
        failure fails it."""
        vertices = [vertex("a", parallelism),
                    vertex("b", parallelism, ("a", "ALL_TO_ALL", "PIPELINED"))]  # fmt: skip
        for event in [
            self.clock(JobSubmitted, job_id=JOB, job_name="j", vertices=vertices,
                       schedule_mode=ScheduleMode.EAGER, restart_strategy=RestartStrategy()),
            self.clock(JobMasterLeadershipGranted, job_id=JOB, job_master_id=JM),
            self.clock(ResourceManagerConnected, job_id=JOB, resource_manager_id="resourcemanager"),
        ]:  # fmt: skip
            self.put(event)

    def put(self, event: Event) -> None:
        role, key = event.route()
        self.queues[(role, "" if role is TopicRole.RESOURCE_MANAGER else key)].append(event)

    def waiting(self) -> list[Partition]:
        return sorted(p for p, queue in self.queues.items() if queue)

    def step(self, partition: Partition) -> Event:
        event = self.queues[partition].popleft()
        self.log.append(event)
        for derived in self.driver.process(event):
            self.put(derived)
            if isinstance(derived, TaskDeploymentRequested):
                for state in (ExecutionState.INITIALIZING, ExecutionState.RUNNING,
                              ExecutionState.FINISHED):  # fmt: skip
                    self.put(self.clock(
                        TaskExecutionStateChanged, job_id=JOB, job_master_id=JM,
                        execution_attempt_id=derived.execution_attempt_id, execution_state=state,
                        resource_id=derived.resource_id,
                    ))  # fmt: skip
        return event

    def drain(self, hold: Callable[[Event], bool] = lambda _: False) -> None:
        """Deliver until every queue is empty or its head is held."""
        while ready := [p for p in self.waiting() if not hold(self.queues[p][0])]:
            self.step(ready[0])

    def tick_task_executors(self, at: int) -> None:
        """The clock's TimerFired for every TaskExecutor, delivered at once."""
        for rid in sorted(self.driver.task_executors):
            self.log.append(timer := self.clock(
                TimerFired, at=at, scope=OwnerKind.TASK_EXECUTOR, owner_id=rid))  # fmt: skip
            for derived in self.driver.process(timer):
                self.put(derived)

    def status(self) -> str:
        return self.driver.job_masters[JOB].status.value

    def failures(self) -> list[str]:
        return [
            f"{e.type_name()}: {getattr(e, 'reason', None) or getattr(e, 'cause', '')}"
            for e in self.log
            if e.type_name() in FAILURES
            or (e.type_name() == "SlotFreed" and "timed out" in e.cause)
        ]


def on_the_job_partition(kind: type[Event]) -> Callable[[Event], bool]:
    return lambda event: isinstance(event, kind)


def test_a_registration_answered_after_the_slot_timeout_still_deploys():
    """The JobMaster's partition lags: the TaskExecutor asked to register, and its slot
    timeout passes before the answer is read."""
    cluster = Partitions(task_executors=2, slots=2)
    cluster.submit(parallelism=2)
    cluster.drain(hold=on_the_job_partition(JobMasterRegistrationRequested))
    assert cluster.driver.job_masters[JOB].pool.registered_task_managers == {}

    cluster.tick_task_executors(at=cluster.clock.now + SLOT_TIMEOUT_MS + 1)
    cluster.drain()

    assert (cluster.status(), cluster.failures()) == ("FINISHED", [])


def test_an_offer_answered_after_the_slot_timeout_still_deploys():
    """The same for the offer: the TaskExecutor offered its slots, and the acceptance is
    read after the timeout passed."""
    cluster = Partitions(task_executors=2, slots=2)
    cluster.submit(parallelism=2)
    cluster.drain(hold=on_the_job_partition(SlotOffered))
    assert any(isinstance(e, SlotOffered) for q in cluster.queues.values() for e in q)

    cluster.tick_task_executors(at=cluster.clock.now + SLOT_TIMEOUT_MS + 1)
    cluster.drain()

    assert (cluster.status(), cluster.failures()) == ("FINISHED", [])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), ticks=st.integers(0, 6))
def test_no_interleaving_of_partitions_and_timeouts_fails_a_healthy_job(seed, ticks):
    """Any order of the partitions, with TaskExecutor timeouts passing at any moments in
    between: the job finishes, and nothing is refused on the way (a replay of the same log
    order decides the same, so this is every interleaving's outcome, not one run's)."""
    rng = random.Random(seed)
    cluster = Partitions(task_executors=3, slots=2)
    cluster.submit(parallelism=3)
    moments = set(rng.sample(range(200), ticks))
    for n in range(10_000):
        if n in moments:
            cluster.tick_task_executors(at=cluster.clock.now + SLOT_TIMEOUT_MS + 1)
        waiting = cluster.waiting()
        if not waiting:
            break
        cluster.step(rng.choice(waiting))
    rejected = [e.reason for e in cluster.log if isinstance(e, EventRejected)]
    assert (cluster.status(), cluster.failures(), rejected) == ("FINISHED", [], [])
