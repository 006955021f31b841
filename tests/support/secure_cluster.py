"""A secure broker for the tests (`jobledger broker --secure`, started through the CLI), one
per test session: `tests/local/test_broker_secure.py` checks what Kafka holds on it and
`tests/system/test_attacks.py` what jobledger's signatures hold."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from jobledger.schemas.topics import topic_name, topic_specs
from jobledger.services.local import apache_kafka, broker, secure
from jobledger.services.local.loopback import pid_alive
from jobledger.services.signing import Keyring, SigningKey

from .runtime_harness import wait_until_owning

PREFIX = "sec."


@dataclass
class SecureBroker:
    home: Path
    bootstrap: str
    pids: list[int]
    started: subprocess.CompletedProcess[str]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return cli(self.home, *args)

    def config(self, principal: str) -> dict[str, str]:
        """A principal's librdkafka settings, read back from its property file."""
        path = self.home / "secure" / f"{principal}.properties"
        settings = dict(line.split("=", 1) for line in path.read_text().splitlines())
        return {**settings, "bootstrap.servers": self.bootstrap}


def cli(
    home: Path, *args: str, timeout: float = 240, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "JOBLEDGER_BOOTSTRAP"}
    env.update(JOBLEDGER_HOME=str(home), JOBLEDGER_TOPIC_PREFIX=PREFIX)
    return subprocess.run(
        [sys.executable, "-m", "jobledger.cli", *args],
        input=stdin, capture_output=True, text=True, timeout=timeout, env=env,
    )  # fmt: skip


def consecutive_free_ports(n: int) -> int:
    while True:
        first = broker.free_port()
        if first + n < 65536 and all(broker.port_is_free(first + i) for i in range(n)):
            return first


def need_kafka(broker_kind: str) -> None:
    if not apache_kafka.available():
        reason = "Apache Kafka needs Java and `make kafka`"
        if broker_kind == "kafka":
            pytest.fail(f"the tests run on Apache Kafka, but the CLI cannot start it: {reason}")
        pytest.skip(reason)


def start_secure(home: Path, nodes: int) -> SecureBroker:
    first = consecutive_free_ports(nodes)
    args = ["broker", "--secure", "--detach", "--port", str(first)]
    started = cli(home, *args, *(["--nodes", str(nodes)] if nodes > 1 else []))
    assert started.returncode == 0, started.stderr
    recorded = json.loads((home / "broker.json").read_text())
    pids = [recorded["pid"], *(pid for pid, _ in recorded["others"])]
    bootstrap = ",".join(f"127.0.0.1:{first + n}" for n in range(nodes))
    return SecureBroker(home, bootstrap, pids, started)


def stop_secure(running: SecureBroker) -> None:
    stopped = running.run("broker", "--stop")
    assert stopped.stdout.startswith("stopped Apache Kafka"), stopped.stdout + stopped.stderr
    assert not any(pid_alive(pid) for pid in running.pids), "a node outlived --stop"


@pytest.fixture(scope="session")
def secured(broker_kind: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    """A secure broker started, stopped and started again on the same home, so every test
    also shows that a restart keeps the SCRAM users (formatted into the storage once), the
    certificates and the passwords, and grants the ACLs again without harm."""
    need_kafka(broker_kind)
    home = tmp_path_factory.mktemp("secure-home")
    first = start_secure(home, 1)
    passwords = {p: first.config(p)["sasl.password"] for p in secure.PRINCIPALS}
    stop_secure(first)
    running = start_secure(home, 1)
    try:
        assert {p: running.config(p)["sasl.password"] for p in secure.PRINCIPALS} == passwords
        admin = AdminClient({**running.config("admin"), "log_level": 0})
        topics = [
            NewTopic(topic_name(s.role, PREFIX), 1, 1, config=s.config) for s in topic_specs(1)
        ]
        for future in admin.create_topics(topics, operation_timeout=30).values():
            future.result()
        yield running
    finally:
        stop_secure(running)


@dataclass
class SignedRun:
    """A topic prefix of the secure broker with the services checking every input against
    the home's keyring, and two keys for a client in another language: `good`, in that
    keyring (an admin's: the client plays both a TaskExecutor and a job's submitter), and
    `wrong`, in a keyring of its own, which the services have never seen."""

    broker: SecureBroker
    prefix: str
    principal: str
    good: Path
    wrong: Path
    wrong_key_id: str

    def as_(self, principal: str) -> list[str]:
        """A jobledger command's connection as `principal`."""
        folder = self.broker.home / "secure"
        return ["--bootstrap", self.broker.bootstrap, "--topic-prefix", self.prefix,
                "-F", str(folder / f"{principal}.properties"),
                "--signing-key", str(folder / f"{principal}.key")]  # fmt: skip

    def client_args(self, key: Path) -> list[str]:
        """What `examples/java` and `examples/go` take to write as Kafka user `client` and
        sign with `key`."""
        properties = self.broker.home / "secure" / "client.properties"
        return ["--bootstrap", self.broker.bootstrap, "--prefix", self.prefix,
                "--properties", str(properties), "--signing-key", str(key)]  # fmt: skip


@contextmanager
def signed_run(broker: SecureBroker, folder: Path, principal: str) -> Iterator[SignedRun]:
    """A fresh prefix, its topics (three partitions: keys must hash as Java's client hashes
    them), `principal`'s good and wrong keys, and the services running on it until the end."""
    prefix = f"{principal}{os.getpid()}."
    granted = broker.run("broker", "--secure", "--detach", "--topic-prefix", prefix)
    assert granted.returncode == 0, granted.stderr
    secure_keyring = broker.home / "secure" / "keyring.json"
    keyring = Keyring.load(secure_keyring)
    good, wrong = SigningKey.generate(), SigningKey.generate()
    keyring.add(good, principal, "admin")
    keyring.save(secure_keyring)
    for name, key in (("good", good), ("wrong", wrong)):
        (folder / f"{name}.key").write_bytes(key.pem())
    run = SignedRun(broker, prefix, principal, folder / "good.key", folder / "wrong.key",
                    wrong.key_id)  # fmt: skip
    created = broker.run("topics", "create", "--partitions", "3", *run.as_("admin"))
    assert created.returncode == 0, created.stderr
    env = {k: v for k, v in os.environ.items() if k != "JOBLEDGER_BOOTSTRAP"}
    env["JOBLEDGER_HOME"] = str(broker.home)
    log = folder / "services.log"
    services = subprocess.Popen(
        [sys.executable, "-m", "jobledger.cli", "services", "run", "--timer-interval-ms", "0",
         *run.as_("services"), "--keyring", str(secure_keyring)],
        stdout=subprocess.DEVNULL, stderr=open(log, "w"), env=env,  # noqa: SIM115
    )  # fmt: skip
    services.log_path = str(log)  # type: ignore[attr-defined]
    try:
        wait_until_owning(services)
        yield run
    finally:
        services.terminate()
        services.wait(60)
