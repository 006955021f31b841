"""Apache Kafka in a container, where a Docker daemon answers: the same round trip as the
local broker gets, against the containerized one. Skips cleanly without Docker."""

from __future__ import annotations

import json

import pytest

from jobledger.schemas import EventSerde, event_from_json, topic_name
from jobledger.schemas.topics import TopicRole
from jobledger.services.client.produce import produce_lines
from jobledger.services.kafka import read_committed_consumer, transactional_producer
from jobledger.services.kafka_reads import read_topic
from jobledger.services.kafka_topics import create_topics

from ..conftest import docker_daemon_answers

pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(not docker_daemon_answers(), reason="no Docker daemon answers here"),
]

EVENT = {
    "type": "TaskManagerLost", "event_id": "lost-1", "event_time": 1, "producer": "test",
    "cause_event_id": None, "resource_id": "tm-9", "cause": "heartbeat timeout",
}  # fmt: skip


def test_round_trip_over_apache_kafka_in_a_container():
    from testcontainers.kafka import KafkaContainer

    with KafkaContainer() as kafka:
        bootstrap = kafka.get_bootstrap_server()
        assert all(r.created for r in create_topics(bootstrap, "tc.", partitions=2))
        serde = EventSerde()
        producer = transactional_producer(bootstrap, "test")
        assert produce_lines([json.dumps(EVENT)], producer, serde, "tc.").written == 1
        topic = topic_name(TopicRole.RESOURCE_MANAGER, "tc.")
        consumer = read_committed_consumer(bootstrap)
        [msg] = list(read_topic(consumer, topic, from_beginning=True, stop_at_end=True))
        consumer.close()
        assert serde.decode(msg.value(), topic) == event_from_json(json.dumps(EVENT))
