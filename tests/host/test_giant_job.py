"""A giant job does not stall the others, and is derived exactly once across a kill -9,
through `jobledger services run` on the real broker.

The giant is scaled down (2 x 300 subtasks) and so is its window of slot requests at the
ResourceManager (`jobledger.slot-pool.max-pending-requests`, 10 here, 100 by default), so
that its derivation spans dozens of transactions on every partition it touches, as a
10,000 x 10,000 job's does at the default (bench/stall.py runs that one). No TaskExecutor
process runs: TaskExecutors are registered by their TaskManagerRegistered records, slots are
allocated, offered and deployed by the services alone, and the test reports the small job's
tasks itself, as a runner would."""

from __future__ import annotations

import signal
import time
import uuid

import pytest

from jobledger.projections.log.log_file import LogRecord, processed_by_services
from jobledger.projections.log.replay import verify
from jobledger.schemas import Event
from jobledger.schemas.cluster import TaskManagerRegistered
from jobledger.schemas.jobs import JobStatusChanged, JobSubmitted
from jobledger.schemas.slots import SlotRequested
from jobledger.schemas.tasks import TaskDeploymentRequested
from jobledger.schemas.types import (
    DistributionPattern,
    ExecutionState,
    JobEdge,
    JobStatus,
    JobVertex,
    ResourceProfile,
    ResourceProfileKind,
    ResultPartitionType,
    ScheduleMode,
)
from jobledger.services.client.dispatcher import now_ms, submission
from jobledger.services.configuration import Configuration
from jobledger.services.runner import task

from ..support.processes import kill_tree
from ..support.runtime_harness import append, duplicates, read, service_process, wait_until_owning

pytestmark = pytest.mark.broker

OPTIONS = [
    "jobledger.slot-pool.max-pending-requests=10",
    "jobledger.scheduler.max-pending-deployments=0",
]
"""No task of the giant reports, so its deployments are not windowed: these tests are of its
slot requests (tests/control/test_deployment_window.py holds the deployment window)."""
GIANT_P = 300


def wide(job_id: str, parallelism: int) -> JobSubmitted:
    """Two no-op vertices of `parallelism` subtasks, ALL_TO_ALL, PIPELINED, EAGER."""
    source = JobVertex(vertex_id="source", name="source", invokable_class_name="noop",
                       parallelism=parallelism)  # fmt: skip
    sink = JobVertex(
        vertex_id="sink", name="sink", invokable_class_name="noop", parallelism=parallelism,
        inputs=[JobEdge(source_vertex_id="source", result_partition_type=ResultPartitionType.
                        PIPELINED, distribution_pattern=DistributionPattern.ALL_TO_ALL)],
    )  # fmt: skip
    return JobSubmitted(event_id=uuid.uuid4().hex, event_time=now_ms(), producer="test",
                        job_id=job_id, job_name=job_id, vertices=[source, sink],
                        schedule_mode=ScheduleMode.EAGER)  # fmt: skip


def task_executors(count: int) -> list[Event]:
    profile = ResourceProfile(kind=ResourceProfileKind.SPECIFIED, cpu_cores=1.0,
                              task_heap_memory_mb=1024)  # fmt: skip
    return [TaskManagerRegistered(
        event_id=uuid.uuid4().hex, event_time=now_ms(), producer="test", resource_id=f"tm-{i}",
        address=f"tm-{i}:6122", number_of_slots=4, resource_profile=profile,
        instance_id=f"instance-{i}",
    ) for i in range(count)]  # fmt: skip


def of(records: list[LogRecord], cls: type, job_id: str) -> list[LogRecord]:
    return [r for r in records if isinstance(r.event, cls) and r.event.job_id == job_id]


def until_found(cluster, found, what: str, limit_s: float = 90.0):
    """The first truthy `found(records)`, reading the log every 0.1 s."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        hit = found(read(cluster))
        if hit:
            return hit
        time.sleep(0.1)
    raise AssertionError(f"{what} did not happen within {limit_s:.0f} s")


def test_a_small_job_finishes_while_a_giant_one_is_still_being_derived(cluster, tmp_path):
    """The small job, submitted once the giant's first slot requests are on the log, is
    FINISHED before the giant's last deployment: its requests waited behind the giant's
    window, not behind all 600 of its requests (before the window, the small job's hops
    each came after every one of the giant's)."""
    services = service_process(cluster, str(tmp_path), *[a for o in OPTIONS for a in ("-D", o)])
    try:
        wait_until_owning(services)
        append(cluster, task_executors(-(-(2 * GIANT_P + 2) // 4)))
        giant, small = wide("giant", GIANT_P), wide("small", 1)
        append(cluster, submission(giant, "test"))
        until_found(cluster, lambda rs: of(rs, SlotRequested, "giant"), "the giant's requests")
        append(cluster, submission(small, "test"))
        deployments = until_found(
            cluster,
            lambda rs: len(d := of(rs, TaskDeploymentRequested, "small")) == 2 and d,
            "the small deployments",
        )
        append(
            cluster,
            [
                report(d.event, state)
                for d in deployments
                for state in (
                    ExecutionState.INITIALIZING,
                    ExecutionState.RUNNING,
                    ExecutionState.FINISHED,
                )
            ],
        )
        records = until_found(
            cluster,
            lambda rs: len(of(rs, TaskDeploymentRequested, "giant")) == 2 * GIANT_P and rs,
            "the giant deployed",
        )
    finally:
        services.send_signal(signal.SIGTERM)
        services.wait(30)
    ends = [r for r in of(records, JobStatusChanged, "small")
            if r.event.to_status is JobStatus.FINISHED]  # fmt: skip
    assert ends, "the small job did not finish"
    last_giant_deployment = max(r.timestamp for r in of(records, TaskDeploymentRequested, "giant"))
    assert ends[0].timestamp < last_giant_deployment


def report(deployment: TaskDeploymentRequested, state: ExecutionState) -> Event:
    return task.state_event(deployment, state)


def test_kill_9_in_the_middle_of_a_giant_job_s_derivation_loses_and_duplicates_nothing(
    cluster, tmp_path
):
    """Killed once the giant's first slot requests are on the log (fewer than all of them:
    its derivation is under way), the services' next instance derives the rest: every
    subtask deployed once, no decision on the log twice, and replay derives every one."""
    options = [a for o in OPTIONS for a in ("-D", o)]
    victim = service_process(cluster, str(tmp_path), *options)
    wait_until_owning(victim)
    append(cluster, task_executors(-(-2 * GIANT_P // 4)))
    giant = wide("giant", GIANT_P)
    append(cluster, submission(giant, "test"))
    seen = until_found(cluster, lambda rs: of(rs, SlotRequested, "giant"), "the giant's requests")
    kill_tree(victim.pid)
    victim.wait(10)
    assert len(seen) < 2 * GIANT_P, "the derivation was over before the kill"
    survivor = service_process(cluster, str(tmp_path), *options)
    try:
        wait_until_owning(survivor)
        records = until_found(
            cluster,
            lambda rs: len(of(rs, TaskDeploymentRequested, "giant")) >= 2 * GIANT_P and rs,
            "the giant deployed",
        )
        time.sleep(1)  # anything the kill could have doubled would come with the rest
        records = read(cluster)
    finally:
        survivor.send_signal(signal.SIGTERM)
        survivor.wait(30)
    deployed = [r.event.execution_attempt_id for r in of(records, TaskDeploymentRequested, "giant")]
    assert len(deployed) == len(set(deployed)) == 2 * GIANT_P
    requested = [r.event.slot_request_id for r in of(records, SlotRequested, "giant")]
    assert len(requested) == len(set(requested)) == 2 * GIANT_P
    assert duplicates(records) == [], "a decision was visible twice"
    _, divergence = verify(
        records, Configuration.parse(OPTIONS).new_driver,
        processed=processed_by_services(cluster.bootstrap, cluster.prefix),
    )  # fmt: skip
    assert divergence is None, divergence.describe()
