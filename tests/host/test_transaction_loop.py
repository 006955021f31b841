"""The service runtime over the real broker: a whole scenario processed exactly once, dead
letters, snapshot + tail, a kill -9 in the middle of batches, zombie fencing."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest
from confluent_kafka import KafkaError, KafkaException

from jobledger.projections.log.replay import replay, verify
from jobledger.schemas import EventSerde, event_from_json, topic_name
from jobledger.schemas.cluster import ResourceManagerConnected
from jobledger.schemas.deadletters import DeadLettered
from jobledger.schemas.jobs import JobMasterLeadershipGranted
from jobledger.schemas.slots import NewAllocatedSlotRequested
from jobledger.schemas.topics import TopicRole
from jobledger.services.host.transaction_loop import RuntimeConfig
from jobledger.services.kafka import read_committed_consumer, transactional_producer
from jobledger.services.kafka_reads import read_topic

from ..support import scenario
from ..support.events import Clock
from ..support.runtime_harness import (
    RuntimeThread,
    append,
    duplicates,
    read,
    service_process,
    wait_until_decided,
    wait_until_owning,
)

pytestmark = pytest.mark.broker


def play_scenario(cluster) -> None:
    clock = Clock()
    append(cluster, scenario.start_cluster(clock))
    wait_until_decided(cluster)
    append(cluster, scenario.finish_job_a(clock) + scenario.lose_tm_4(clock))
    records = wait_until_decided(cluster)
    append(cluster, scenario.re_request_failed(clock, [r.event for r in records]))


def assert_healthy(records) -> None:
    assert duplicates(records) == [], "a decision was written twice"
    matched, divergence = verify(records)
    assert divergence is None, divergence.describe()
    assert matched > 0


def test_the_runtime_processes_the_scenario_exactly_once(cluster):
    with RuntimeThread(cluster) as runtime:
        play_scenario(cluster)
        records = wait_until_decided(cluster)
        states = {key: w.driver.to_dict() for key, w in runtime.workers.items()}
    assert_healthy(records)
    final = replay(records).driver
    held = {job: len(jm.pool.allocated_slots) for job, jm in final.job_masters.items()}
    assert held == {"job-a": 0, "job-b": 6, "job-c": 6}
    rm_topic = topic_name(TopicRole.RESOURCE_MANAGER, cluster.prefix)
    assert states[(rm_topic, 0)]["resource_manager"] == final.resource_manager.to_dict()
    live_jobs = {j: s for st in states.values() for j, s in st["job_masters"].items()}
    assert live_jobs == final.to_dict()["job_masters"]


def test_garbage_and_unknown_events_are_dead_lettered_and_processing_goes_on(cluster):
    topic = topic_name(TopicRole.RESOURCE_MANAGER, cluster.prefix)
    serde = EventSerde()
    good = event_from_json(
        '{"type":"TaskManagerRegistered","event_id":"after","event_time":1,"producer":"t",'
        '"resource_id":"tm-x","address":"a","number_of_slots":1,'
        '"resource_profile":{"kind":"ANY"}}'
    )
    producer = transactional_producer(cluster.bootstrap, "test")
    producer.begin_transaction()
    producer.produce(topic, key=b"k", value=b"\x00\x01garbage")
    producer.produce(topic, key=b"k", value=b"\xc3\x01" + b"\x07" * 8 + b"\x02")
    producer.produce(topic, key=b"tm-x", value=serde.encode(good, topic))
    producer.commit_transaction(30)
    with RuntimeThread(cluster):
        records = wait_until_decided(cluster)
    assert "TaskManagerRegistrationAccepted" in [r.event.type_name() for r in records]
    consumer = read_committed_consumer(cluster.bootstrap)
    dead_topic = topic_name(TopicRole.DEAD_LETTER, cluster.prefix)
    dead = [serde.decode(m.value(), dead_topic)
            for m in read_topic(consumer, dead_topic, True, True)]  # fmt: skip
    consumer.close()
    assert all(isinstance(d, DeadLettered) for d in dead)
    assert sorted(d.source_offset for d in dead) == [0, 1]
    assert {d.original_value for d in dead} == {
        b"\x00\x01garbage", b"\xc3\x01" + b"\x07" * 8 + b"\x02",
    }  # fmt: skip
    assert any("no schema registry" in d.reason for d in dead)
    assert any("no schema with fingerprint" in d.reason for d in dead)


def test_a_new_owner_rebuilds_from_snapshot_plus_tail_to_the_state_of_a_full_replay(cluster):
    with RuntimeThread(cluster, snapshot_every=7):
        play_scenario(cluster)
        wait_until_decided(cluster)
    with RuntimeThread(cluster, snapshot_every=7) as second:
        deadline = time.monotonic() + 60
        while len(second.workers) < 7 and time.monotonic() < deadline:
            time.sleep(0.2)
        records = wait_until_decided(cluster)
        workers = dict(second.workers)
    full = replay(records).driver.to_dict()
    assert any(w.rebuilt_from_snapshot_at for w in workers.values()), "no snapshot was used"
    rebuilt_jobs = {
        j: s for w in workers.values() for j, s in w.driver.to_dict()["job_masters"].items()
    }
    assert rebuilt_jobs == full["job_masters"]
    rm_topic = topic_name(TopicRole.RESOURCE_MANAGER, cluster.prefix)
    assert workers[(rm_topic, 0)].driver.resource_manager.to_dict() == full["resource_manager"]


def test_kill_9_in_the_middle_of_batches_loses_and_duplicates_nothing(
    cluster, tmp_path, broker_aborts_dangling_transactions
):
    clock = Clock()
    append(cluster, scenario.start_cluster(clock))
    first = service_process(cluster, str(tmp_path), "--batch-size", "3")
    time.sleep(6)
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    second = service_process(cluster, str(tmp_path), "--batch-size", "3")
    try:
        wait_until_owning(second)
        records = wait_until_decided(cluster)
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(30) == 0, "SIGTERM finishes the transaction and exits cleanly"
    repeated = duplicates(records)
    if broker_aborts_dangling_transactions:
        assert repeated == [], "a decision was written twice"
    else:
        copies = {r.event.event_id: [] for r in records}
        for r in records:
            copies[r.event.event_id].append(r.event)
        assert all(len({e.model_dump_json() for e in copies[i]}) == 1 for i in repeated), (
            "the broker leaked a killed transaction: its copies must be the same decisions"
        )
    assert_healthy_state(records)


def assert_healthy_state(records) -> None:
    _, divergence = verify(records)
    assert divergence is None, divergence.describe()
    final = replay(records).driver
    assert sum(len(jm.pool.allocated_slots) for jm in final.job_masters.values()) == 16


def test_a_zombie_instance_is_fenced(cluster, broker_aborts_dangling_transactions):
    """An instance that lost its partitions while paused mid-transaction (a GC pause, a
    SIGSTOP) must not be able to commit once the partition's new owner has started: the
    partition-named transactional id makes the new owner's init fence the old producer."""
    if not broker_aborts_dangling_transactions:
        pytest.skip(
            "this broker does not fence transactional producers: a second "
            "init_transactions leaves the first producer's writes visible"
        )
    from confluent_kafka import KafkaException

    with RuntimeThread(cluster) as old:
        append(cluster, scenario.start_cluster(Clock()))
        wait_until_decided(cluster)
        worker = next(iter(old.workers.values()))
        zombie = worker.producer
        zombie.begin_transaction()
        old_topic = topic_name(worker.role, cluster.prefix)
        zombie.produce(old_topic, key=b"zombie", value=b"zombie write")
        zombie.flush(10)
    with RuntimeThread(cluster), pytest.raises(KafkaException) as fenced:
        zombie.commit_transaction(30)
    assert fenced.value.args[0].fatal() or fenced.value.args[0].txn_requires_abort()
    consumer = read_committed_consumer(cluster.bootstrap)
    values = [m.value() for m in read_topic(consumer, old_topic, True, True)]
    consumer.close()
    assert b"zombie write" not in values


def test_the_clock_fires_timeouts_through_the_log_and_replay_fires_them_again(cluster):
    clock = Clock()
    append(cluster, [
        clock(JobMasterLeadershipGranted, job_id="job-t", job_master_id="jm"),
        clock(ResourceManagerConnected, job_id="job-t", resource_manager_id="resourcemanager"),
        clock(NewAllocatedSlotRequested, job_id="job-t", slot_request_id="r", timeout_ms=1),
    ])  # fmt: skip
    with RuntimeThread(cluster, timer_interval_ms=300) as runtime:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            records = read(cluster)
            if any(r.event.type_name() == "SlotRequestTimedOut" for r in records):
                break
            time.sleep(0.5)
        runtime.config = RuntimeConfig(timer_interval_ms=0)
        records = wait_until_decided(cluster)
    names = [r.event.type_name() for r in records]
    assert "TimerFired" in names and "SlotRequestTimedOut" in names
    _, divergence = verify(records)
    assert divergence is None


def test_two_instances_split_the_partitions(cluster):
    first = RuntimeThread(cluster)
    first.thread.start()
    time.sleep(2)
    with RuntimeThread.sharing(cluster) as second:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (
            not second.workers or len(first.runtime.workers) + len(second.workers) != 7
        ):
            time.sleep(0.2)
        owned = set(first.runtime.workers) | set(second.workers)
        assert len(owned) == 7 and not set(first.runtime.workers) & set(second.workers)
    first.runtime.stop()
    first.thread.join(30)


def test_health_lines_say_what_is_owned_its_offset_lag_and_throughput(cluster, caplog):
    caplog.set_level("INFO", logger="jobledger.runtime")
    with RuntimeThread(cluster, health_interval_s=0.3):
        play_scenario(cluster)
        records = wait_until_decided(cluster)
        time.sleep(1)
    rm_topic = topic_name(TopicRole.RESOURCE_MANAGER, cluster.prefix)
    rm_end = 1 + max(r.offset for r in records if r.role is TopicRole.RESOURCE_MANAGER)
    lines = [m for m in caplog.messages if m.startswith(f"{rm_topic}/0 at offset {rm_end}, ")]
    assert lines, caplog.messages[-10:]
    assert re.fullmatch(rf"{re.escape(rm_topic)}/0 at offset \d+, lag \d+, \d+ events/s", lines[-1])
    assert any(m.startswith("owns [") and rm_topic in m for m in caplog.messages)


class RefusedCommits:
    """A transactional producer whose next `refusals` commits the broker refuses with an
    abortable error (what a request timeout or a coordinator moving away looks like)."""

    def __init__(self, producer, refusals: int = 1) -> None:
        self.producer = producer
        self.refusals = refusals

    def commit_transaction(self, *args):
        if self.refusals:
            self.refusals -= 1
            raise KafkaException(
                KafkaError(KafkaError._TIMED_OUT, "refused by the test", txn_requires_abort=True)
            )
        return self.producer.commit_transaction(*args)

    def __getattr__(self, name):
        return getattr(self.producer, name)


def test_a_refused_commit_loses_no_decision_and_duplicates_none(cluster):
    """The reducers had already applied the inputs of a transaction the broker then refused:
    the runtime must not go on from that state (their decisions were thrown away with the
    transaction) nor die. It aborts, goes back to the committed offset and derives them again."""
    with RuntimeThread(cluster) as runtime:
        refused = []
        for worker in runtime.workers.values():
            worker.producer = RefusedCommits(worker.producer)
            refused.append(worker.producer)
        append(cluster, scenario.start_cluster(Clock()))
        records = wait_until_decided(cluster)
        assert runtime.failure is None
        states = {key: w.driver.to_dict() for key, w in runtime.workers.items()}
    assert any(p.refusals == 0 for p in refused), "no commit was refused: the test tests nothing"
    assert_healthy(records)
    final = replay(records).driver.to_dict()
    rebuilt_jobs = {j: s for state in states.values() for j, s in state["job_masters"].items()}
    assert rebuilt_jobs == final["job_masters"]
    rm_topic = topic_name(TopicRole.RESOURCE_MANAGER, cluster.prefix)
    assert states[(rm_topic, 0)]["resource_manager"] == final["resource_manager"]
