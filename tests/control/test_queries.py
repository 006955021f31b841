"""The query surface (services/control/queries.py): each reducer's `@query` methods answer
what its state holds, in frozen records a read model keeps. Checked on the golden logs'
replayed states, against the fields the read models used to read."""

from __future__ import annotations

import dataclasses

import pytest

from jobledger.projections.log.log_file import read_export
from jobledger.projections.log.replay import replay
from jobledger.services.control.driver import ReducerDriver

from ..support.golden_logs import LOGS


def _replayed(name: str, upto: int | None = None) -> ReducerDriver:
    return replay(list(read_export(LOGS / f"{name}.avro"))[:upto]).driver


STATES = {
    "slot-shortage": lambda: _replayed("slot-shortage"),
    "slot-shortage before the offers": lambda: _replayed("slot-shortage", 12),
    "wordcount-fail-once": lambda: _replayed("wordcount-fail-once"),
}


@pytest.fixture(params=sorted(STATES), scope="module")
def driver(request) -> ReducerDriver:
    return STATES[request.param]()


def test_the_pool_answers_every_slot_it_holds_and_every_request_it_waits_on(driver):
    for jm in driver.job_masters.values():
        pool = jm.pool
        slots = pool.slots()
        assert {s.allocation_id: s.slot_request_id for s in slots} == {
            **{s.allocation_id: r for r, s in pool.allocated_slots.items()},
            **{a: None for a in pool.available_slots},
        }
        assert [s.available_since for s in slots if s.slot_request_id is None] == [
            since for _, since in pool.available_slots.values()
        ]
        assert [
            (r.slot_request_id, r.at_resource_manager) for r in pool.pending_slot_requests()
        ] == [
            *((r, False) for r in pool.waiting_for_resource_manager),
            *((r, True) for r in pool.pending_requests),
        ]
        assert pool.is_connected_to_resource_manager() == (pool.resource_manager_id is not None)


def test_the_resource_manager_answers_its_task_managers_and_open_requests(driver):
    rm = driver.resource_manager
    managers = rm.task_managers()
    assert list(managers) == list(rm.task_executors)
    for rid, te in rm.task_executors.items():
        assert rm.task_manager(rid) == managers[rid]
        assert [(s.state, s.allocation_id, s.job_id) for s in managers[rid].slots] == [
            (s.state, s.allocation_id, s.job_id) for s in te.slots
        ]
        assert (managers[rid].address, managers[rid].last_heartbeat) == (
            te.address, te.last_heartbeat,
        )  # fmt: skip
    assert rm.task_manager("no-such-task-manager") is None
    for allocation_id, request in rm.requests.items():
        assert rm.slot_request(allocation_id).assigned == request.assigned
    assert [rm.requests_queued_before(r.allocation_id) for r in rm.waiting()] == list(
        range(len(rm.waiting()))
    )


def test_a_task_executor_answers_its_own_slot_table(driver):
    for te in driver.task_executors.values():
        slots = te.table.slots.values() if te.table is not None else []
        assert [(s.index, s.allocation_id, s.state, s.tasks) for s in te.task_slots()] == [
            (s.index, s.allocation_id, s.state, len(s.tasks)) for s in slots
        ]
        assert te.number_of_slots() == (te.table.number_of_slots if te.table else 0)


def test_the_job_master_answers_its_leader_status_and_restarts(driver):
    for jm in driver.job_masters.values():
        info = jm.info()
        assert (info.job_id, info.status, info.job_master_id, info.restarts) == (
            jm.job_id, jm.status, jm.job_master_id, jm.restarts,
        )  # fmt: skip
        assert info.restart_at == jm.scheduler.restart_at


def test_the_states_exercise_every_query():
    """Slots held, requests sent to the ResourceManager, slot tables, failures counted: the
    golden states above have each, so the comparisons are not over empty lists."""
    shortage = _replayed("slot-shortage")
    pool = shortage.job_masters["job-1"].pool
    assert any(s.slot_request_id is not None for s in pool.slots())
    assert {r.at_resource_manager for r in pool.pending_slot_requests()} == {True}
    assert any(te.task_slots() for te in shortage.task_executors.values())
    assert shortage.resource_manager.task_managers()
    (failed_once,) = _replayed("wordcount-fail-once").job_masters.values()
    assert failed_once.info().failures_counted == failed_once.restarts > 0


def test_an_answer_is_a_frozen_copy():
    driver = _replayed("slot-shortage")
    record = driver.resource_manager.task_managers()
    first = next(iter(record.values()))
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.address = "elsewhere"  # type: ignore[misc]
    assert isinstance(first.slots, tuple)
