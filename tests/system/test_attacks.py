"""Attacks by a principal of the cluster, each tried against a secured cluster (`jobledger
broker --secure`, the services checking signatures against the keyring) while a victim job
runs: every one is refused with its reason (a dead letter, or Kafka's refusal), the job runs
to FINISHED as its own runner says, and `replay --verify` calls the log clean.

The attackers hold what any tenant of the cluster holds: the `client` principal's Kafka
credentials, and a signing key of their own (`mallory`, a client; `rogue`, a runner that owns
other TaskExecutors; `eve`, a client whose key was revoked). Some write no signature at all,
or reuse a real signature over other bytes. The runner of the victim's TaskExecutor is the
test itself, signing as `runner`: what it reports is what a real runner would, at the moment
the test chooses (the Spark runner signing for real is `test_broker_secure.py`'s end-to-end
test)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    KafkaException,
    Producer,
)

from jobledger.schemas import Event
from jobledger.schemas.cluster import TaskManagerRegistered
from jobledger.schemas.jobs import (
    JobCancellationRequested,
    JobMasterLeadershipGranted,
    JobStatusChanged,
)
from jobledger.schemas.tasks import (
    TaskExecutionStateChanged,
    TaskFinalStateReported,
)
from jobledger.schemas.timers import CLOCK, TimerFired
from jobledger.schemas.topics import TopicRole
from jobledger.schemas.types import ExecutionState, JobStatus, OwnerKind
from jobledger.services.client.dispatcher import now_ms
from jobledger.services.kafka import SERVICES_GROUP_PREFIX

from ..support.attack_cluster import (
    SERDE,
    SecuredCluster,
    Writer,
    dead_letters,
    new_event,
    secured_cluster,
    services_on,
    start_victim_job,
)
from ..support.events import ANY
from ..support.secure_cluster import SecureBroker, cli

pytestmark = pytest.mark.broker

TE = "runner-0"
"""The victim's TaskExecutor: the `runner` principal's (it owns `runner-*`)."""


@pytest.fixture
def cluster(secured: SecureBroker, tmp_path: Path) -> Iterator[SecuredCluster]:
    """A fresh prefix with its ACLs and topics, the attackers' keys (eve's revoked), and the
    services running on it, checking every input against the keyring."""
    c = secured_cluster(secured, tmp_path)
    with services_on(c):
        yield c


def test_every_attack_is_refused_with_its_reason_and_the_victim_job_finishes(cluster):
    c = cluster
    runner, client = c.writer("runner", "runner"), c.writer("client", "client")
    runner.write(new_event(TaskManagerRegistered, "runner", resource_id=TE, address="test",
                           number_of_slots=2, resource_profile=ANY))  # fmt: skip
    job, deployments = start_victim_job(c, client)
    assert sorted(d.resource_id for d in deployments) == [TE, TE]
    first, jm = deployments[0].execution_attempt_id, deployments[0].job_master_id
    mallory, rogue, eve = (c.writer("client", who) for who in ("mallory", "rogue", "eve"))
    unsigned = c.writer("client", None)
    names = c.names

    def report(state: ExecutionState, attempt: str = first, **more: Any) -> Event:
        return new_event(TaskExecutionStateChanged, "runner", job_id=job.job_id, job_master_id=jm,
                         execution_attempt_id=attempt, execution_state=state, resource_id=TE,
                         **more)  # fmt: skip

    finish = [
        report(s, d.execution_attempt_id)
        for d in deployments
        for s in (ExecutionState.INITIALIZING, ExecutionState.RUNNING, ExecutionState.FINISHED)
    ]
    forged_decision = new_event(JobStatusChanged, "jobmaster", job_id=job.job_id,
                                from_status=JobStatus.RUNNING, to_status=JobStatus.FINISHED,
                                cause_event_id=uuid.uuid4().hex)  # fmt: skip
    tick = TimerFired(event_id=uuid.uuid4().hex, event_time=now_ms() + 2 * 3600_000,
                      producer=CLOCK, scope=OwnerKind.JOB, owner_id=job.job_id)  # fmt: skip
    rogue_te = new_event(TaskManagerRegistered, "runner", resource_id="tm-rogue",
                         address="evil", number_of_slots=16, resource_profile=ANY)  # fmt: skip
    cancel = new_event(JobCancellationRequested, "mallory", job_id=job.job_id)
    seize = new_event(JobMasterLeadershipGranted, "mallory", job_id=job.job_id,
                      job_master_id="jm-mallory")  # fmt: skip
    who_m, who_r = f"{names['mallory']} (client)", f"{names['rogue']} (runner)"
    client_only = "a client writes only submissions and requests about its jobs"
    attacks: dict[str, tuple[Writer, list[Event]]] = {
        "finish a job that never ran": (mallory, finish),
        "finish it unsigned": (unsigned, finish[:1]),
        "fail a task as another runner": (rogue, [report(ExecutionState.FAILED, error="boom")]),
        "fail a task as a client": (mallory, [report(ExecutionState.FAILED, error="boom")]),
        "cancel someone's job": (mallory, [cancel]),
        "cancel with a revoked key": (eve, [cancel]),
        "steal every slot": (mallory, [rogue_te]),
        "steal every slot as a runner": (rogue, [rogue_te]),
        "seize leadership": (mallory, [seize]),
        "seize leadership as the submitter": (client, [seize]),
        "move time": (mallory, [tick]),
        "forge a decision": (mallory, [forged_decision]),
    }
    positions: dict[str, tuple] = {}
    for attack, (writer, forged) in attacks.items():
        for n, where in enumerate(writer.write(*forged)):
            positions[f"{attack} #{n}" if len(forged) > 1 else attack] = where
    # a real signature of the runner's, over other bytes than it signed
    topic = c.topic(TopicRole.JOB)
    signed_value = SERDE.encode(report(ExecutionState.RUNNING), topic)
    swapped_value = SERDE.encode(report(ExecutionState.FAILED, error="boom"), topic)
    headers = c.keys["runner"].headers(topic, job.job_id.encode(), signed_value,
                                       "TaskExecutionStateChanged")  # fmt: skip
    positions["reuse a signature"] = mallory.write_raw(
        topic, job.job_id.encode(), swapped_value,
        {"jobledger.type": "TaskExecutionStateChanged", **headers},
    )  # fmt: skip

    reasons = dead_letters(c, positions)
    runner_key = c.keys["runner"].key_id
    eve_key = c.keys["eve"]
    jid, submitter_only = job.job_id, "only its submitter or an admin may"
    no_time = "only the services decide and keep time"
    expected = {
        **{f"finish a job that never ran #{n}": f"{who_m} wrote TaskExecutionStateChanged: "
           f"{client_only}" for n in range(6)},
        "finish it unsigned": "unsigned record (no jobledger.signer/jobledger.signature header)",
        "fail a task as another runner": f"{who_r} reported attempt {first} of job {jid}, "
        f"which runs on TaskExecutor {TE}, not its own (it is runner's)",
        "fail a task as a client": f"{who_m} wrote TaskExecutionStateChanged: {client_only}",
        "cancel someone's job": f"{who_m} wrote JobCancellationRequested for job {jid}, "
        f"submitted by client: {submitter_only}",
        "steal every slot": f"{who_m} wrote TaskManagerRegistered: {client_only}",
        "steal every slot as a runner": f"{who_r} wrote TaskManagerRegistered for TaskExecutor "
        "'tm-rogue', which is not its own (the keyring states no owner)",
        "seize leadership": f"{who_m} wrote JobMasterLeadershipGranted for job {jid}, "
        f"submitted by client: {submitter_only}",
        "seize leadership as the submitter": f"client (client) wrote JobMasterLeadershipGranted "
        f"for job {jid}, which has a leader: leadership is granted only by the submission or an "
        "admin",
        "move time": f"{who_m} wrote TimerFired: {no_time}",
        "forge a decision": f"{who_m} wrote a decision: {no_time}",
        "reuse a signature": f"bad signature for key {runner_key} (runner): the record is not "
        "what that key signed",
    }  # fmt: skip
    revoked = reasons.pop("cancel with a revoked key")
    assert revoked.startswith(f"signed by key {eve_key.key_id} of {names['eve']}, revoked at ")
    assert reasons == expected

    # the victim's own runner finishes it: nothing the attackers wrote changed its course
    for d in deployments:
        runner.write(*(report(s, d.execution_attempt_id) for s in (
            ExecutionState.INITIALIZING, ExecutionState.RUNNING, ExecutionState.FINISHED)),
            new_event(TaskFinalStateReported, "runner", job_id=job.job_id, resource_id=TE,
                      execution_attempt_id=d.execution_attempt_id,
                      execution_state=ExecutionState.FINISHED))  # fmt: skip
    waited = c.secured.run("job", "wait", job.job_id, *c.as_("client"), "--timeout", "60")
    assert waited.stdout.startswith(f"job {job.job_id} FINISHED at "), waited.stderr

    def ended(events: list[Event]) -> bool:
        return any(isinstance(e, JobStatusChanged) and e.job_id == job.job_id
                   and e.to_status is JobStatus.FINISHED for e in events)  # fmt: skip

    forged = {e.event_id for _, events in attacks.values() for e in events}
    story = [e for e in c.read(TopicRole.JOB, ended)
             if getattr(e, "job_id", None) == job.job_id and e.event_id not in forged]  # fmt: skip
    assert [(e.from_status.value, e.to_status.value) for e in story
            if isinstance(e, JobStatusChanged)] == [
        ("INITIALIZING", "CREATED"), ("CREATED", "RUNNING"), ("RUNNING", "FINISHED"),
    ]  # fmt: skip
    assert {e.job_master_id for e in story if isinstance(e, JobMasterLeadershipGranted)} == {jm}
    keyring = str(c.secured.home / "secure" / "keyring.json")
    verified = c.secured.run("replay", "--verify", "--keyring", keyring, *c.as_("client"))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.stdout.strip().endswith("inputs: no difference"), verified.stdout


def test_kafka_refuses_what_signatures_cannot_stop(cluster):
    """Fencing a service (its transactional id) and taking its partitions (its consumer
    group) happen before any record is written: the ACLs of `broker --secure` refuse them to
    the client's credentials, and a topic sink into jobledger's own topics is refused at
    submission (and by the runner, `operators.confined_topic`)."""
    c = cluster
    config = c.secured.config("client")
    fence = Producer(
        {
            **config,
            "log_level": 0,
            "transactional.id": f"jobledger-{c.topic(TopicRole.RESOURCE_MANAGER)}-0",
        }
    )
    with pytest.raises(KafkaException) as refused:
        fence.init_transactions(30)
    assert refused.value.args[0].name() == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    member = Consumer({**config, "group.id": f"{SERVICES_GROUP_PREFIX}{c.prefix}",
                       "log_level": 0, "session.timeout.ms": 6000})  # fmt: skip
    try:
        member.subscribe([c.topic(TopicRole.JOB)])
        message = None
        for _ in range(30):
            message = member.poll(1)
            if message is not None:
                break
        assert message is not None and message.error().name() == "GROUP_AUTHORIZATION_FAILED"
    finally:
        member.close()
    graph = json.loads((Path(__file__).resolve().parents[2] / "examples" / "jobgraph.json")
                       .read_text())  # fmt: skip
    graph["vertices"][-1]["operators"].append(
        {"name": "topic", "config": {"topic": c.topic(TopicRole.JOB)}}
    )
    path = c.workdir / "into-the-log.json"
    path.write_text(json.dumps(graph))
    refused_job = cli(c.secured.home, "job", "submit", str(path), *c.as_("client"))
    assert refused_job.returncode == 1
    assert f"is one of jobledger's own topics (prefix {c.prefix!r})" in refused_job.stderr


def test_the_services_checkpoints_make_an_export_that_audits_clean(secured, tmp_path):
    """Signed checkpoints on the real broker: `jobledger checkpoint`, as the services, writes
    signed tree heads of every partition twice (the second run goes on from the first's);
    an export carries them, and `jobledger audit` finds every record under one, an unsigned
    record the services refused among them."""
    c = secured_cluster(secured, tmp_path, attackers=False)
    keyring = str(c.secured.home / "secure" / "keyring.json")
    with services_on(c, "--timer-interval-ms", "0"):
        runner, client = c.writer("runner", "runner"), c.writer("client", "client")
        runner.write(new_event(TaskManagerRegistered, "runner", resource_id=TE, address="test",
                               number_of_slots=2, resource_profile=ANY))  # fmt: skip
        job, _ = start_victim_job(c, client, "audited")
        first = c.secured.run("checkpoint", "--once", *c.as_("services"))
        assert first.returncode == 0, first.stderr
        where = c.writer("client", None).write(
            new_event(JobCancellationRequested, "cli", job_id=job.job_id))[0]  # fmt: skip
        assert "unsigned record" in dead_letters(c, {"unsigned": where})["unsigned"]
    # the services stopped: every input of the export has its decisions in it
    second = c.secured.run("checkpoint", "--once", *c.as_("services"))
    assert second.returncode == 0, second.stderr
    grown = sorted(line.split("/")[1] for line in second.stdout.splitlines())
    assert grown == [c.topic(TopicRole.DEAD_LETTER), c.topic(TopicRole.JOB)], second.stdout
    export = tmp_path / "log.avro"
    exported = c.secured.run("export", str(export), *c.as_("client"))
    assert exported.returncode == 0, exported.stderr
    count = int(exported.stderr.split()[1])
    audited = c.secured.run("audit", str(export), "--keyring", keyring)
    checkpoints = len(first.stdout.splitlines()) + len(second.stdout.splitlines())
    assert audited.stdout.startswith(
        f"audit passed: {count} records, {count} of them under {checkpoints} signed "
        "checkpoints; "), audited.stdout + audited.stderr  # fmt: skip
