"""A thread that follows the job and TaskExecutor topics from their start, read_committed,
for the load benchmarks (bench/load.py's Watch, bench/cluster_scale.py's Follower): each
record's type is in its header, so a follower looks at every record and decodes only the few
it wants, and the bench does not eat the CPU it measures."""

from __future__ import annotations

import threading

from confluent_kafka import OFFSET_BEGINNING, Message, TopicPartition

from jobledger.schemas import topic_name
from jobledger.schemas.topics import TopicRole
from jobledger.services.kafka import TYPE_HEADER, read_committed_consumer
from jobledger.services.kafka_topics import partitions_of


class TopicFollower:
    """Calls `seen(type_name, message)` for every record of the job and TaskExecutor topics
    (the header's type name as bytes) until `close`; an error the thread met is kept in
    `error` for the bench to raise."""

    wait_ms: int = 50
    """How long the broker may hold a fetch for more records (the follower's latency)."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        self.bootstrap, self.prefix = bootstrap, prefix
        self.error: BaseException | None = None
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def seen(self, kind: bytes | None, msg: Message) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        consumer = read_committed_consumer(
            self.bootstrap, extra={"fetch.wait.max.ms": self.wait_ms}
        )
        try:
            topics = [topic_name(role, self.prefix)
                      for role in (TopicRole.JOB, TopicRole.TASK_EXECUTOR)]  # fmt: skip
            consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING)
                             for t in topics for p in partitions_of(consumer, t)])  # fmt: skip
            while not self.stopping.is_set():
                for msg in consumer.consume(1000, 0.1):
                    if not msg.error():
                        self.seen(dict(msg.headers() or []).get(TYPE_HEADER), msg)
        except BaseException as exc:
            self.error = exc
        finally:
            consumer.close()

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(30)
