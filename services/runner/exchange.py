"""Result partitions between vertices, as Kafka topics.

Every edge (producer vertex -> consumer vertex) of a job is a topic with one partition per
consumer subtask: a record's partition is the consumer subtask it is for. A producer routes a
keyed record to the subtask owning its key group (Flink's KeyGroupRangeAssignment), any other
record round-robin over the consumer subtasks it feeds (all of them for ALL_TO_ALL, its own
share for POINTWISE). Records travel in JSON chunks keyed `<producer subtask>/<attempt>/<n>`;
at the end the producer writes an end marker with the chunk count to every partition it feeds.
A chunk written twice (an attempt re-run after a restarted query) is read once. An attempt's
chunks come before its end marker in one transaction, so a consumer that sees the marker sees
every chunk, or one was never written and never will be: that is an error at once, naming the
missing chunks, not a wait (see ONE_REQUEST_IN_FLIGHT in kafka.py for how one went missing).

Producers write in the same transaction as their FINISHED state, so a failed attempt's output
is never visible to a read_committed consumer, and a consumer reading a partition takes, per
producer subtask, the chunks of the newest attempt that wrote an end marker.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from jobledger.schemas.types import (
    DistributionPattern,
    InputGateDeploymentDescriptor,
    ResultPartitionDeploymentDescriptor,
    ResultPartitionType,
)

from ..control.execution_graph import pointwise_producers
from ..control.key_groups import assign_key_to_parallel_operator
from ..kafka import admin_client
from ..kafka_reads import read_partition
from ..kafka_topics import await_metadata, ensure_topics, replication
from .operators import Keyed

CHUNK = 500
END_HEADER = "jobledger.end"
_UNSAFE = re.compile(r"[^a-zA-Z0-9._-]")


class ResultPartitionError(RuntimeError):
    """A consumer cannot read its input: a producer's result is missing or corrupt."""


def result_topic(prefix: str, job_id: str, producer: str, consumer: str) -> str:
    name = f"{prefix}result.{job_id}.{producer}.{consumer}"
    return _UNSAFE.sub("_", name)[:249]


def job_result_prefix(prefix: str, job_id: str) -> str:
    """How every result topic of the job starts (`result_topic`)."""
    return _UNSAFE.sub("_", f"{prefix}result.{job_id}.")[:249]


def delete_result_topics(bootstrap: str, prefix: str, job_id: str) -> list[str]:
    """Delete every result topic of the job, once no attempt will read them again (the job
    ended for good: `ResultPartitionsReleased`); one already gone (another runner deleted it,
    or this one before a restart) is no error. Returns the topics deleted."""
    admin = admin_client(bootstrap)
    start = job_result_prefix(prefix, job_id)
    topics = sorted(t for t in admin.list_topics(timeout=30).topics if t.startswith(start))
    if not topics:
        return []
    deleted = []
    for topic, future in admin.delete_topics(topics, operation_timeout=30).items():
        try:
            future.result(30)
            deleted.append(topic)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise ResultPartitionError(f"cannot delete {topic}: {exc}") from exc
    return sorted(deleted)


def create_result_topics(bootstrap: str, topics: dict[str, int]) -> None:
    """Create the topics (name -> partitions) that do not exist yet, and grow those that have
    fewer partitions than asked (a job rescaled to more consumer subtasks), then wait until
    the broker serves them all."""
    admin = admin_client(bootstrap)
    try:
        factor, config = replication(admin)
        created = ensure_topics(
            admin, {t: NewTopic(t, p, factor, config=config) for t, p in topics.items()}
        )
    except Exception as exc:
        raise ResultPartitionError(f"cannot create {sorted(topics)}: {exc}") from exc
    failed = [c for c in created if c.error]
    if failed:
        raise ResultPartitionError(f"cannot create {failed[0].topic}: {failed[0].error}")
    existing = [c.topic for c in created if not c.created]
    if existing:
        _grow(admin, {t: topics[t] for t in existing})
        await_metadata(admin, topics)


def _grow(admin: AdminClient, wanted: dict[str, int]) -> None:
    listed = admin.list_topics(timeout=30).topics
    growing = [
        NewPartitions(topic, count)
        for topic, count in wanted.items()
        if topic in listed and len(listed[topic].partitions) < count
    ]
    for topic, future in admin.create_partitions(growing).items() if growing else []:
        try:
            future.result(30)
        except Exception as exc:
            code = exc.args[0].code() if exc.args and hasattr(exc.args[0], "code") else None
            if code != KafkaError.INVALID_PARTITIONS:  # another producer grew it first
                raise ResultPartitionError(f"cannot add partitions to {topic}: {exc}") from exc


def encode_record(record: Any) -> Any:
    if isinstance(record, Keyed):
        return {"k": record.key, "v": record.value}
    return {"v": record}


def decode_record(data: Any) -> Any:
    if "k" in data:
        return Keyed(data["k"], data["v"])
    return data["v"]


@dataclass
class ResultWriter:
    """Routes one producer subtask's records to the partitions of its consumers."""

    producer: Producer
    prefix: str
    job_id: str
    vertex_id: str
    subtask_index: int
    number_of_subtasks: int
    attempt_number: int
    outputs: list[ResultPartitionDeploymentDescriptor]
    buffers: dict[tuple[str, int], list[Any]] = field(default_factory=dict)
    chunks: dict[tuple[str, int], int] = field(default_factory=dict)
    sent: int = 0

    def topics(self) -> dict[str, int]:
        return {self._topic(o): o.number_of_consumer_subtasks for o in self.outputs}

    def _topic(self, output: ResultPartitionDeploymentDescriptor) -> str:
        return result_topic(self.prefix, self.job_id, self.vertex_id, output.consumer_vertex_id)

    def _targets(self, output: ResultPartitionDeploymentDescriptor) -> list[int]:
        consumers = output.number_of_consumer_subtasks
        if output.distribution_pattern is DistributionPattern.POINTWISE:
            return [
                c for c in range(consumers)
                if self.subtask_index
                in pointwise_producers(self.number_of_subtasks, consumers, c)
            ]  # fmt: skip
        return list(range(consumers))

    def write_all(self, records: Iterator[Any]) -> None:
        targets = {self._topic(o): (o, self._targets(o)) for o in self.outputs}
        for record in records:
            for topic, (output, feeds) in targets.items():
                if isinstance(record, Keyed) and output.distribution_pattern is not (
                    DistributionPattern.POINTWISE
                ):
                    target = assign_key_to_parallel_operator(
                        record.key, output.consumer_max_parallelism,
                        output.number_of_consumer_subtasks,
                    )  # fmt: skip
                else:
                    target = feeds[self.sent % len(feeds)]
                self._add(topic, target, record)
            self.sent += 1
        for topic, (_, feeds) in targets.items():
            for target in feeds:
                self._flush(topic, target)
                self.producer.produce(
                    topic, partition=target, key=self._key("end"),
                    value=str(self.chunks.get((topic, target), 0)).encode(),
                    headers={END_HEADER: b"1"},
                )  # fmt: skip

    def _key(self, chunk: int | str) -> bytes:
        return f"{self.subtask_index}/{self.attempt_number}/{chunk}".encode()

    def _add(self, topic: str, target: int, record: Any) -> None:
        buffer = self.buffers.setdefault((topic, target), [])
        buffer.append(encode_record(record))
        if len(buffer) >= CHUNK:
            self._flush(topic, target)

    def _flush(self, topic: str, target: int) -> None:
        buffer = self.buffers.pop((topic, target), [])
        if buffer:
            chunk = self.chunks.get((topic, target), 0)
            self.producer.produce(
                topic, partition=target, key=self._key(chunk), value=json.dumps(buffer).encode()
            )
            self.chunks[(topic, target)] = chunk + 1


def read_input_gate(
    bootstrap: str,
    prefix: str,
    job_id: str,
    consumer_vertex: str,
    subtask_index: int,
    attempt_number: int,
    gate: InputGateDeploymentDescriptor,
    pipelined_wait_s: float = 300.0,
) -> list[Any]:
    """Every record of this subtask's partition from the producers the gate names, each
    producer's newest complete attempt.

    A BLOCKING input was finished before this task was deployed, by whichever attempt the
    producer is at (a region failover restarts the consumer alone and keeps the producers'
    results): anything missing is an error. A PIPELINED input's producers are in the
    consumer's region, restarted with it, so they are at its attempt number or newer, and may
    still run: wait for them, up to `pipelined_wait_s`.

    Not covered: EAGER deploys a BLOCKING consumer together with its producers, so after a
    full restart a consumer that ran before its producers finished would read their previous
    attempt's result (on a first run it fails for want of one). Naming the producer attempts
    in the deployment (Flink's ResultPartitionID) would close it."""
    topic = result_topic(prefix, job_id, gate.source_vertex_id, consumer_vertex)
    waits = gate.result_partition_type is ResultPartitionType.PIPELINED
    oldest_attempt = attempt_number if waits else 0
    deadline = time.monotonic() + (pipelined_wait_s if waits else 0)
    chunks: dict[tuple[int, int], dict[int, list[Any]]] = {}
    ends: dict[tuple[int, int], int] = {}
    start = -2
    while True:
        try:
            for msg in read_partition(bootstrap, topic, subtask_index, start):
                start = msg.offset() + 1
                producer, attempt, chunk = msg.key().decode().split("/")
                origin = (int(producer), int(attempt))
                if any(k == END_HEADER for k, _ in msg.headers() or []):
                    ends[origin] = int(msg.value())
                else:
                    chunks.setdefault(origin, {})[int(chunk)] = json.loads(msg.value())
            finished = {q for q, a in ends if a >= oldest_attempt}
            missing = [p for p in gate.consumed_subtasks if p not in finished]
        except (LookupError, TimeoutError, KafkaException) as exc:
            missing, error = list(gate.consumed_subtasks), exc
        else:
            error = None
        if not missing:
            break
        if time.monotonic() >= deadline:
            raise ResultPartitionError(
                f"no finished result of {gate.source_vertex_id} subtask {missing[0]} in {topic}"
                + (f": {error}" if error else "")
            )
        time.sleep(0.1)
    records: list[Any] = []
    for producer in gate.consumed_subtasks:
        newest = (producer, max(a for p, a in ends if p == producer))
        received = chunks.get(newest, {})
        if sorted(received) != list(range(ends[newest])):
            absent = sorted(set(range(ends[newest])) - set(received))
            raise ResultPartitionError(
                f"{topic}[{subtask_index}]: {len(received)} of {ends[newest]} chunks of "
                f"subtask {producer} attempt {newest[1]}"
                + (f"; chunks {absent} are not in its committed result" if absent else "")
            )
        records.extend(decode_record(r) for n in sorted(received) for r in received[n])
    return records
