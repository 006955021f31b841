"""4 TaskExecutors x 4 slots, 3 jobs asking for 20 slots between them: everyone ends up with
the right slots; a finished job's slots serve the waiting requests; a lost TaskExecutor's
slots are re-requested and served elsewhere. In process, and over the real broker."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable

import pytest

from jobledger.schemas import Event
from jobledger.services.control.driver import ReducerDriver
from jobledger.services.control.resource_manager import SlotState

from ..support import scenario
from ..support.broker_pump import BrokerPump
from ..support.events import Clock


def held(driver: ReducerDriver) -> dict[str, Counter]:
    """Slots each job's pool holds, per TaskExecutor."""
    return {
        job: Counter(s.resource_id for s in pool.allocated_slots.values())
        for job, pool in driver.pools.items()
    }


def assert_phase_one(driver: ReducerDriver) -> None:
    """16 of the 20 requests hold slots, the other 4 wait at the ResourceManager. Which job
    waits depends on how the jobs' requests interleave on the way to the ResourceManager."""
    counts = {job: sum(c.values()) for job, c in held(driver).items()}
    assert sum(counts.values()) == 16
    assert all(counts[job] <= demand for job, demand in scenario.DEMAND.items())
    waiting = Counter(r.job_id for r in driver.resource_manager.waiting())
    assert {job: counts[job] + waiting[job] for job in scenario.DEMAND} == scenario.DEMAND
    assert driver.resource_manager.free_slots() == 0


def assert_consistent(driver: ReducerDriver) -> None:
    """The pools, the ResourceManager and the slot tables agree on every allocation."""
    rm_view = {
        s.allocation_id: (s.job_id, rid)
        for rid, te in driver.resource_manager.task_executors.items()
        for s in te.slots
        if s.state is SlotState.ALLOCATED
    }
    pool_view = {
        s.allocation_id: (job, s.resource_id)
        for job, pool in driver.pools.items()
        for s in pool.allocated_slots.values()
    }
    assert pool_view == rm_view
    for rid, te in driver.task_executors.items():
        if rid in driver.resource_manager.task_executors:
            table_view = {a: (s.job_id, rid) for a, s in te.table.slots.items()}
            assert table_view == {a: v for a, v in rm_view.items() if v[1] == rid}
            assert all(s.state.value == "ACTIVE" for s in te.table.slots.values())


def assert_final(driver: ReducerDriver) -> None:
    final = held(driver)
    assert {job: sum(c.values()) for job, c in final.items()} == {
        "job-a": 0, "job-b": 6, "job-c": 6,
    }  # fmt: skip
    assert all("tm-4" not in c for c in final.values()), "a slot left on the lost TaskExecutor"
    assert "tm-4" not in driver.resource_manager.task_executors
    assert driver.resource_manager.waiting() == []
    assert_consistent(driver)


def run_scenario(
    run: Callable[[list[Event]], list[Event]], state: Callable[[], ReducerDriver]
) -> None:
    """The scenario's rounds through `run`, checking `state()` (the state they led to)."""
    clock = Clock()
    run(scenario.start_cluster(clock))
    assert_phase_one(state())
    assert_consistent(state())
    run(scenario.finish_job_a(clock))
    assert state().resource_manager.waiting() == []
    lost_log = run(scenario.lose_tm_4(clock))
    retries = scenario.re_request_failed(clock, lost_log)
    assert retries, "the lost TaskExecutor held slots of running jobs"
    run(retries)
    assert_final(state())


def test_slot_management_scenario_in_process():
    driver = ReducerDriver()
    run_scenario(driver.run, lambda: driver)
    states = {
        "resource_manager": driver.resource_manager.to_dict(),
        "pools": {job: pool.to_dict() for job, pool in driver.pools.items()},
        "task_executors": {rid: te.to_dict() for rid, te in driver.task_executors.items()},
    }
    assert json.loads(json.dumps(states)) == states, "state is plain data"


@pytest.mark.broker
def test_slot_management_scenario_over_the_real_broker(cluster):
    pump = BrokerPump(cluster.bootstrap, cluster.prefix, ReducerDriver)

    def run(inputs: list[Event]) -> list[Event]:
        start = len(pump.log)
        pump.append(inputs)
        pump.run_until_quiet()
        return pump.log[start:]

    try:
        run_scenario(run, lambda: pump.driver)
    finally:
        pump.close()
    read_back = Counter(e.event_id for e in pump.log)
    assert [i for i, n in read_back.items() if n > 1] == [], "an event was committed twice"
    assert {e.event_id for e in pump.written} <= set(read_back), "an input was lost"
