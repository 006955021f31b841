"""One partition's transaction: what it commits as one unit, the producer that writes it
(its transactional id names the partition, so making one fences every earlier one), and the
librdkafka calls bounded where librdkafka may block for good.

The loop that decides when to commit and what to do when a commit fails is
`transaction_loop.py`; this module writes one unit and says how it went.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from confluent_kafka import KafkaError, KafkaException, Message, Producer, TopicPartition

from jobledger.schemas import Event, EventSerde, topic_name

from .. import kafka
from .errors import ServiceHalted, StopRequested
from .poison import record_specific

log = logging.getLogger("jobledger.runtime")

SEND_OFFSETS_TIMEOUT_S = 15
INIT_TIMEOUT_S = 30
"""One try at `init_transactions`; a timed-out one is tried again (librdkafka allows it)."""


class Wedged(Exception):
    """A librdkafka call on a producer did not return in time; the producer is left behind
    (a thread is still inside it) and the partition gets a new one."""


class Encoded(NamedTuple):
    """An event as its record: encoded where it is derived, so an event that cannot be
    encoded names the input that derived it (`poison.py`), and encoded once."""

    topic: str
    key: bytes
    value: bytes
    type_name: str
    decision: bool
    """It names a cause (a reducer's decision, not a dead letter or a timer)."""


@dataclass(frozen=True)
class PartitionCommit:
    """What one transaction of a partition commits, all or nothing: a reader with
    `read_committed` sees the decisions exactly once, and the consumer group's offset moves
    past the inputs that derived them in the same commit."""

    decisions: list[Encoded]
    offset: TopicPartition | None
    """The partition's next input offset, for the consumer group (None: the clock's
    transaction, which read no input)."""
    snapshot: list[tuple[bytes, bytes]] = field(default_factory=list)
    """The partition's state as snapshot records (key, value) when one is due, else none."""


@dataclass
class TransactionWriter:
    """Makes the partitions' producers and writes `PartitionCommit`s through them."""

    bootstrap: str
    prefix: str
    serde: EventSerde
    group_metadata: Callable[[], Any]
    """The consumer group's metadata, sent with the offsets (it fences a zombie consumer)."""
    snapshot_topic: str
    snapshot_partition: Callable[[int], int]
    running: Callable[[], bool]
    client_grace_s: float
    signer: Any = kafka.PROCESS_KEY
    """The key that signs the decisions (`kafka.producer`'s `signer`)."""

    def producer(self, topic: str, partition: int) -> Producer:
        """The partition's producer: its transactional id names the partition, so making it
        fences every earlier producer of the partition (another owner's, or a failed one).
        A broker that does not answer in time is waited for, said once a minute; a refusal
        for good stops the service in one line."""
        made = kafka.producer(self.bootstrap, f"jobledger-{topic}-{partition}", init=False,
                              signer=self.signer)  # fmt: skip
        said = 0.0
        while True:
            try:
                made.init_transactions(INIT_TIMEOUT_S)
                return made
            except KafkaException as exc:
                error = exc.args[0]
                if error.fatal() or not error.retriable():
                    raise ServiceHalted(
                        f"{topic}/{partition}: the broker refused this instance's "
                        f"transactions ({error.str()}); the service stops. Check the broker "
                        "(`jobledger broker --status`) and the transactional id's ACLs, then "
                        "start it again"
                    ) from exc
                if not self.running():
                    raise StopRequested(f"stopped while {topic}/{partition} waited for the "
                                        f"broker ({error.str()})") from exc  # fmt: skip
                if time.monotonic() - said >= 60:
                    said = time.monotonic()
                    log.error("%s/%d: the broker did not start this partition's transactions "
                              "within %.0f s (%s); trying again until it does",
                              topic, partition, INIT_TIMEOUT_S, error.str())  # fmt: skip

    def producers(self, keys: list[tuple[str, int]]) -> list[Producer]:
        """`producer` of each (topic, partition), side by side: each init waits on the
        broker's fencing."""
        with ThreadPoolExecutor(max(1, len(keys))) as pool:
            return list(pool.map(lambda key: self.producer(*key), keys))

    def commit(self, producer: Producer, partition: int, unit: PartitionCommit) -> None:
        """Write `unit` in one transaction of `producer` (the producer of input partition
        `partition`); raises what the broker or librdkafka raised, or `Wedged`. A record
        the broker refused for what it is (`poison.record_specific`) is raised as that
        refusal, whichever call failed first: the transaction's later calls fail only with
        librdkafka's "erroneous state"."""
        refusals: list[KafkaError] = []

        def delivered(error: KafkaError | None, _msg: Message) -> None:
            if error is not None and record_specific(error):
                refusals.append(error)

        try:
            producer.begin_transaction()
            for record in unit.decisions:
                self.produce(producer, record, delivered)
            if unit.offset is not None:
                self._send_offsets(producer, unit.offset)
            for key, value in unit.snapshot:
                producer.produce(
                    self.snapshot_topic, key=key, value=value,
                    partition=self.snapshot_partition(partition), on_delivery=delivered,
                )  # fmt: skip
            _commit_transaction(producer)
        except KafkaException as exc:
            error = exc.args[0]
            if record_specific(error) or not (
                error.txn_requires_abort() or error.code() == KafkaError._STATE
            ):
                raise
            producer.poll(0)  # the delivery reports of the records refused, if any
            if refusals:
                raise KafkaException(refusals[0]) from exc
            raise

    def produce(
        self, producer: Producer, record: Encoded,
        on_delivery: Callable[[KafkaError | None, Message], None],
    ) -> None:  # fmt: skip
        kafka.produce_encoded(producer, record.topic, record.key, record.value,
                              record.type_name, on_delivery)  # fmt: skip

    def encode(self, event: Event) -> Encoded:
        """`event` as the record `commit` writes (`kafka.produce_event`'s topic, key and value)."""
        role, key = event.route()
        topic = topic_name(role, self.prefix)
        return Encoded(topic, key.encode(), self.serde.encode(event, topic), event.type_name(),
                       event.cause_event_id is not None)  # fmt: skip

    def _send_offsets(self, producer: Producer, offset: TopicPartition) -> None:
        """`send_offsets_to_transaction`, bounded. librdkafka can block in it past its own
        timeout, for good, when the group coordinator went away (a broker restart;
        librdkafka issues #5456 and #5511, open in 2.16): the call is made in a thread of its
        own, and one that does not return in time leaves its producer behind as `Wedged`."""
        done = threading.Event()
        failure: list[BaseException] = []
        metadata = self.group_metadata()

        def call() -> None:
            try:
                producer.send_offsets_to_transaction([offset], metadata, SEND_OFFSETS_TIMEOUT_S)
            except BaseException as exc:  # handed to the caller's thread
                failure.append(exc)
            finally:
                done.set()

        threading.Thread(target=call, name="send-offsets", daemon=True).start()
        if not done.wait(SEND_OFFSETS_TIMEOUT_S + self.client_grace_s):
            raise Wedged("send_offsets_to_transaction did not return")
        if failure:
            raise failure[0]


def retire(producer: Producer) -> None:
    """Drop a producer whose transaction failed; another fences it (this instance's next
    producer of the partition, or the next owner's). Its queue is purged now, and it is
    closed in a thread of its own (closing waits on the broker)."""
    with contextlib.suppress(KafkaException, RuntimeError):
        producer.purge()
    threading.Thread(target=_close_quietly, args=(producer,), name="retire", daemon=True).start()


def _close_quietly(producer: Producer) -> None:
    with contextlib.suppress(KafkaException, RuntimeError):
        producer.close()


def _commit_transaction(producer: Producer, attempts: int = 3) -> None:
    """Commit; a retriable error means the outcome is not known yet, and librdkafka's
    contract is to call commit again until it is, or the error is no longer retriable."""
    for attempt in range(attempts):
        try:
            producer.commit_transaction(60)
            return
        except KafkaException as exc:
            if not exc.args[0].retriable() or attempt == attempts - 1:
                raise
