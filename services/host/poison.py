"""The processing-exception rule: an input whose processing raises is dead-lettered, and its
partition goes on with the state it would have had without it.

Processing one input is reducing it (`ReducerDriver.process`), encoding the decisions it
derived, and encoding the snapshot that follows it. When any of them raises (short of an
infrastructure fault: the broker, the schema registry, memory), the input is poisoned: the
partition goes back to its last commit (snapshot + tail, as a new owner would), reads again,
and writes a `DeadLettered` with the exception in one line where it meets the input, in a
transaction that also snapshots the partition, so no rebuild reduces the input again. Its
other inputs, and the other partitions, go on. The same holds for an input the broker keeps
refusing the transaction of (a decision or dead letter over the topic's `max.message.bytes`):
a batch refused for a record-specific reason is committed again one input per transaction,
and the input refused alone is dead-lettered, without its bytes. Transient faults (a broker
down, a coordinator moving) dead-letter nothing: the transaction is tried again.

Rebuild and replay follow the same rule where an input raises there: the partition is reduced
again without it (`reduce_skipping`), so no half-applied input stays in the state. Kafka
Streams' processing exception handler (KIP-1033) has the idea; here the handler's one answer
is "dead-letter and continue", and the state is rolled back rather than kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException, Message
from confluent_kafka.schema_registry.error import SchemaRegistryError

from jobledger.schemas import topic_name
from jobledger.schemas.deadletters import DeadLettered
from jobledger.schemas.model import MAX_EVENT_BYTES

from ..control.driver import ReducerDriver
from .errors import ServiceHalted, StopRequested
from .partition_worker import PartitionWorker

log = logging.getLogger("jobledger.runtime")

REASON_CHARS = 500
"""A dead letter's reason is one line of at most this many characters: an exception's message
may carry a whole reducer's state."""
KEY_BYTES = 4096
"""A dead letter carries its record's key up to this size (keys name a job or a TaskExecutor)."""

_INFRASTRUCTURE: tuple[type[BaseException], ...] = (
    KafkaException, OSError, MemoryError, ServiceHalted, StopRequested, SchemaRegistryError,
)  # fmt: skip
with contextlib.suppress(ImportError):  # the schema registry client's transport
    import httpx

    _INFRASTRUCTURE += (httpx.HTTPError,)

RECORD_SPECIFIC = frozenset(
    {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE, KafkaError.INVALID_RECORD}
)
"""Broker refusals of what a transaction holds, not of the broker's state: trying the same
records again fails the same way."""


def infrastructure(exc: BaseException) -> bool:
    """Whether `exc` is a fault of what the service runs on (it stops or waits, and no input is
    to blame), not of the input being processed."""
    return isinstance(exc, _INFRASTRUCTURE) or not isinstance(exc, Exception)


def record_specific(error: KafkaError) -> bool:
    return error.code() in RECORD_SPECIFIC


def one_line(text: str, limit: int = REASON_CHARS) -> str:
    """`text` on one line, cut to `limit` characters (the cut said)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 14] + " ... (cut off)"


def exception_line(exc: BaseException) -> str:
    """An exception as a dead letter's reason: its type and the start of its message."""
    return one_line(f"processing it raised {type(exc).__name__}: {exc}")


@dataclass(frozen=True)
class Poison:
    """An input to dead-letter where it is read again, and why."""

    kind: str
    """`raised` (reducing it, or encoding what followed it, raised) or `transaction` (the
    broker refused its transaction): a dead-letter count's label."""
    reason: str


@dataclass
class Quarantine:
    """One partition's poisoned inputs, and how far its inputs are committed one per
    transaction to find the one a refused transaction was refused for."""

    poisoned: dict[int, Poison] = field(default_factory=dict)
    one_by_one_until: int | None = None
    """Inputs below this offset are committed one per transaction."""

    def committed(self, offset: int) -> None:
        """Forget what lies below `offset`, now committed."""
        for done in [o for o in self.poisoned if o < offset]:
            del self.poisoned[done]
        if self.one_by_one_until is not None and self.one_by_one_until <= offset:
            self.one_by_one_until = None


class Quarantines:
    """The owned partitions' quarantines, by topic and partition: kept across a partition's
    restores, dropped when it is given up (its next owner finds its poisoned inputs again)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._by_partition: dict[tuple[str, int], Quarantine] = {}

    def of(self, worker: PartitionWorker) -> Quarantine:
        key = (topic_name(worker.role, self.prefix), worker.partition)
        return self._by_partition.setdefault(key, Quarantine())

    def drop(self, topic: str, partition: int) -> None:
        self._by_partition.pop((topic, partition), None)

    def poison(self, worker: PartitionWorker, offset: int, poison: Poison) -> None:
        """Dead-letter input `offset` when it is read again (the caller then takes the
        partition back to its last commit: the state must be what it was without it)."""
        log.error("%s/%d@%d: %s; it is dead-lettered and the partition goes on without it",
                  worker.role.value, worker.partition, offset, poison.reason)  # fmt: skip
        self.of(worker).poisoned[offset] = poison

    def one_by_one(self, worker: PartitionWorker) -> bool:
        until = self.of(worker).one_by_one_until
        return until is not None and worker.next_offset <= until

    def refused_for_an_input(self, worker: PartitionWorker, error: KafkaError) -> None:
        """The broker refused the transaction for what it holds (`record_specific`): tried
        again as it was, it fails again. A transaction of several inputs is committed again
        one input per transaction; one of a single input poisons it (its dead letter leaves
        the record's bytes out). A dead letter refused even so is a topic that holds no dead
        letter: the service stops."""
        quarantine = self.of(worker)
        first, end = worker.committed_offset, worker.next_offset
        where = f"{worker.role.value}/{worker.partition}"
        if end - first > 1:
            log.error("%s: the transaction of inputs %d-%d was refused (%s); committing them one "
                      "by one to find the input it is refused for", where, first, end - 1,
                      error.str())  # fmt: skip
            quarantine.one_by_one_until = end
            return
        if end - first < 1:
            return  # no input in it (a snapshot alone): what failed is no input's
        earlier = quarantine.poisoned.get(first)
        if earlier is not None and earlier.kind == "transaction":
            raise ServiceHalted(
                f"{where}@{first}: the broker refuses even the dead letter of the input, without "
                f"its bytes ({error.str()}); check the topics' max.message.bytes (`jobledger "
                "topics create` makes them), then start the service again"
            )
        quarantine.poisoned[first] = Poison(
            "transaction", f"the broker refused its transaction: {error.name()}"
        )
        log.error("%s@%d: its transaction was refused (%s); it is dead-lettered without its "
                  "bytes and the partition goes on", where, first, error.str())  # fmt: skip


def dead_letter(msg: Message, reason: str, *, with_bytes: bool = True) -> DeadLettered:
    """The dead letter of `msg`: with its key and value where they fit, else its value's
    SHA-256 (the record is at its position); without them at all when `with_bytes` is false
    (its transaction was refused with them)."""
    key, value = msg.key(), msg.value()
    carry_value = with_bytes and len(key or b"") + len(value or b"") <= MAX_EVENT_BYTES
    return DeadLettered(
        event_id=f"dead-{msg.topic()}-{msg.partition()}-{msg.offset()}",
        event_time=msg.timestamp()[1], producer="runtime", source_topic=msg.topic(),
        source_partition=msg.partition(), source_offset=msg.offset(),
        original_key=key if with_bytes and len(key or b"") <= KEY_BYTES else None,
        original_value=value if carry_value else None,
        original_value_sha256=(
            None if carry_value or value is None else hashlib.sha256(value).hexdigest()
        ),
        reason=one_line(reason),
    )  # fmt: skip


T = TypeVar("T")


def reduce_skipping(
    driver: ReducerDriver,
    fresh: Callable[[], ReducerDriver],
    items: Sequence[T],
    step: Callable[[ReducerDriver, T], object],
) -> tuple[ReducerDriver, dict[int, str]]:
    """The state `items` lead to from `driver`, each reduced by `step`. Where one raises (short
    of an infrastructure fault), all are reduced again from `fresh()` (the state `driver` was
    before) without it: what it applied before raising must not stay. Returns the state and the
    indexes left out, with why."""
    skipped: dict[int, str] = {}
    while True:
        index = -1
        try:
            for index, item in enumerate(items):
                if index not in skipped:
                    step(driver, item)
            return driver, skipped
        except Exception as exc:
            if infrastructure(exc):
                raise
            skipped[index] = exception_line(exc)
            driver = fresh()
