"""Fixtures: a real Kafka broker and per-test topic namespaces.

The broker is, in order: `JOBLEDGER_BOOTSTRAP` (any external Kafka); else the kind named by
`JOBLEDGER_TEST_BROKER` (`kafka`: Apache Kafka from Maven Central's jars, `docker`:
testcontainers' Kafka), started once for the whole session; else Apache Kafka where Java and
its jars are here, testcontainers where a Docker daemon answers. Where none can run, broker
tests skip, unless `JOBLEDGER_REQUIRE_BROKER=1` (CI) makes that a failure.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

from jobledger.services.kafka import BOOTSTRAP_ENV
from jobledger.services.kafka_topics import create_topics
from jobledger.services.local import apache_kafka, broker

from .support.secure_cluster import secured  # noqa: F401 (a session fixture two test modules share)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TEST_BROKER_ENV = "JOBLEDGER_TEST_BROKER"


def docker_daemon_answers() -> bool:
    try:
        import docker

        return bool(docker.from_env(timeout=3).ping())
    except Exception:
        return False


def _no_broker(reason: str) -> None:
    if os.environ.get("JOBLEDGER_REQUIRE_BROKER") == "1":
        pytest.fail(f"a broker is required here but none can run: {reason}")
    pytest.skip(reason)


def test_broker_kind() -> str:
    """Which broker this session's tests run on (`external` for `JOBLEDGER_BOOTSTRAP`)."""
    if os.environ.get(BOOTSTRAP_ENV):
        return "external"
    chosen = os.environ.get(TEST_BROKER_ENV)
    if chosen:
        return chosen
    if apache_kafka.available() or not docker_daemon_answers():
        return "kafka"  # where it cannot run, its fixture says why
    return "docker"


test_broker_kind.__test__ = False  # a helper, not a test


BROKER_FIXTURES = frozenset({"kafka_bootstrap", "broker_kind", "secured"})
"""The fixtures every broker test reaches, directly or through `cluster` and the like."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `broker` every test that asks for a broker, whatever room it is shelved in, so
    `pytest -m "not broker"` runs the pure tests of every folder and no module has to
    remember the marker."""
    for item in items:
        if BROKER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.broker)


@pytest.fixture(scope="session")
def broker_kind() -> str:
    return test_broker_kind()


@pytest.fixture(scope="session")
def kafka_bootstrap(broker_kind: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if broker_kind == "external":
        yield os.environ[BOOTSTRAP_ENV]
        return
    if broker_kind == "docker":
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer() as container:
            yield container.get_bootstrap_server()
        return
    if broker_kind != "kafka":
        pytest.fail(f"{TEST_BROKER_ENV}={broker_kind!r}: expected kafka or docker")
    port = broker.free_port()
    try:
        proc = broker.spawn(port, tmp_path_factory.mktemp("broker"), detach=False)
    except broker.BrokerError as exc:
        _no_broker(str(exc))
    try:
        yield f"{broker.LOOPBACK}:{port}"
    finally:
        broker.stop_child(proc)


@dataclass(frozen=True)
class Cluster:
    """A broker plus a topic prefix of this test's own, with every topic created."""

    bootstrap: str
    prefix: str

    def env(self, home: str) -> dict[str, str]:
        """Environment for a `jobledger` subprocess aimed at this cluster."""
        return {
            **os.environ,
            "JOBLEDGER_BOOTSTRAP": self.bootstrap,
            "JOBLEDGER_TOPIC_PREFIX": self.prefix,
            "JOBLEDGER_HOME": home,
        }


def new_cluster(bootstrap: str) -> Cluster:
    prefix = f"test-{uuid.uuid4().hex[:10]}."
    results = create_topics(bootstrap, prefix, partitions=3)
    assert all(r.created for r in results), results
    return Cluster(bootstrap, prefix)


@pytest.fixture
def cluster(kafka_bootstrap: str) -> Cluster:
    return new_cluster(kafka_bootstrap)


@pytest.fixture(scope="module")
def module_cluster(kafka_bootstrap: str) -> Cluster:
    """One cluster shared by a module's tests that only read what a fixture wrote."""
    return new_cluster(kafka_bootstrap)


@pytest.fixture(scope="session")
def broker_aborts_dangling_transactions(kafka_bootstrap: str, broker_kind: str) -> bool:
    """Whether a transaction left open by a killed producer stays invisible once a new
    producer with its transactional id starts. Apache Kafka does: tests that depend on it run
    strictly there, never skipped; an external broker is probed."""
    if broker_kind in ("kafka", "docker"):
        return True
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from jobledger.services.kafka import read_committed_consumer
    from jobledger.services.kafka_reads import read_topic

    from .support.processes import leave_transaction_open

    topic = f"probe-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result()
    txn = f"probe-{uuid.uuid4().hex}"
    leave_transaction_open(kafka_bootstrap, topic, txn)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": txn})
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce(topic, value=b"committed")
    producer.commit_transaction(30)
    consumer = read_committed_consumer(kafka_bootstrap)
    values = [m.value() for m in read_topic(consumer, topic, True, True)]
    consumer.close()
    return values == [b"committed"]


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local Spark for the whole run: its JVM takes ~10 s to start on a small machine."""
    pytest.importorskip("pyspark")
    from jobledger.services.runner.session import spark_session

    session = spark_session("local[2]")
    yield session
    session.stop()
