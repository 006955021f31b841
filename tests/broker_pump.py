"""Feeds a real broker's topics through the ReducerDriver and writes the decisions back, until
nothing new arrives: enough of a runtime to test reducers over Kafka (the real service
runtime, with snapshots and exactly-once offsets, is its own issue)."""

from __future__ import annotations

import time

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from jobledger.schemas import Event, EventSerde, topic_name
from jobledger.schemas.topics import TopicRole
from jobledger.services.control.driver import ReducerDriver
from jobledger.services.kafka import (
    partitions_of,
    read_committed_consumer,
    transactional_producer,
)

ROLES = (TopicRole.JOB, TopicRole.RESOURCE_MANAGER, TopicRole.TASK_EXECUTOR)


class BrokerPump:
    def __init__(self, bootstrap: str, prefix: str, driver: ReducerDriver) -> None:
        self.prefix = prefix
        self.driver = driver
        self.serde = EventSerde()
        self.producer = transactional_producer(bootstrap, "pump")
        self.consumer = read_committed_consumer(bootstrap)
        self.partitions = [
            (topic_name(role, prefix), p)
            for role in ROLES
            for p in partitions_of(self.consumer, topic_name(role, prefix))
        ]
        self.consumer.assign([TopicPartition(t, p, -2) for t, p in self.partitions])
        self.at_end: set[tuple[str, int]] = set()
        self.log: list[Event] = []
        self.written: list[Event] = []

    def append(self, events: list[Event]) -> None:
        """Write events in one transaction; the partitions they land in are not at end."""
        delivered: list[tuple[str, int]] = []

        def on_delivery(err, msg) -> None:
            if err is not None:
                raise KafkaException(err)
            delivered.append((msg.topic(), msg.partition()))

        self.producer.begin_transaction()
        for event in events:
            role, key = event.route()
            topic = topic_name(role, self.prefix)
            self.producer.produce(
                topic, key=key.encode(), value=self.serde.encode(event, topic),
                on_delivery=on_delivery,
            )  # fmt: skip
        self.producer.commit_transaction(30)
        self.written.extend(events)
        self.at_end -= set(delivered)

    def run_until_quiet(self, limit_s: float = 90) -> None:
        """Consume, reduce, write back, until every partition is read to its end."""
        deadline = time.monotonic() + limit_s
        while len(self.at_end) < len(self.partitions):
            if time.monotonic() > deadline:
                raise TimeoutError(f"not quiet after {limit_s} s: {len(self.log)} events")
            derived: list[Event] = []
            for msg in self.consumer.consume(500, 0.2):
                tp = (msg.topic(), msg.partition())
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        self.at_end.add(tp)
                        continue
                    raise KafkaException(msg.error())
                self.at_end.discard(tp)
                event = self.serde.decode(msg.value(), msg.topic())
                self.log.append(event)
                derived.extend(self.driver.process(event))
            if derived:
                self.append(derived)

    def close(self) -> None:
        self.consumer.close()
        del self.producer
