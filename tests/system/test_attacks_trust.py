"""Attacks on trust (replayed records, inputs a principal may not write), each against a
secured cluster (`broker --secure`, the services checking every input against the keyring)
while a victim's job runs.

Two runner principals: `rk-2` (the victim, TaskExecutor `rk-2-0`) and `rk` (the attacker,
TaskExecutor `rk-0`), each a key the keyring states its TaskExecutors for (`keys new
--role runner`). The attacker once owned `rk-2-0` because its name is a prefix of that
ResourceID; now its forged records are dead-lettered with a reason naming the owner. And a
record the attacker captured (the victim's registration of an earlier instance), re-sent once
the services' dedup window has passed it, is rejected instead of replacing the victim's
instance. The window is `-D jobledger.dedup-window=400` here, so the flood that pushes the
captured id out of it is 500 beats, not the 100,001 of the default: the same attack, in a few
seconds. Both runners are the test itself, signing as they would."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from jobledger.schemas import Event
from jobledger.schemas.cluster import TaskManagerHeartbeat, TaskManagerRegistered
from jobledger.schemas.jobs import JobStatusChanged, JobSubmitted
from jobledger.schemas.rejections import EventRejected
from jobledger.schemas.tasks import (
    TaskDeploymentRequested,
    TaskExecutionStateChanged,
    TaskFinalStateReported,
)
from jobledger.schemas.topics import TopicRole
from jobledger.schemas.types import ExecutionState
from jobledger.services.signing import SigningKey

from ..support.attack_cluster import (
    SecuredCluster,
    Writer,
    dead_letters,
    new_event,
    services_on,
    start_victim_job,
)
from ..support.events import ANY
from ..support.secure_cluster import SecureBroker

pytestmark = pytest.mark.broker

WINDOW = 400
VICTIM_TE, ATTACKER_TE = "rk-2-0", "rk-0"


@pytest.fixture
def cluster(secured: SecureBroker, tmp_path: Path) -> Iterator[SecuredCluster]:
    """A fresh prefix, runner principals `rk` and `rk-2` (their keys stating rk-0 and rk-2-0),
    and the services on it with a dedup window of WINDOW ids."""
    prefix = f"trust{uuid.uuid4().hex[:6]}."
    granted = secured.run("broker", "--secure", "--detach", "--topic-prefix", prefix)
    assert granted.returncode == 0, granted.stderr
    tag = uuid.uuid4().hex[:6]
    names = {"rk": f"rk{tag}", "rk-2": f"rk{tag}-2"}
    folder = secured.home / "secure"
    for name in names.values():
        made = secured.run("keys", "new", name, "--role", "runner")
        assert made.returncode == 0, made.stderr
    keys = {who: SigningKey.load(folder / f"{name}.key") for who, name in names.items()}
    keys["client"] = SigningKey.load(folder / "client.key")
    c = SecuredCluster(secured, prefix, keys, names, tmp_path)
    with services_on(c, "-D", f"jobledger.dedup-window={WINDOW}"):
        yield c


def te_id(c: SecuredCluster, who: str) -> str:
    """The TaskExecutor `keys new` stated for runner `who` (its principal's name, then -0)."""
    return f"{c.names[who]}-0"


def register(writer: Writer, resource_id: str, instance: str, at: int | None = None) -> tuple:
    """A registration of `instance` (at event time `at`, else now) and where it went."""
    event = new_event(TaskManagerRegistered, "runner", resource_id=resource_id, address="test",
                      number_of_slots=2, resource_profile=ANY, instance_id=instance)  # fmt: skip
    if at is not None:
        event = event.model_copy(update={"event_time": at})
    [where] = writer.write(event)
    return event, where


def report(job: JobSubmitted, d: TaskDeploymentRequested, state: ExecutionState,
           **more: Any) -> TaskExecutionStateChanged:  # fmt: skip
    return new_event(TaskExecutionStateChanged, "runner", job_id=job.job_id,
                     job_master_id=d.job_master_id, execution_attempt_id=d.execution_attempt_id,
                     execution_state=state, resource_id=d.resource_id, **more)  # fmt: skip


def finish_and_story(c: SecuredCluster, victim: Writer, job: JobSubmitted, deployments: list):
    """The victim's runner finishes its tasks; the job's status changes, once it ended."""
    for d in deployments:
        victim.write(*(report(job, d, s) for s in (
            ExecutionState.INITIALIZING, ExecutionState.RUNNING, ExecutionState.FINISHED)),
            new_event(TaskFinalStateReported, "runner", job_id=job.job_id,
                      resource_id=d.resource_id, execution_attempt_id=d.execution_attempt_id,
                      execution_state=ExecutionState.FINISHED))  # fmt: skip

    def ended(events: list[Event]) -> bool:
        return any(isinstance(e, JobStatusChanged) and e.job_id == job.job_id
                   and e.to_status.value in ("FINISHED", "FAILED", "CANCELED")
                   for e in events)  # fmt: skip

    return [(e.from_status.value, e.to_status.value) for e in c.read(TopicRole.JOB, ended)
            if isinstance(e, JobStatusChanged) and e.job_id == job.job_id]  # fmt: skip


RAN = [("INITIALIZING", "CREATED"), ("CREATED", "RUNNING"), ("RUNNING", "FINISHED")]


def test_a_runner_speaks_only_for_the_task_executors_the_keyring_states(cluster):
    """Item 4: `rk` forges four records for `rk-2`'s TaskExecutor (a FAILED report, a final
    state, a beat, a registration as another instance); each is dead-lettered naming the
    owner, and the victim's job runs to FINISHED untouched."""
    c = cluster
    victim_te = te_id(c, "rk-2")
    assert victim_te.startswith(c.names["rk"])  # what the prefix rule read as rk's
    victim, attacker = c.writer("runner", "rk-2"), c.writer("runner", "rk")
    client = c.writer("client", "client")
    instance = uuid.uuid4().hex
    register(victim, victim_te, instance)
    job, deployments = start_victim_job(c, client)
    assert {d.resource_id for d in deployments} == {victim_te}
    d = deployments[0]
    forged = {
        "fail its task": report(job, d, ExecutionState.FAILED, error="boom"),
        "end its task": new_event(TaskFinalStateReported, "runner", job_id=job.job_id,
                                  resource_id=victim_te,
                                  execution_attempt_id=d.execution_attempt_id,
                                  execution_state=ExecutionState.FAILED),
        "beat for it": new_event(TaskManagerHeartbeat, "runner", resource_id=victim_te,
                                 instance_id=instance),
        "register it as another instance": new_event(
            TaskManagerRegistered, "runner", resource_id=victim_te, address="evil",
            number_of_slots=2, resource_profile=ANY, instance_id=uuid.uuid4().hex),
    }  # fmt: skip
    positions = {attack: attacker.write(event)[0] for attack, event in forged.items()}
    who, owner = f"{c.names['rk']} (runner)", f"it is {c.names['rk-2']}'s"
    assert dead_letters(c, positions) == {
        "fail its task": f"{who} reported attempt {d.execution_attempt_id} of job {job.job_id}, "
        f"which runs on TaskExecutor {victim_te}, not its own ({owner})",
        **{attack: f"{who} wrote {forged[attack].type_name()} for TaskExecutor {victim_te!r}, "
           f"which is not its own ({owner})"
           for attack in ("end its task", "beat for it", "register it as another instance")},
    }  # fmt: skip
    assert finish_and_story(c, victim, job, deployments) == RAN


def test_a_captured_registration_re_sent_past_the_dedup_window_is_rejected(cluster):
    """Item 3: `rk` captures `rk-2`'s registration of an earlier instance, floods the window
    with its own TaskExecutor's beats, and re-sends the captured record byte for byte (the
    victim's signature holds): the ResourceManager rejects it as older than the registered
    instance, and the victim's job runs to FINISHED."""
    c = cluster
    victim_te, attacker_te = te_id(c, "rk-2"), te_id(c, "rk")
    victim, attacker = c.writer("runner", "rk-2"), c.writer("runner", "rk")
    client = c.writer("client", "client")
    old, (topic, partition, offset) = register(victim, victim_te, uuid.uuid4().hex)
    captured = read_record(c, topic, partition, offset)
    # the victim's runner restarted: a new instance, registered later
    register(victim, victim_te, uuid.uuid4().hex, at=old.event_time + 1_000)
    job, deployments = start_victim_job(c, client)
    assert {d.resource_id for d in deployments} == {victim_te}
    mine = uuid.uuid4().hex
    register(attacker, attacker_te, mine)
    beats = [new_event(TaskManagerHeartbeat, "runner", resource_id=attacker_te, instance_id=mine)
             for _ in range(WINDOW + 100)]  # fmt: skip
    attacker.write(*beats)
    attacker.write_raw(topic, *captured)

    def answered(events: list[Event]) -> bool:
        return any(isinstance(e, EventRejected) and e.rejected_event_id == old.event_id
                   for e in events)  # fmt: skip

    events = c.read(TopicRole.RESOURCE_MANAGER, answered)
    [rejected] = [e for e in events if answered([e])]
    assert rejected.reason.startswith(
        f"registration of instance {old.instance_id} of TaskExecutor {victim_te}, written at "
        f"{old.event_time}, is not newer than instance "
    )
    assert rejected.reason.endswith("an old record, which never replaces a newer instance")
    assert finish_and_story(c, victim, job, deployments) == RAN


def read_record(c: SecuredCluster, topic: str, partition: int, offset: int) -> tuple:
    """The key, value and headers of the record at (topic, partition, offset), as any reader
    of the topic can copy them."""
    consumer: Consumer = c.reader()
    try:
        consumer.assign([TopicPartition(topic, partition, offset)])
        for _ in range(30):
            msg = consumer.poll(1)
            if msg is not None and msg.error() is None:
                return msg.key(), msg.value(), dict(msg.headers())
        raise AssertionError(f"no record at {topic}/{partition}@{offset} in 30 s")
    finally:
        consumer.close()
