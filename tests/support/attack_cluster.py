"""A secured cluster for attacks (`jobledger broker --secure`, the services checking every
input against the keyring), the writers of its principals, and a victim's job on it: what
`tests/system/test_attacks.py` and `test_attacks_trust.py` build their attacks on."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition

from jobledger.schemas import Event, EventSerde
from jobledger.schemas.deadletters import DeadLettered
from jobledger.schemas.jobs import JobSubmitted
from jobledger.schemas.tasks import TaskDeploymentRequested, TaskSubmissionAccepted
from jobledger.schemas.topics import TopicRole, topic_name
from jobledger.services import kafka
from jobledger.services.client.dispatcher import now_ms, submission
from jobledger.services.kafka import produce_event
from jobledger.services.signing import SigningKey

from .jobs import vertex
from .secure_cluster import SecureBroker

SERDE = EventSerde()


def new_event(cls: type[Event], producer: str, **fields: Any) -> Event:
    return cls(event_id=uuid.uuid4().hex, event_time=now_ms(), producer=producer, **fields)


@dataclass
class Writer:
    """A transactional producer on one principal's Kafka credentials, signing with `key` (or
    not at all); each write is a transaction of its own, and says where its record went."""

    secured: SecureBroker
    prefix: str
    principal: str
    key: SigningKey | None
    delivered: list[tuple[str, int, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        ids = {"client": "jobledger-cli-", "runner": f"jobledger-runner-{self.prefix}"}
        config = self.secured.config(self.principal)
        self.producer = kafka.producer(
            config.pop("bootstrap.servers"), f"{ids[self.principal]}{uuid.uuid4()}",
            extra={**config, "log_level": 0, "on_delivery": self._delivered}, signer=self.key,
        )  # fmt: skip

    def _delivered(self, error: object, msg: Message) -> None:
        if error is None:
            self.delivered.append((msg.topic(), msg.partition(), msg.offset()))

    def write(self, *events: Event) -> list[tuple[str, int, int]]:
        self.delivered.clear()
        self.producer.begin_transaction()
        for event in events:
            produce_event(self.producer, self.prefix, event, SERDE)
        self.producer.commit_transaction(30)
        return list(self.delivered)

    def write_raw(self, topic: str, key: bytes, value: bytes, headers: dict) -> tuple:
        self.delivered.clear()
        self.producer.begin_transaction()
        self.producer.produce(topic, key=key, value=value, headers=headers)
        self.producer.commit_transaction(30)
        return self.delivered[0]


@dataclass
class SecuredCluster:
    secured: SecureBroker
    prefix: str
    keys: dict[str, SigningKey]
    names: dict[str, str]
    """The attackers' principals: mallory, rogue and eve, with a tag of this test's."""
    workdir: Path

    def as_(self, principal: str, key: str | None = None) -> list[str]:
        folder = self.secured.home / "secure"
        return ["--bootstrap", self.secured.bootstrap, "--topic-prefix", self.prefix,
                "-F", str(folder / f"{principal}.properties"),
                "--signing-key", str(folder / f"{key or principal}.key")]  # fmt: skip

    def writer(self, principal: str, key: str | None) -> Writer:
        signer = self.keys[key] if key else None
        return Writer(self.secured, self.prefix, principal, signer)

    def topic(self, role: TopicRole) -> str:
        return topic_name(role, self.prefix)

    def reader(self) -> Consumer:
        return Consumer({
            **self.secured.config("client"), "group.id": f"jobledger-reader-{uuid.uuid4()}",
            "isolation.level": "read_committed", "enable.auto.commit": False, "log_level": 0,
        })  # fmt: skip

    def read(self, role: TopicRole, until, limit_s: float = 60.0) -> list[Event]:
        """The events of `role`'s topic from its start until `until(events)` holds."""
        consumer, topic = self.reader(), self.topic(role)
        try:
            partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
            events: list[Event] = []
            deadline = time.monotonic() + limit_s
            while not until(events):
                assert time.monotonic() < deadline, f"{topic}: not there in {limit_s:.0f} s"
                for msg in consumer.consume(500, 0.2):
                    if msg.error() is None:
                        events.append(SERDE.decode(msg.value(), msg.topic()))
            return events
        finally:
            consumer.close()


def secured_cluster(
    secured: SecureBroker, tmp_path: Path, attackers: bool = True
) -> SecuredCluster:
    """A fresh prefix with its ACLs, and (unless told not) the attackers' keys (eve's
    revoked)."""
    prefix = f"att{uuid.uuid4().hex[:6]}."
    granted = secured.run("broker", "--secure", "--detach", "--topic-prefix", prefix)
    assert granted.returncode == 0, granted.stderr
    tag = uuid.uuid4().hex[:6]
    names = {"mallory": f"mallory-{tag}", "rogue": f"rogue-{tag}", "eve": f"eve-{tag}"}
    if not attackers:
        names = {}
    for who, role in (("mallory", "client"), ("rogue", "runner"), ("eve", "client")):
        if who in names:
            made = secured.run("keys", "new", names[who], "--role", role)
            assert made.returncode == 0, made.stderr
    if names:
        assert secured.run("keys", "revoke", names["eve"]).returncode == 0
    folder = secured.home / "secure"
    keys = {who: SigningKey.load(folder / f"{name}.key") for who, name in names.items()}
    keys |= {p: SigningKey.load(folder / f"{p}.key") for p in ("client", "runner", "services")}
    return SecuredCluster(secured, prefix, keys, names, tmp_path)


@contextlib.contextmanager
def services_on(c: SecuredCluster, *options: str) -> Iterator[None]:
    """`c`'s topics created, and `services run` on them (with `options`) checking every input
    against the keyring, for as long as the block runs."""
    secured = c.secured
    created = secured.run("topics", "create", *c.as_("admin"))
    assert created.returncode == 0, created.stderr
    log = open(c.workdir / "services.log", "wb")  # noqa: SIM115 (the child keeps it)
    services = subprocess.Popen(
        [sys.executable, "-m", "jobledger.cli", "services", "run", *c.as_("services"),
         "--keyring", str(secured.home / "secure" / "keyring.json"), *options],
        stdout=log, stderr=log, env=secured_env(secured),
    )  # fmt: skip
    try:
        yield
    finally:
        services.terminate()
        try:
            services.wait(60)
        except subprocess.TimeoutExpired:
            services.kill()


def secured_env(secured: SecureBroker) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "JOBLEDGER_BOOTSTRAP"}
    env["JOBLEDGER_HOME"] = str(secured.home)
    return env


def dead_letters(c: SecuredCluster, positions: dict[str, tuple]) -> dict[str, str]:
    """The reason each record at `positions` (attack -> (topic, partition, offset)) was
    dead-lettered for, once the services have dead-lettered them all."""
    wanted = {where: attack for attack, where in positions.items()}

    def judged(events: list[Event]) -> bool:
        found = {(e.source_topic, e.source_partition, e.source_offset) for e in events
                 if isinstance(e, DeadLettered)}  # fmt: skip
        return set(wanted) <= found

    letters = c.read(TopicRole.DEAD_LETTER, judged)
    return {
        wanted[where]: e.reason
        for e in letters
        if (where := (e.source_topic, e.source_partition, e.source_offset)) in wanted
    }


def start_victim_job(
    c: SecuredCluster, client: Writer, name: str = "victim"
) -> tuple[JobSubmitted, list[TaskDeploymentRequested]]:
    """A job of two subtasks submitted by `client`, once both are deployed and accepted
    (a TaskExecutor with two free slots must be registered), and its deployments."""
    job = new_event(JobSubmitted, "cli", job_id=uuid.uuid4().hex, job_name=name,
                    vertices=[vertex("v", 2)])  # fmt: skip
    client.write(*submission(job, "cli"))

    def deployed(events: list[Event]) -> bool:
        return sum(isinstance(e, TaskSubmissionAccepted) and e.job_id == job.job_id
                   for e in events) == 2  # fmt: skip

    events = c.read(TopicRole.TASK_EXECUTOR, deployed)
    return job, [e for e in events
                 if isinstance(e, TaskDeploymentRequested) and e.job_id == job.job_id]  # fmt: skip
