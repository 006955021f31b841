"""The runner's TaskExecutor instances (services/runner/instances.py): a new InstanceID per
registration, live only once that instance is accepted, another process under the same id
stops this runner, and a close of an earlier instance is old news."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from jobledger.schemas.cluster import TaskManagerConnectionClosed, TaskManagerRegistrationAccepted
from jobledger.services.runner.instances import TaskExecutorInstances

from ..support.events import Clock, profile


def _accepted(clock: Clock, rid: str, instance: str) -> TaskManagerRegistrationAccepted:
    return clock(TaskManagerRegistrationAccepted, resource_id=rid, instance_id=instance,
                 resource_manager_id="rm", number_of_slots=2,
                 resource_profile=profile(1.0, 1024))  # fmt: skip


def test_each_registration_is_a_new_instance_live_only_once_accepted():
    clock, executors = Clock(), TaskExecutorInstances("r", 2, slots=2, producer="runner")
    first = executors.register(None, 10)
    assert [(e.resource_id, e.number_of_slots, e.event_time) for e in first] == [
        ("r-0", 2, 10), ("r-1", 2, 10),
    ]  # fmt: skip
    assert not executors.is_live("r-0")
    assert executors.accepted(_accepted(clock, "r-0", first[0].instance_id)) is None
    assert (executors.is_live("r-0"), executors.all_live()) == (True, False)

    [again] = executors.register(["r-0"], 20)
    assert again.instance_id != first[0].instance_id
    assert not executors.is_live("r-0")
    assert executors.current() == {"r-0": again.instance_id, "r-1": first[1].instance_id}


def test_another_process_under_the_same_id_stops_this_runner_but_an_earlier_instance_does_not():
    clock, executors = Clock(), TaskExecutorInstances("r", 1, slots=1, producer="runner")
    [old] = executors.register(None, 1)
    [new] = executors.register(None, 2)
    assert executors.accepted(_accepted(clock, "r-0", new.instance_id)) is None
    assert executors.accepted(_accepted(clock, "r-0", old.instance_id)) is None
    said = executors.accepted(_accepted(clock, "r-0", "someone-elses"))
    assert said == (
        "another process registered TaskExecutor r-0 (instance someone-elses); stopping this "
        f"runner (instance {new.instance_id}): give each runner its own --runner-id"
    )


def test_a_close_of_an_earlier_instance_is_old_news_and_of_the_current_one_ends_its_life():
    clock, executors = Clock(), TaskExecutorInstances("r", 1, slots=1, producer="runner")
    [old] = executors.register(None, 1)
    [new] = executors.register(None, 2)
    executors.accepted(_accepted(clock, "r-0", new.instance_id))

    def closed(instance: str) -> TaskManagerConnectionClosed:
        return clock(TaskManagerConnectionClosed, resource_id="r-0", instance_id=instance,
                     resource_manager_id="rm", cause="heartbeat timed out")  # fmt: skip

    assert executors.closed(closed(old.instance_id)) is False
    assert executors.is_live("r-0")
    assert executors.closed(closed(new.instance_id)) is True
    assert not executors.is_live("r-0")


def test_heartbeats_name_the_current_instances():
    executors = TaskExecutorInstances("r", 2, slots=1, producer="runner")
    registered = {e.resource_id: e.instance_id for e in executors.register(None, 1)}
    [beats] = executors.heartbeats(50)
    assert (beats.runner_id, beats.event_time, beats.producer) == ("r", 50, "runner")
    assert {(b.resource_id, b.instance_id) for b in beats.beats} == set(registered.items())


def test_registrations_of_one_task_executor_are_dated_each_after_the_last():
    """The ResourceManager orders a TaskExecutor's instances by their registrations' event
    times, so a clock that stood still (or stepped back) still dates a new one later."""
    executors = TaskExecutorInstances("r", 1, slots=1, producer="runner")
    times = [executors.register(None, now)[0].event_time for now in (100, 100, 90, 200)]
    assert times == [100, 101, 102, 200]


def test_an_instance_replaced_by_another_process_s_stops_the_runner_not_one_replaced_by_its_own():
    """docs/operations/faults.md: two live runners with one --runner-id take the TaskExecutor
    from each other;
    "the one whose instance is replaced stops with exit code 1 and says so"."""
    clock, executors = Clock(), TaskExecutorInstances("r", 1, slots=1, producer="runner")
    [old] = executors.register(None, 1)
    [new] = executors.register(None, 2)
    executors.accepted(_accepted(clock, "r-0", new.instance_id))

    def closed(instance: str, successor: str | None) -> TaskManagerConnectionClosed:
        return clock(TaskManagerConnectionClosed, resource_id="r-0", instance_id=instance,
                     resource_manager_id="rm", cause="re-connected",
                     replaced_by_instance_id=successor)  # fmt: skip

    assert executors.replaced(closed(old.instance_id, new.instance_id)) is None  # our own
    assert executors.replaced(closed(new.instance_id, None)) is None  # lost: registers again
    assert executors.is_live("r-0")
    said = executors.replaced(closed(new.instance_id, "someone-elses"))
    assert said == (
        "another process registered TaskExecutor r-0 (instance someone-elses), replacing this "
        f"runner's instance {new.instance_id}; stopping this runner: give each runner its own "
        "--runner-id"
    )
    assert not executors.is_live("r-0")


def test_the_runner_stops_when_another_process_replaced_its_instance_registers_when_lost():
    """`Registration.on_connection_closed`: a replacement by another process is `fail` (the
    command exits 1 with the reason), a loss is a new registration."""
    from jobledger.services.runner.registration import Registration

    clock, executors = Clock(), TaskExecutorInstances("r", 1, slots=1, producer="runner")
    [mine] = executors.register(None, 1)
    executors.accepted(_accepted(clock, "r-0", mine.instance_id))
    failed: list[str] = []
    started_over: list[list[str]] = []
    runner = SimpleNamespace(task_executors=executors, fail=failed.append,
                             start_over=started_over.append,
                             stopping=threading.Event())  # fmt: skip

    def closed(successor: str | None) -> TaskManagerConnectionClosed:
        return clock(TaskManagerConnectionClosed, resource_id="r-0", instance_id=mine.instance_id,
                     resource_manager_id="rm", cause="c",
                     replaced_by_instance_id=successor)  # fmt: skip

    Registration.on_connection_closed(runner, closed("theirs"))
    assert (len(failed), started_over) == (1, [])
    assert failed[0].startswith("another process registered TaskExecutor r-0 (instance theirs)")
    Registration.on_connection_closed(runner, closed(None))
    assert started_over == [["r-0"]]
