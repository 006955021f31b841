"""Snapshots encoded by a forked child (services/host/snapshot_fork.py). Through the
Committer with a writer that keeps what it would commit: the child's snapshot is the state
at the offset it was forked at, whatever the loop did since, and a child killed mid-encode
is redone in the loop. Through `services run` on the broker: a restart after a SIGKILL
rebuilds from a child's snapshot, and replay verifies what followed."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from jobledger.projections.log.replay import verify
from jobledger.schemas import topic_name
from jobledger.schemas.cluster import TaskManagerRegistered
from jobledger.schemas.topics import TopicRole
from jobledger.services.control.driver import ReducerDriver
from jobledger.services.host import snapshot, snapshot_fork
from jobledger.services.host.committer import Committer
from jobledger.services.host.partition_worker import PartitionWorker
from jobledger.services.host.poison import Quarantines
from jobledger.services.host.runtime_config import RuntimeConfig
from jobledger.services.runner import instances as runner_instances

from ..support import scenario
from ..support.events import Clock
from ..support.runtime_harness import (
    append,
    service_process,
    until,
    wait_until_decided,
    wait_until_owning,
)

pytestmark = pytest.mark.skipif(not snapshot_fork.can_fork(), reason="no fork here")

PREFIX = "forktest"


def registered(i: int) -> TaskManagerRegistered:
    return TaskManagerRegistered(
        event_id=f"reg-{i}", event_time=1_000 + i, producer="runner-0", resource_id=f"te-{i}",
        address="x", number_of_slots=4, resource_profile=runner_instances.PROFILE,
        instance_id=f"{i:032x}",
    )  # fmt: skip


class KeptWriter:
    """Keeps each unit it is given to commit: what the transaction would hold."""

    def __init__(self) -> None:
        self.units = []

    def commit(self, producer, partition, unit) -> None:
        self.units.append(unit)


def committer_of(worker: PartitionWorker, writer: KeptWriter) -> Committer:
    config = RuntimeConfig(snapshot_every=2, snapshot_interval_s=0, snapshot_fork_bytes=0)
    key = (topic_name(TopicRole.RESOURCE_MANAGER, PREFIX), 0)
    return Committer(PREFIX, config, writer, None, None, None, {key: worker}, Quarantines(PREFIX))


def reduce(worker: PartitionWorker, start: int, count: int) -> None:
    """Inputs start..start+count, reduced as the loop does."""
    for i in range(start, start + count):
        worker.driver.process(registered(i))
        worker.next_offset = i + 1
        worker.since_snapshot += 1


def written_snapshot(
    writer: KeptWriter, role: TopicRole = TopicRole.RESOURCE_MANAGER
) -> snapshot.Snapshot | None:
    """The latest snapshot of `role`'s partition 0 in what the writer was given."""
    records = [record for unit in writer.units for record in unit.snapshot]
    if not records:
        return None
    assembler = snapshot.SnapshotAssembler(f"{topic_name(role, PREFIX)}/0")
    for key, value in records:
        assembler.add(key, value)
    return snapshot.decode(assembler.latest)


def settle(committer: Committer, writer: KeptWriter) -> None:
    """Step as the loop does until the child's snapshot is written or the child has ended
    (bounded: a child past its deadline is killed)."""
    while written_snapshot(writer) is None and committer.forks.busy():
        committer.snapshot_quiet()
        time.sleep(0.01)
    committer.snapshot_quiet()


def test_a_forked_snapshot_is_the_state_at_its_offset_whatever_the_loop_did_since():
    worker = PartitionWorker(TopicRole.RESOURCE_MANAGER, 0, ReducerDriver(), None, 0)
    writer = KeptWriter()
    committer = committer_of(worker, writer)
    reduce(worker, 0, 2_000)
    at_fork = snapshot.encode(snapshot.Snapshot(worker.driver, 2_000))
    assert committer.commit(worker, [])
    assert writer.units[-1].snapshot == [], "the snapshot is the child's, not this transaction's"
    assert committer.forks.busy()
    reduce(worker, 2_000, 1)  # the loop goes on while the child encodes
    settle(committer, writer)
    written = written_snapshot(writer)
    assert written is not None and written.next_offset == 2_000
    assert snapshot.encode(written) == at_fork
    assert written.driver.to_dict() == snapshot.decode(at_fork).driver.to_dict()
    assert not committer.forks.busy()


def test_a_child_killed_mid_encode_is_redone_in_the_loop_and_nothing_is_lost(monkeypatch):
    worker = PartitionWorker(TopicRole.RESOURCE_MANAGER, 0, ReducerDriver(), None, 0)
    writer = KeptWriter()
    committer = committer_of(worker, writer)
    reduce(worker, 0, 50)
    encode = snapshot.encode

    def stuck(state: snapshot.Snapshot) -> bytes:
        data = encode(state)
        if os.getpid() != parent:  # the child: encoded, and stopped before writing it
            time.sleep(3600)
        return data

    parent = os.getpid()
    monkeypatch.setattr(snapshot, "encode", stuck)
    assert committer.commit(worker, [])
    assert committer.forks.busy()
    os.kill(committer.forks.pid, signal.SIGKILL)
    settle(committer, writer)
    written = written_snapshot(writer)
    assert written is not None, "the snapshot was redone in the loop"
    assert written.next_offset == 50
    assert written.driver.to_dict() == worker.driver.to_dict()
    assert not worker.snapshot_in_loop and not committer.forks.busy()


def test_a_large_snapshot_waits_for_another_partitions_child_until_overdue_then_is_encoded_here(
    monkeypatch,
):
    """One child at a time; a snapshot kept waiting past its interval and a child's deadline
    is encoded in the loop, so retention's two intervals still cover every record."""
    first = PartitionWorker(TopicRole.RESOURCE_MANAGER, 0, ReducerDriver(), None, 0)
    second = PartitionWorker(TopicRole.TASK_EXECUTOR, 0, ReducerDriver(), None, 0)
    writer = KeptWriter()
    config = RuntimeConfig(snapshot_every=0, snapshot_interval_s=3, snapshot_fork_bytes=0)
    workers = {(topic_name(w.role, PREFIX), 0): w for w in (first, second)}
    committer = Committer(PREFIX, config, writer, None, None, None, workers, Quarantines(PREFIX))
    encode, parent = snapshot.encode, os.getpid()

    def stuck(state: snapshot.Snapshot) -> bytes:
        if os.getpid() != parent:  # a child that does not end by itself
            time.sleep(3600)
        return encode(state)

    monkeypatch.setattr(snapshot, "encode", stuck)
    try:
        for worker in (first, second):
            reduce(worker, 0, 3)
            worker.last_snapshot -= 3.5  # due by the interval, not yet by its deadline more
        assert committer.commit(first, []) and committer.forks.busy()
        assert not committer.snapshot_due(second)
        assert committer.commit(second, []) and writer.units[-1].snapshot == []
        second.last_snapshot -= 1.0  # now a child's deadline (1 s) past its interval
        assert committer.snapshot_due(second)
        assert committer.commit(second, [])
        written = written_snapshot(writer, TopicRole.TASK_EXECUTOR)
        assert writer.units[-1].snapshot and written is not None and written.next_offset == 3
        assert committer.forks.busy(), "the first partition's child runs on"
    finally:
        committer.forks.close()


def test_a_partition_no_longer_owned_as_it_was_loses_its_child_and_its_finished_snapshot():
    """Given up, or gone back to its last commit (a new worker): the child is killed, its
    snapshot dropped, and the next partition may fork."""
    worker = PartitionWorker(TopicRole.RESOURCE_MANAGER, 0, ReducerDriver(), None, 0)
    reduce(worker, 0, 3)
    forks = snapshot_fork.ForkedSnapshots(0, 60)
    forks.start(worker)
    forks.poll([])
    assert not forks.busy()
    forks.start(worker)
    while not forks.ready(worker) and forks.busy():
        forks.poll([worker])
        time.sleep(0.01)
    assert forks.ready(worker)
    forks.poll([PartitionWorker(TopicRole.RESOURCE_MANAGER, 0, ReducerDriver(), None, 0)])
    assert not forks.busy() and forks.take(worker) is None


@pytest.mark.broker
def test_services_killed_after_a_forked_snapshot_rebuild_from_it_and_replay_verifies(
    cluster, tmp_path
):
    """`services run` snapshotting by children only, SIGKILLed once one was written: the next
    instance rebuilds from it plus the tail, and decides on as a full replay does."""
    clock = Clock()
    every = ("--snapshot-every", "5", "--snapshot-fork-bytes", "0")
    append(cluster, scenario.start_cluster(clock))
    first = service_process(cluster, str(tmp_path), *every)
    try:
        wait_until_decided(cluster)
        until(lambda: "a child encoded" in Path(first.log_path).read_text(),
              "a snapshot encoded by a child was written")  # fmt: skip
        append(cluster, scenario.finish_job_a(clock))  # decided after that snapshot: a tail
        wait_until_decided(cluster)
    finally:
        first.kill()
        first.wait(10)
    append(cluster, scenario.lose_tm_4(clock))
    second = service_process(cluster, str(tmp_path), *every)
    try:
        wait_until_owning(second)
        records = wait_until_decided(cluster)
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(30) == 0
    assert re.search(r"rebuilt \S+/\d+ from snapshot@\d+", Path(second.log_path).read_text())
    matched, divergence = verify(records)
    assert divergence is None, divergence.describe()
    assert matched > 0
