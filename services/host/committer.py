"""Committing what the transaction loop derived: one transaction per batch of a partition.

Apart from the loop (`transaction_loop.py`), which owns the partitions, polls, admits and
reduces: this is what happens to a batch once reduced. The decisions, the input offsets and,
when due, a snapshot go out in one transaction (`transactions.PartitionCommit`); a
transaction that fails short of fatal leaves its producer behind and the partition goes back
to its last commit; a producer stuck in librdkafka's #5511 gets every partition a new one;
inputs that derived nothing are committed when they have waited long enough, and a partition
gone quiet is snapshotted once its snapshot is due. The loop calls it per batch and per step.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from jobledger.schemas import topic_name

from .. import kafka
from . import gc_policy, snapshot, snapshot_fork
from .errors import ServiceHalted
from .metrics import ServiceMetrics
from .partition_worker import PartitionWorker
from .poison import Poison, Quarantines, exception_line, infrastructure, one_line, record_specific
from .rebuild import Rebuilder
from .runtime_config import RuntimeConfig
from .transactions import (
    SEND_OFFSETS_TIMEOUT_S,
    Encoded,
    PartitionCommit,
    TransactionWriter,
    Wedged,
    retire,
)

if TYPE_CHECKING:
    from confluent_kafka import Producer

log = logging.getLogger("jobledger.runtime")


class Committer:
    """Commits the owned partitions' batches with their producers. `workers` is the loop's
    own map of owned partitions: a partition that goes back to its last commit is replaced
    in it by its rebuilt worker."""

    def __init__(
        self, prefix: str, config: RuntimeConfig, writer: TransactionWriter, consumer: Consumer,
        rebuilder: Rebuilder, metrics: ServiceMetrics | None,
        workers: dict[tuple[str, int], PartitionWorker], quarantines: Quarantines,
    ) -> None:  # fmt: skip
        self.prefix = prefix
        self.config = config
        self.writer = writer
        self.consumer = consumer
        self.rebuilder = rebuilder
        self.metrics = metrics
        self.workers = workers
        self.quarantines = quarantines
        self.forks = snapshot_fork.ForkedSnapshots(
            config.snapshot_fork_bytes, snapshot_fork.deadline_s(config.snapshot_interval_s)
        )
        """The child encoding a large partition's snapshot off the loop, if one is."""
        self._abandoned: list[Producer] = []
        """Producers left behind with a thread stuck inside (never closed under it)."""

    def poison(self, worker: PartitionWorker, offset: int, poison: Poison) -> None:
        """Dead-letter input `offset` when it is read again, and go back to the last commit:
        the state must be what it was without it."""
        self.quarantines.poison(worker, offset, poison)
        self.restore(worker)

    def commit(
        self, worker: PartitionWorker, outputs: list[Encoded], giving_up: bool = False
    ) -> bool:
        """One transaction: the decisions, the input offsets and, when due, a snapshot;
        `giving_up` for a partition being given up (its next owner starts over). False if it
        did not commit: the worker went back to its last commit (unless given up)."""
        topic = topic_name(worker.role, self.prefix)
        records: list[tuple[bytes, bytes]] = []
        fork = False
        finished = self.forks.take(worker)
        if worker.snapshot_forced or worker.snapshot_in_loop:
            self.forks.drop(worker)  # this snapshot is newer than the child's
        elif finished is not None:
            records = self.chunks(worker, topic, finished.next_offset, finished.data)
            log.info("%s/%d: writing the snapshot at offset %d a child encoded (%d bytes)",
                     worker.role.value, worker.partition, finished.next_offset,
                     len(finished.data))  # fmt: skip
        if not records and self.snapshot_due(worker):
            fork = self.forks.wanted(worker) and not (
                self.forks.busy() or giving_up or worker.snapshot_forced
                or worker.snapshot_in_loop
            )  # fmt: skip
            if not fork:
                try:
                    records = self.snapshot(worker, topic)
                except Exception as exc:
                    if infrastructure(exc):
                        raise
                    if not giving_up:
                        self.snapshot_refused(worker, exc)
                    return False
        unit = PartitionCommit(
            outputs, TopicPartition(topic, worker.partition, worker.next_offset), records
        )
        if not self.transaction(worker, unit, restore=not giving_up, giving_up=giving_up):
            return False
        worker.uncommitted_since = None
        worker.awaited = False
        worker.committed_offset = worker.next_offset
        self.quarantines.of(worker).committed(worker.next_offset)
        if fork:  # the child's image is the state exactly at the offset just committed
            self.forks.start(worker)
            self.snapshot_taken(worker)
        return True

    def snapshot_refused(self, worker: PartitionWorker, exc: Exception) -> None:
        """The state no longer encodes as a snapshot: poison the first input since the last
        snapshot after which it does not (found by reducing them again, encoding after each)."""
        topic = topic_name(worker.role, self.prefix)
        poisoned = self.quarantines.of(worker).poisoned
        found = self.rebuilder.first_unencodable(topic, worker.partition, worker.next_offset,
                                                 set(poisoned))  # fmt: skip
        if found is None:
            raise ServiceHalted(
                f"{worker.role.value}/{worker.partition}: its state does not encode as a "
                f"snapshot ({exception_line(exc)}), yet no input since the last snapshot makes "
                "it so when reduced again: the reducers are not deterministic. Report it with "
                "the log (`jobledger export`)"
            ) from exc
        offset, cause = found
        self.poison(worker, offset, Poison("raised", one_line(
            f"the snapshot after it raised {type(cause).__name__}: {cause}"
        )))  # fmt: skip

    def transaction(
        self, worker: PartitionWorker, unit: PartitionCommit, *, restore: bool,
        giving_up: bool = False,
    ) -> bool:  # fmt: skip
        """Commit `unit` with the worker's producer. If it fails short of fatal (a timeout, a
        lost coordinator, a full queue, a stuck call), the producer is never used again and,
        unless the partition is being given up, a new one takes its place: making it fences
        the old one and aborts its open transaction. librdkafka lacks KIP-890 (Kafka's
        hardened transactions): a producer whose commit or abort did not complete in time may
        still deliver them late, into its next transaction (Jepsen saw aborted reads, lost
        writes and torn transactions of that kind), while a fenced one cannot. With
        `restore`, the worker then goes back to its last committed offset: its reducers have
        seen inputs whose decisions were just thrown away, and going on from there would lose
        them. A refusal of what the transaction holds narrows it to the input it is refused
        for (`Quarantines.refused_for_an_input`). A fatal error (fenced: another instance owns the
        partition now) is raised."""
        producer = worker.producer
        started = time.monotonic()
        try:
            self.writer.commit(producer, worker.partition, unit)
            worker.committed_at = time.monotonic()
            if self.metrics is not None:
                role = worker.role.value
                self.metrics.commit_seconds.labels(role).observe(worker.committed_at - started)
                self.metrics.decisions.labels(role).inc(sum(r.decision for r in unit.decisions))
            return True
        except Wedged:
            log.error("%s/%d: the transaction's offsets were not sent within %.0f s (librdkafka "
                      "is stuck; see its issue #5511); leaving that producer behind%s",
                      worker.role.value, worker.partition,
                      SEND_OFFSETS_TIMEOUT_S + self.config.client_grace_s,
                      "" if giving_up else " and fencing it with a new one")  # fmt: skip
            self._abandoned.append(producer)  # a thread is still inside: never closed under it
            if not giving_up:
                self.renew_producers(worker)
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() == KafkaError.INVALID_TIMESTAMP:
                what = f"{worker.role.value}/{worker.partition}'s transaction"
                raise ServiceHalted(kafka.clock_skew(error, what)) from exc
            if error.fatal():
                raise ServiceHalted(
                    f"{worker.role.value}/{worker.partition}: the broker refused this "
                    f"instance's transactions for good ({error.str()}). Another instance "
                    "has taken the partition over (its producer fenced this one): two services "
                    "on the same partitions, or this one stalled past its session timeout. "
                    "This instance stops; the other goes on. Start it again to rejoin the group."
                ) from exc
            if record_specific(error) and restore and unit.offset is not None:
                self.quarantines.refused_for_an_input(worker, error)
            else:
                log.warning("%s/%d: transaction failed (%s); %s", worker.role.value,
                            worker.partition, error.str(),
                            "left to the next owner" if giving_up
                            else "its producer is replaced")  # fmt: skip
            retire(producer)
        if not giving_up:  # when giving the partition up, a new producer would fence the next owner
            worker.producer = self.writer.producer(
                topic_name(worker.role, self.prefix), worker.partition
            )
            if restore:
                log.warning("%s/%d: going back to the committed offset", worker.role.value,
                            worker.partition)  # fmt: skip
                self.restore(worker)
        return False

    def renew_producers(self, stuck: PartitionWorker) -> None:
        """Give every other owned partition a new producer as well (none is inside a
        transaction: they run one at a time). In librdkafka's issue #5511, a producer keeps a
        group coordinator that left the cluster in its cache, and its next
        `send_offsets_to_transaction` blocks the same way: the partitions wedged one after
        another, 20 s apiece (a rolling restart stalled the services 31-39 s). A new producer
        looks the coordinator up afresh; making it fences the old one, which had nothing
        open."""
        others = [w for w in self.workers.values() if w is not stuck]
        if not others:
            return
        keys = [(topic_name(w.role, self.prefix), w.partition) for w in others]
        for other, producer in zip(others, self.writer.producers(keys), strict=True):
            retire(other.producer)
            other.producer = producer
        log.warning("gave the %d other partitions new producers too (librdkafka #5511)",
                    len(others))  # fmt: skip

    def restore(self, worker: PartitionWorker) -> None:
        """Rebuild the worker from its committed offset and fetch again from there."""
        topic = topic_name(worker.role, self.prefix)
        committed = self.consumer.committed([TopicPartition(topic, worker.partition)], 30)[0]
        self.workers[(topic, worker.partition)] = self.rebuilder.rebuild(committed, worker.producer)
        gc_policy.rebuilt()
        start = committed.offset if committed.offset >= 0 else OFFSET_BEGINNING
        self.consumer.seek(TopicPartition(topic, worker.partition, start))

    def commit_idle(self, older_than_s: float) -> None:
        """Commit the offsets of inputs that derived nothing, once they wait long enough."""
        now = time.monotonic()
        for worker in list(self.workers.values()):
            since = worker.uncommitted_since
            if since is not None and now - since >= older_than_s:
                self.commit(worker, [])

    def snapshot_quiet(self) -> None:
        """Snapshot the partitions whose snapshot came due while no input arrived: a due
        snapshot was looked for only as an input was processed, so a partition that went
        quiet kept its last inputs uncovered for good, and a retention (services/host/
        retention.py) deleting them left every later restart rebuilding without them."""
        self.forks.poll(list(self.workers.values()))
        for worker in list(self.workers.values()):
            if self.forks.ready(worker) or (
                (worker.since_snapshot or worker.snapshot_in_loop) and self.snapshot_due(worker)
            ):
                self.commit(worker, [])

    def snapshot_due(self, worker: PartitionWorker) -> bool:
        every, interval = self.config.snapshot_every, self.config.snapshot_interval_s
        if worker.snapshot_forced or worker.snapshot_in_loop:
            return True
        if not worker.since_snapshot:
            return False
        if self.forks.wanted(worker) and self.forks.busy() and not self.overdue(worker):
            return False  # a large state waits for another's child to end: one at a time
        return bool(
            (every and worker.since_snapshot >= every)
            or (interval and time.monotonic() - worker.last_snapshot >= interval)
        )

    def overdue(self, worker: PartitionWorker) -> bool:
        """Whether `worker`'s snapshot has waited a child's deadline past its interval for
        another's child to end: it is encoded in the loop then, so one is written within
        the interval retention counts on (services/host/retention.py)."""
        interval = self.config.snapshot_interval_s
        waited = time.monotonic() - worker.last_snapshot
        return bool(interval) and waited >= interval + self.forks.deadline_s

    def snapshot(self, worker: PartitionWorker, topic: str) -> list[tuple[bytes, bytes]]:
        """The worker's state as snapshot records, encoded here; the count starts again (a
        transaction that fails rebuilds the worker, and its count with it)."""
        data = snapshot.encode(snapshot.Snapshot(worker.driver, worker.next_offset))
        self.snapshot_taken(worker)
        worker.snapshot_forced = False
        worker.snapshot_in_loop = False
        return self.chunks(worker, topic, worker.next_offset, data)

    @staticmethod
    def snapshot_taken(worker: PartitionWorker) -> None:
        """The next snapshot is due an interval (or `snapshot_every` inputs) from now."""
        worker.since_snapshot = 0
        worker.last_snapshot = time.monotonic()

    @staticmethod
    def chunks(
        worker: PartitionWorker, topic: str, next_offset: int, data: bytes
    ) -> list[tuple[bytes, bytes]]:
        """Snapshot `data` of the state at `next_offset` as the records that carry it."""
        worker.snapshot_bytes = len(data)
        return snapshot.chunk_records(f"{topic}/{worker.partition}", next_offset, data)
