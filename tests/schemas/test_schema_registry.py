"""The Confluent wire format against a real schema registry (Apicurio Registry's
Confluent-compatible API), over Apache Kafka: a client writes through the registry, the
services read those inputs and write their decisions through it, and a reader with an empty
cache decodes everything by schema id."""

from __future__ import annotations

import json
import os
import time
import urllib.request

import pytest

from jobledger.schemas import EventSerde, topic_name
from jobledger.schemas.cluster import TaskManagerRegistered, TaskManagerRegistrationAccepted
from jobledger.schemas.topics import TopicRole
from jobledger.services.kafka import append_events, read_committed_consumer, transactional_producer
from jobledger.services.kafka_reads import read_topic

from ..support import schema_registry
from ..support.events import profile
from ..support.runtime_harness import RuntimeThread

pytestmark = pytest.mark.broker


@pytest.fixture(scope="module")
def registry_url(tmp_path_factory):
    reason = schema_registry.missing()
    if reason is not None:
        if os.environ.get("JOBLEDGER_REQUIRE_BROKER") == "1":
            pytest.fail(f"the schema registry is required here: {reason}")
        pytest.skip(reason)
    yield from schema_registry.run_registry(tmp_path_factory.mktemp("registry") / "registry.log")


def _values(cluster, role: TopicRole) -> list[bytes]:
    consumer = read_committed_consumer(cluster.bootstrap)
    try:
        topic = topic_name(role, cluster.prefix)
        return [m.value() for m in read_topic(consumer, topic, True, True)]
    finally:
        consumer.close()


def test_inputs_and_decisions_go_through_a_real_registry(cluster, registry_url):
    registered = TaskManagerRegistered(
        event_id="tm-reg", event_time=1, producer="t", resource_id="tm-r", address="a",
        number_of_slots=2, resource_profile=profile(1.0, 1024),
    )  # fmt: skip
    client = EventSerde(registry_url=registry_url)
    append_events(transactional_producer(cluster.bootstrap, "client"), cluster.prefix,
                  [registered], client)  # fmt: skip

    with RuntimeThread(cluster, registry_url=registry_url) as runtime:
        deadline = time.monotonic() + 60
        while not _values(cluster, TopicRole.TASK_EXECUTOR):
            assert runtime.failure is None, runtime.failure
            assert time.monotonic() < deadline, "the services decided nothing in 60 s"
            time.sleep(0.2)

    fresh = EventSerde(registry_url=registry_url)  # nothing cached: ids resolve at the registry
    [written] = _values(cluster, TopicRole.RESOURCE_MANAGER)
    [decision] = _values(cluster, TopicRole.TASK_EXECUTOR)
    assert written[0] == 0 and decision[0] == 0, "not the Confluent wire format"
    assert fresh.decode(written, "t") == registered
    accepted = fresh.decode(decision, "t")
    assert isinstance(accepted, TaskManagerRegistrationAccepted)
    assert (accepted.resource_id, accepted.cause_event_id) == ("tm-r", "tm-reg")
    assert _values(cluster, TopicRole.DEAD_LETTER) == []
    with urllib.request.urlopen(f"{registry_url}/subjects", timeout=10) as response:
        subjects = set(json.load(response))
    assert {"jobledger.TaskManagerRegistered", "jobledger.TaskManagerRegistrationAccepted"} <= (
        subjects
    )
