"""Rebuilding a newly owned partition: its latest snapshot plus the tail of its log up to
the committed offset, reduced before the partition processes anything new.

One decision says where a rebuild starts (`Rebuilder.read_tail`): from the latest snapshot
when there is one the committed offset has not fallen behind, else from a fresh state at the
beginning of the log. Reading is one reader, one partition after another; reducing is in
this process, or side by side on all cores when the tails are long (`parallel.run_groups`,
the replay's way).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, Producer, TopicPartition

from jobledger.schemas import Event, topic_name
from jobledger.schemas.topics import TopicRole

from .. import kafka, kafka_reads
from ..control.driver import ReducerDriver
from . import parallel, poison, snapshot
from .errors import ServiceHalted, StopRequested
from .gc_policy import bulk_replay, settled
from .partition_worker import PartitionWorker
from .retention import within_held

log = logging.getLogger("jobledger.runtime")

PARALLEL_REBUILD_RECORDS = 20_000
"""Tails shorter than this in all are reduced in the service's own process (about half a
second of reducing: less than forking and sending the states back)."""

Key = tuple[str, int]


class Refusal(NamedTuple):
    """Why no reducer may see a record: one line, and which kind of reason it is
    (`undecodable`, `misrouted`, `event_time`, `signature`, `refused`: what a dead-letter
    count is kept by)."""

    kind: str
    reason: str


Admit = Callable[[Message, ReducerDriver], tuple[Event | None, Refusal | None]]


class Tail(NamedTuple):
    """A partition to rebuild, as read: the state of its latest snapshot (a new one where
    there is none or it is refused), the offset that reflects, the committed offset, and the
    records in between (their values, and the headers that say who signed them)."""

    driver: ReducerDriver
    start: int
    end: int
    records: list[Message]
    fresh: Callable[[], ReducerDriver]
    """The state at `start` again (`driver` is reduced in place)."""


@dataclass
class Rebuilder:
    """Reads and reduces the partitions a service instance is given."""

    bootstrap: str
    group: str
    prefix: str
    roles: dict[str, TopicRole]
    driver_factory: Callable[[], ReducerDriver]
    admit: Admit
    """The event of a record, or why no reducer may see it (the live loop's own check: a
    record dead-lettered live changes nothing in a rebuild either)."""
    count_partitions: Callable[[str], int]
    running: Callable[[], bool]
    silence_s: float
    """A rebuild that hears nothing from the broker this long stops the service (it cannot
    own a partition whose log it cannot read) instead of waiting forever."""
    jobs: Callable[[], int] = field(default=parallel.default_jobs)

    def rebuild(self, committed: TopicPartition, producer: Producer) -> PartitionWorker:
        """One partition, reduced in this process."""
        started = time.monotonic()
        with bulk_replay():  # the snapshot's objects and the tail's, collected in bulk
            tail = self.read_tail(committed)
            driver = self.reduce_tail((committed.topic, committed.partition), tail)
        self._said(committed.topic, committed.partition, tail)
        return self._worker(committed, driver, producer, tail, time.monotonic() - started)

    def rebuild_all(
        self, committed: list[TopicPartition], producers: dict[Key, Producer]
    ) -> dict[Key, PartitionWorker]:
        """Every newly owned partition rebuilt: on all cores when the tails to replay are
        long and forking is safe. The tails are reduced one group of partitions per process,
        and the states come back to this process. Short tails are reduced here: sending a
        state back costs more than reducing a few thousand records."""
        jobs = self.jobs()
        started = time.monotonic()
        if len(committed) < 2 or jobs < 2 or not parallel.can_fork():
            return {_key(tp): self.rebuild(tp, producers[_key(tp)]) for tp in committed}
        read = {_key(tp): self.read_tail(tp) for tp in committed}
        if sum(len(tail.records) for tail in read.values()) < PARALLEL_REBUILD_RECORDS:
            jobs = 1

        def reduce_group(keys: list[Key]) -> dict[Key, ReducerDriver]:
            return {key: self.reduce_tail(key, read[key]) for key in keys}

        try:
            sizes = {key: len(tail.records) for key, tail in read.items()}
            drivers = parallel.run_groups(sizes, reduce_group, jobs)
        except parallel.ReplayWorkerFailed as exc:
            # a worker killed (out of memory, say) would kill it again at every start: go on
            # in this process, from tails read anew (this process's own group was reduced)
            log.error("a rebuild worker failed (%s); rebuilding in this process instead", exc)
            read = {_key(tp): self.read_tail(tp) for tp in committed}
            jobs = 1
            with bulk_replay():
                drivers = reduce_group(list(read))
        workers = {}
        for tp in committed:
            tail = read[_key(tp)]
            self._said(tp.topic, tp.partition, tail, f" (processes: {jobs})")
            workers[_key(tp)] = self._worker(
                tp, drivers[_key(tp)], producers[_key(tp)], tail, time.monotonic() - started
            )
        return workers

    def read_tail(self, committed: TopicPartition) -> Tail:
        """Where the partition's rebuild starts and the records from there to the committed
        offset: the latest snapshot if the committed offset is not behind it (a snapshot
        ahead of the committed offset was written by a transaction that did not commit its
        offsets), else a fresh state from the beginning."""
        end = max(committed.offset, 0)
        where = f"{committed.topic}[{committed.partition}]"
        with bulk_replay():
            data = self.latest_snapshot_data(committed.topic, committed.partition) if end else None
            found = snapshot.decode_or_rebuild(data, where)
            settled()  # the snapshot's objects live on: not walked again during the tail
        if found is not None and found.next_offset <= end:
            driver, start = found.driver, found.next_offset

            def fresh() -> ReducerDriver:  # decoded again, as it was once
                return snapshot.decode(data).driver

        else:
            driver, start, fresh = self.driver_factory(), 0, self.driver_factory
        if start < end:
            self._check_held(committed.topic, committed.partition, start)
        records = list(self.read_range(committed.topic, committed.partition, start, end))
        return Tail(driver, start, end, records, fresh)

    def _check_held(self, topic: str, partition: int, start: int) -> None:
        """ServiceHalted where the broker no longer holds the records from `start` on: read
        from the beginning, a rebuild would start silently at the oldest record held, and a
        state built without the deleted ones decides wrongly. Only a retention shorter than
        the snapshots guarantee (retention.py), or services stopped longer than it, does so."""
        oldest = self.reader.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)[0]
        if within_held(start, oldest):
            return
        covered = f"its latest snapshot reflects offset {start}" if start else "it has no snapshot"
        raise ServiceHalted(
            f"{topic}/{partition}: the broker deleted its records before offset {oldest} and "
            f"{covered}: the state cannot be rebuilt without them. Check the topics' retention "
            "(`jobledger topics describe`) and restore the records, or start a new cluster"
        )

    def reduce_tail(self, key: Key, tail: Tail) -> ReducerDriver:
        """The tail's state after the records of partition `key` that a reducer may see (a
        refused record was dead-lettered live, and changes nothing here either). A record
        whose reducing raises is left out, and the tail reduced again without it
        (`poison.reduce_skipping`): live, it was dead-lettered in a transaction that
        snapshotted the partition, so a tail holds one only when that snapshot is refused or
        the reducers changed since."""
        driver, skipped = poison.reduce_skipping(tail.driver, tail.fresh, tail.records, self._step)
        for index, reason in sorted(skipped.items()):
            log.error("%s/%d@%d: %s; rebuilt without it", key[0], key[1],
                      tail.records[index].offset(), reason)  # fmt: skip
        return driver

    def _step(self, driver: ReducerDriver, record: Message) -> None:
        event, _ = self.admit(record, driver)
        if event is not None:
            driver.process(event)

    def first_unencodable(
        self, topic: str, partition: int, end: int, skip: set[int]
    ) -> tuple[int, Exception] | None:
        """The first input offset below `end` (but those in `skip`) after which the
        partition's state no longer encodes as a snapshot, and what encoding it raised:
        reduced again from its latest snapshot (which encoded), encoding after each input.
        Costs a snapshot's encoding per input since the last snapshot, paid only when a
        snapshot failed."""
        tail = self.read_tail(TopicPartition(topic, partition, end))
        driver = tail.driver
        for record in tail.records:
            if record.offset() in skip:
                continue
            try:
                self._step(driver, record)
                snapshot.encode(snapshot.Snapshot(driver, record.offset() + 1))
            except Exception as exc:
                if poison.infrastructure(exc):
                    raise
                return record.offset(), exc
        return None

    def snapshot_partition(self, partition: int) -> int:
        """The snapshot topic's partition that holds input partition `partition`'s."""
        return partition % self._snapshot_partitions

    @cached_property
    def _snapshot_partitions(self) -> int:
        return self.count_partitions(topic_name(TopicRole.SNAPSHOT, self.prefix))

    def latest_snapshot_data(self, topic: str, partition: int) -> bytes | None:
        """The encoded latest snapshot of input partition `topic`/`partition`, if any."""
        key = f"{topic}/{partition}"
        snapshots = topic_name(TopicRole.SNAPSHOT, self.prefix)
        assembler = snapshot.SnapshotAssembler(key)
        for msg in self.read_range(snapshots, self.snapshot_partition(partition), 0, None):
            assembler.add(msg.key(), msg.value())
        return assembler.latest

    def read_range(
        self, topic: str, partition: int, start: int, end: int | None
    ) -> Iterator[Message]:
        """Committed records of one partition from `start` up to `end` (exclusive) or its end,
        through the one reader of the rebuilds (a new client spends half a second learning
        each topic's metadata: a rebuild that made two per partition took a second each)."""

        def silent(seconds: float) -> None:
            if not self.running():
                raise StopRequested(f"stopped while rebuilding {topic}/{partition}")
            if seconds > self.silence_s:
                raise ServiceHalted(
                    f"the broker did not answer for {self.silence_s:.0f} s while rebuilding "
                    f"{topic}/{partition} from its log; check that the broker at "
                    f"{self.bootstrap} is up, then start the service again"
                )

        if end is not None and start >= end:  # (0 would read as "from the beginning")
            return iter(())
        return kafka_reads.read_range(
            self.reader, topic, partition, start or OFFSET_BEGINNING, end, on_silence=silent
        )

    @cached_property
    def reader(self) -> Consumer:
        """The rebuilds' reader, told every topic it will read at once (a topic it first
        meets on assignment costs half a second before its first fetch)."""
        reader = kafka.read_committed_consumer(
            self.bootstrap, f"{self.group}-rebuild",
            # a start the log no longer has is an error to report, never a silent jump
            extra={"fetch.wait.max.ms": 10, "auto.offset.reset": "error"},
        )  # fmt: skip
        for topic in [*self.roles, topic_name(TopicRole.SNAPSHOT, self.prefix)]:
            reader.list_topics(topic, timeout=10)
        return reader

    def close(self) -> None:
        if "reader" in vars(self):
            self.reader.close()

    def _worker(
        self, tp: TopicPartition, driver: ReducerDriver, producer: Producer, tail: Tail,
        seconds: float,
    ) -> PartitionWorker:  # fmt: skip
        worker = PartitionWorker(self.roles[tp.topic], tp.partition, driver, producer, tail.end)
        worker.rebuild_seconds = seconds
        if tail.start:
            worker.rebuilt_from_snapshot_at = tail.start
        return worker

    @staticmethod
    def _said(topic: str, partition: int, tail: Tail, how: str = "") -> None:
        log.info(
            "rebuilt %s/%d from %s + %d records%s", topic, partition,
            f"snapshot@{tail.start}" if tail.start else "the beginning", len(tail.records), how,
        )  # fmt: skip


def _key(tp: TopicPartition) -> Key:
    return tp.topic, tp.partition
