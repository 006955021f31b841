"""Beats batched per runner through the real services on the real broker:
a runner's record of beats keeps its TaskExecutors alive beside a client's single
`TaskManagerHeartbeat`, the one TaskExecutor left out of both is lost at the heartbeat
timeout, and `replay --verify` re-derives every decision where the services wrote it."""

from __future__ import annotations

import time
import uuid

import pytest

from jobledger.projections.log.replay import verify
from jobledger.schemas.cluster import (
    TaskManagerHeartbeat,
    TaskManagerHeartbeatsReported,
    TaskManagerLost,
    TaskManagerRegistered,
)
from jobledger.schemas.deadletters import DeadLettered
from jobledger.schemas.rejections import EventRejected
from jobledger.schemas.timers import CLOCK, TimerFired
from jobledger.schemas.types import OwnerKind, TaskManagerBeat

from ..support.events import profile
from ..support.runtime_harness import RuntimeThread, append, read, until, wait_until_decided

pytestmark = pytest.mark.broker

TIMEOUT_MS = 50_000
"""The services' default `heartbeat.timeout`."""


def test_a_runner_s_batched_beats_keep_its_task_executors_alive_and_replay_agrees(cluster):
    t0 = int(time.time() * 1000) - 60_000  # in the past: inputs may not be dated ahead

    def event(cls, at, **fields):
        return cls(event_id=uuid.uuid4().hex, event_time=at, producer="runner", **fields)

    tms = [f"tm-{i}" for i in range(3)]
    with RuntimeThread(cluster):
        append(cluster, [event(TaskManagerRegistered, t0, resource_id=rid, address="x",
                               number_of_slots=2, resource_profile=profile(1.0),
                               instance_id=f"i-{rid}") for rid in tms])  # fmt: skip
        append(cluster, [
            event(TaskManagerHeartbeatsReported, t0 + 30_000, runner_id="tm",
                  beats=[TaskManagerBeat(resource_id=rid, instance_id=f"i-{rid}")
                         for rid in ("tm-0", "tm-1")]),
            event(TaskManagerHeartbeat, t0 + 45_000, resource_id="tm-1", instance_id="i-tm-1"),
        ])  # fmt: skip
        tick = TimerFired(event_id=uuid.uuid4().hex, event_time=t0 + TIMEOUT_MS + 5_000,
                          producer=CLOCK, scope=OwnerKind.RESOURCE_MANAGER,
                          owner_id="resourcemanager")  # fmt: skip
        append(cluster, [tick])

        until(lambda: any(isinstance(r.event, TaskManagerLost) for r in read(cluster)),
              "a TaskExecutor lost")  # fmt: skip
        records = wait_until_decided(cluster)
    losses = [r.event for r in records if isinstance(r.event, TaskManagerLost)]
    assert [(e.resource_id, e.cause, e.cause_event_id) for e in losses] == [
        ("tm-2", "The heartbeat of TaskManager with id tm-2 timed out.", tick.event_id)
    ]
    assert [r for r in records if isinstance(r.event, DeadLettered | EventRejected)] == []
    matched, divergence = verify(records)
    assert divergence is None
    assert matched == sum(1 for r in records if r.event.cause_event_id is not None)
