"""Numbers at their edges: an input dated far in the future is refused where
it enters, and what is admitted anyway never makes a deadline beyond an Avro long.

One line through `jobledger produce`, a `SlotRequested` at 2^63 - 1, used to crash-loop the
services: the TaskExecutor's slot timeout overflowed the long and the partition's snapshot
raised at every restart."""

from __future__ import annotations

import pytest

from jobledger.projections.log.replay import verify
from jobledger.schemas import EventSerde
from jobledger.schemas.cluster import TaskManagerRegistered
from jobledger.schemas.deadletters import DeadLettered
from jobledger.schemas.slots import NewAllocatedSlotRequested, SlotAllocated, SlotRequested
from jobledger.schemas.tasks import TaskExecutionStateChanged
from jobledger.schemas.types import ExecutionState
from jobledger.services.client.dispatcher import now_ms
from jobledger.services.client.produce import RejectedLine, check_data
from jobledger.services.control.driver import ReducerDriver
from jobledger.services.control.event_time import (
    LONG_MAX,
    LONG_MIN,
    MAX_AHEAD_MS,
    ahead_refusal,
    between,
    later,
)
from jobledger.services.host.snapshot import Snapshot, decode, encode

from ..support.events import ANY, Clock
from ..support.jobs import JM, JOB, JobCluster, fixed_delay, vertex
from ..support.runtime_harness import RuntimeThread, append, wait_until_decided

TOP = LONG_MAX


def test_a_deadline_saturates_at_the_ends_of_an_avro_long():
    assert later(1_000, 300_000) == 301_000
    assert later(TOP, 1) == TOP and later(TOP - 5, 300_000) == TOP
    assert later(LONG_MIN, -1) == LONG_MIN and later(-5, LONG_MIN) == LONG_MIN
    assert later(TOP, LONG_MIN) == -1, "a sum within the range is exact"


def test_a_remaining_timeout_saturates_likewise():
    assert between(1_000, 301_000) == 300_000
    assert between(LONG_MIN, TOP) == TOP
    assert between(TOP, LONG_MIN) == LONG_MIN


def test_only_an_event_time_further_ahead_than_the_bound_is_refused():
    assert ahead_refusal(1_000 + MAX_AHEAD_MS, 1_000, MAX_AHEAD_MS) is None
    assert ahead_refusal(1_001 + MAX_AHEAD_MS, 1_000, MAX_AHEAD_MS) == (
        f"event_time {1_001 + MAX_AHEAD_MS} is {MAX_AHEAD_MS + 1} ms ahead of 1000, "
        f"more than the {MAX_AHEAD_MS} ms an event may be"
    )
    assert ahead_refusal(LONG_MIN, TOP, MAX_AHEAD_MS) is None, "the past is never refused"
    assert ahead_refusal(TOP, LONG_MIN, 0) is None, "0: no bound"


def _round_trip(driver: ReducerDriver) -> None:
    assert decode(encode(Snapshot(driver, 0))).driver.to_dict() == driver.to_dict()


def test_a_slot_allocated_at_the_top_of_time_times_out_at_the_top_and_snapshots():
    """What the services hit: admitted with no bound (a log written before it), the
    TaskExecutor's slot timeout used to be 2^63 - 1 + 10 s, which no snapshot could encode."""
    clock, driver = Clock(), ReducerDriver()
    driver.run([
        clock(TaskManagerRegistered, resource_id="tm-0", address="a", number_of_slots=1,
              resource_profile=ANY),
        clock(SlotRequested, at=TOP, job_id="job-x", job_master_id="jm", slot_request_id="r",
              allocation_id="a1", resource_profile=ANY, timeout_ms=300_000),
    ])  # fmt: skip
    [slot] = driver.task_executors["tm-0"].table.slots.values()
    assert slot.timeout_at == TOP
    _round_trip(driver)


def test_a_slot_request_and_a_restart_at_the_top_of_time_keep_their_deadlines_in_range():
    """A pool's request timeout and a restart's delay, both of any long a request or a
    JobGraph may carry, from an event time at the top: saturated, and the state snapshots."""
    cluster = JobCluster(task_executors=1, slots=2)
    cluster.submit([vertex("v", 2)], restart=fixed_delay(3, TOP))
    request = cluster.clock(NewAllocatedSlotRequested, at=TOP - 1, job_id=JOB,
                            slot_request_id="foreign", timeout_ms=TOP)  # fmt: skip
    [sent] = [e for e in cluster.run([request]) if isinstance(e, SlotRequested)]
    assert cluster.jm.pool.pending_requests["foreign"].deadline == TOP and sent.timeout_ms == 1
    failed = cluster.clock(
        TaskExecutionStateChanged, at=TOP - 2, job_id=JOB, job_master_id=JM,
        execution_attempt_id=cluster.deployments()[0].execution_attempt_id,
        execution_state=ExecutionState.FAILED, error="boom",
    )  # fmt: skip
    cluster.run([failed])
    assert [r.at for r in cluster.jm.scheduler.pending_restarts] == [TOP]
    _round_trip(cluster.driver)


def test_produce_refuses_an_event_dated_far_ahead_with_one_line():
    fields = {"type": "SlotRequested", "event_time": TOP, "job_id": "job-x",
              "job_master_id": "jm", "slot_request_id": "r", "allocation_id": "a1",
              "resource_profile": {"kind": "ANY"}, "timeout_ms": 300_000}  # fmt: skip
    checked = check_data(1, fields, "cli", EventSerde(), "p.")
    assert isinstance(checked, RejectedLine) and "\n" not in checked.reason
    assert (
        checked.reason.startswith(f"event_time {TOP} is ")
        and "ms an event may be" in checked.reason
    )


@pytest.mark.broker
def test_a_slot_request_at_the_top_of_time_is_dead_lettered_and_the_partitions_go_on(cluster):
    """Through the real services on the broker, snapshotting after every input (the old code
    raised in the TaskExecutor partition's first snapshot and never served the next request)."""
    clock = Clock(start=now_ms())
    registered = clock(TaskManagerRegistered, resource_id="tm-0", address="a",
                       number_of_slots=2, resource_profile=ANY)  # fmt: skip
    hostile, honest = (
        clock(SlotRequested, at=at, job_id="job-x", job_master_id="jm", slot_request_id=r,
              allocation_id=f"alloc-{r}", resource_profile=ANY, timeout_ms=300_000)
        for r, at in (("hostile", TOP), ("honest", clock.now + 1))
    )  # fmt: skip
    with RuntimeThread(cluster, snapshot_every=1) as runtime:
        append(cluster, [registered])
        append(cluster, [hostile])
        append(cluster, [honest])
        records = wait_until_decided(cluster)
        assert runtime.failure is None, runtime.failure
    dead = [r.event for r in records if isinstance(r.event, DeadLettered)]
    assert [d.reason for d in dead] == [ahead_refusal(TOP, dead[0].event_time, MAX_AHEAD_MS)]
    assert EventSerde().decode(dead[0].original_value, dead[0].source_topic) == hostile
    allocated = [r.event.allocation_id for r in records if isinstance(r.event, SlotAllocated)]
    assert allocated == ["alloc-honest"]
    _, divergence = verify(records)
    assert divergence is None, divergence.describe()
