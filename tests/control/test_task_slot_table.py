"""TaskSlotTable, one test per rule of docs/reference/flink-rules.md (TST-*).

The table answers with values, not events: results, slots and slot reports are compared whole,
the way the reducer tests compare derived events."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobledger.schemas.types import ResourceProfile, ResourceProfileKind, SlotStatus
from jobledger.services.control.resource_profile import is_matching
from jobledger.services.control.task_slot_table import (
    AddTaskResult,
    FreeSlotResult,
    TaskSlot,
    TaskSlotState,
    TaskSlotTable,
)

DEFAULT = ResourceProfile(
    kind=ResourceProfileKind.SPECIFIED, cpu_cores=1.0, task_heap_memory_mb=100,
    managed_memory_mb=50,
)  # fmt: skip
UNKNOWN = ResourceProfile()


def spec(cpu: float, heap: int = 0, managed: int = 0) -> ResourceProfile:
    return ResourceProfile(
        kind=ResourceProfileKind.SPECIFIED, cpu_cores=cpu, task_heap_memory_mb=heap,
        managed_memory_mb=managed,
    )  # fmt: skip


def table(slots: int = 3) -> TaskSlotTable:
    return TaskSlotTable(slots, DEFAULT)


def test_tst_1_try_mark_slot_active_only_for_the_owning_job():
    t = table()
    assert t.allocate_slot(0, "job1", "a1", UNKNOWN, timeout_at=100)
    assert t.allocate_slot(1, "job2", "a2", UNKNOWN, timeout_at=100)
    assert t.try_mark_slot_active("job1", "a1")
    assert t.try_mark_slot_active("job1", "a1"), "already active is still true"
    assert not t.try_mark_slot_active("job1", "a2"), "another job's allocation"
    assert not t.try_mark_slot_active("job1", "unknown")
    assert t.active_allocation_ids("job1") == {"a1"}
    assert t.slots["a2"].state is TaskSlotState.ALLOCATED


def test_tst_2_active_allocations_across_all_jobs():
    t = table()
    for index, (job, alloc) in enumerate([("j1", "a1"), ("j2", "a2"), ("j2", "a3")]):
        t.allocate_slot(index, job, alloc, UNKNOWN, None)
    t.try_mark_slot_active("j1", "a1")
    t.try_mark_slot_active("j2", "a3")
    assert t.active_allocation_ids() == {"a1", "a3"}


def test_tst_3_same_allocation_id_for_a_different_index_is_refused():
    t = table()
    assert t.allocate_slot(0, "job", "a", UNKNOWN, None)
    assert not t.allocate_slot(1, "job", "a", UNKNOWN, None)
    assert t.is_slot_free(1)
    assert [s.index for s in t.allocated_slots("job")] == [0]


def test_tst_4_exact_duplicate_allocation_is_refused_by_the_table():
    t = table()
    assert t.allocate_slot(2, "job", "a", UNKNOWN, None)
    assert not t.allocate_slot(2, "job", "a", UNKNOWN, None)
    assert not t.allocate_slot(2, "job", "b", UNKNOWN, None), "occupied index"
    assert t.is_allocated(2, "job", "a")


def test_tst_5_free_slot_returns_its_index_and_unknown_is_none():
    t = table()
    t.allocate_slot(1, "job", "a", UNKNOWN, None)
    assert t.free_slot("a") == FreeSlotResult(1, freed=True)
    assert t.is_slot_free(1) and not t.is_allocated(1, "job", "a")
    assert t.free_slot("a") is None


def test_tst_6_dynamic_slot_reports_negative_index():
    t = table(2)
    assert t.allocate_slot(-1, "job", "dyn", spec(0.5, 10), None)
    assert t.is_allocated(-1, "job", "dyn")
    assert t.slot_report()[-1] == SlotStatus(
        slot_index=-1, resource_profile=spec(0.5, 10), allocation_id="dyn", job_id="job"
    )
    assert t.free_slot("dyn") == FreeSlotResult(-1, freed=True)


def test_tst_7_static_slots_take_the_default_profile_dynamic_ones_keep_theirs():
    t = table(2)
    assert t.allocate_slot(0, "job", "s", spec(9.0, 900), None)
    assert t.slots["s"].resource_profile == DEFAULT
    assert t.allocate_slot(-1, "job", "d", spec(0.5, 20), None)
    assert t.slots["d"].resource_profile == spec(0.5, 20)
    assert not t.allocate_slot(-1, "job", "too-big", spec(3.0, 300, 150), None)
    assert "too-big" not in t.slots


def test_tst_8_report_has_every_static_index_then_dynamic_slots():
    t = table(3)
    t.allocate_slot(0, "job", "s0", UNKNOWN, None)
    t.allocate_slot(-1, "job", "d1", spec(0.1), None)
    t.allocate_slot(-1, "job", "d2", spec(0.1), None)
    t.free_slot("d1")
    assert t.slot_report() == [
        SlotStatus(slot_index=0, resource_profile=DEFAULT, allocation_id="s0", job_id="job"),
        SlotStatus(slot_index=1, resource_profile=DEFAULT),
        SlotStatus(slot_index=2, resource_profile=DEFAULT),
        SlotStatus(slot_index=-1, resource_profile=spec(0.1), allocation_id="d2", job_id="job"),
    ]


def test_tst_9_freeing_a_slot_with_a_task_releases_it_after_the_task():
    t = table()
    t.allocate_slot(0, "job", "a", UNKNOWN, None)
    t.try_mark_slot_active("job", "a")
    assert t.add_task("job", "a", "att-1") is AddTaskResult.ADDED
    assert t.free_slot("a") == FreeSlotResult(0, freed=False, tasks_to_fail=("att-1",))
    assert t.slots["a"].state is TaskSlotState.RELEASING
    assert t.remove_task("att-1") == TaskSlot(0, "a", "job", DEFAULT, TaskSlotState.RELEASING)
    assert t.is_slot_free(0)


def test_tst_11_allocated_slots_time_out_and_activation_cancels_the_timeout():
    t = table()
    t.allocate_slot(0, "job", "a", UNKNOWN, timeout_at=1_000)
    t.allocate_slot(1, "job", "b", UNKNOWN, timeout_at=1_000)
    assert t.timed_out(999) == []
    t.try_mark_slot_active("job", "b")
    assert t.timed_out(1_000) == ["a"]
    t.mark_slot_inactive("b", timeout_at=5_000)
    assert t.timed_out(4_999) == ["a"] and t.timed_out(5_000) == ["a", "b"]


def test_tst_12_add_task_checks_allocation_activity_and_duplicates():
    t = table()
    assert t.add_task("job", "nope", "att") is AddTaskResult.UNKNOWN_ALLOCATION
    t.allocate_slot(0, "job", "a", UNKNOWN, None)
    assert t.add_task("job", "a", "att") is AddTaskResult.SLOT_NOT_ACTIVE
    t.try_mark_slot_active("job", "a")
    assert t.add_task("other-job", "a", "att") is AddTaskResult.SLOT_NOT_ACTIVE
    assert t.add_task("job", "a", "att") is AddTaskResult.ADDED
    assert t.add_task("job", "a", "att") is AddTaskResult.DUPLICATE_ATTEMPT
    assert t.slot_of_task("att") == TaskSlot(0, "a", "job", DEFAULT, TaskSlotState.ACTIVE, ["att"])
    assert t.slots["a"].tasks == ["att"]


def test_tst_13_index_past_the_table_is_a_precondition_failure():
    with pytest.raises(ValueError, match="slot index 3 >= number of slots 3"):
        table(3).allocate_slot(3, "job", "a", UNKNOWN, None)


def test_sp_37_profile_matching():
    any_slot = ResourceProfile(kind=ResourceProfileKind.ANY)
    assert is_matching(any_slot, spec(100.0))
    assert is_matching(spec(1.0, 10), spec(1.0, 10))
    assert not is_matching(UNKNOWN, spec(1.0))
    assert is_matching(spec(1.0), UNKNOWN)
    assert is_matching(spec(2.0, 20, 5), spec(1.0, 20, 5))
    assert not is_matching(spec(2.0, 10), spec(1.0, 20))


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["alloc", "free", "activate", "add", "remove"]),
            st.integers(-1, 3),
            st.sampled_from(["j1", "j2"]),
            st.sampled_from(["a1", "a2", "a3", "a4"]),
            st.sampled_from(["t1", "t2", "t3"]),
        ),
        max_size=40,
    )
)
def test_invariants_hold_under_any_sequence(ops):
    t = table(4)
    for op, index, job, alloc, attempt in ops:
        if op == "alloc":
            t.allocate_slot(index, job, alloc, spec(0.5, 10), None)
        elif op == "free":
            t.free_slot(alloc)
        elif op == "activate":
            t.try_mark_slot_active(job, alloc)
        elif op == "add":
            t.add_task(job, alloc, attempt)
        else:
            t.remove_task(attempt)
        static = [s.index for s in t.slots.values() if s.index >= 0]
        assert len(static) == len(set(static)), "a static index held twice"
        assert all(s.allocation_id == a for a, s in t.slots.items())
        tasks = [task for s in t.slots.values() for task in s.tasks]
        assert len(tasks) == len(set(tasks)), "a task in two slots"
        assert all(s.state is TaskSlotState.ACTIVE or s.state is TaskSlotState.RELEASING
                   for s in t.slots.values() if s.tasks)  # fmt: skip
        remaining = t.remaining_budget()
        assert remaining.cpu_cores >= -1e-9 and remaining.task_heap_memory_mb >= 0
