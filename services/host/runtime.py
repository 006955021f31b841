"""The service runtime: hosts the reducers of the partitions this instance owns, over Kafka.

Per owned input partition there is one transactional producer whose transactional id names
the partition, so whoever owned it before is fenced when a new owner starts. Each batch is
one transaction: the derived events, the dead letters, the input offsets (through the
consumer group) and now and then a snapshot commit together, so a reader with
`read_committed` sees every decision exactly once. A new owner rebuilds the state from the
latest snapshot plus the tail of the log up to the committed offset before it processes
anything new. A clock appends TimerFired events to the owned partitions for the owners whose
next deadline has come: time reaches the reducers only through the log, so replay fires every
timeout where it fired live.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from jobledger.schemas import DecodeError, Event, EventSerde, topic_name
from jobledger.schemas.deadletters import DeadLettered
from jobledger.schemas.timers import TOPIC_OF_OWNER, TimerFired
from jobledger.schemas.topics import INPUT_ROLES, TopicRole

from .. import kafka
from ..control.driver import ReducerDriver
from ..control.job_status import awaited_by_clients
from ..control.partitioning import misrouted
from ..kafka import SERVICES_GROUP_PREFIX, partitions_of
from . import snapshot
from .gc_policy import bulk_replay, settled
from .parallel import ReplayWorkerFailed, can_fork, default_jobs, run_groups
from .stop_signals import on_stop_signal

log = logging.getLogger("jobledger.runtime")


class Wedged(Exception):
    """A librdkafka call on a producer did not return in time; the producer is left behind
    (a thread is still inside it) and the partition gets a new one."""


SEND_OFFSETS_TIMEOUT_S = 15
INIT_TIMEOUT_S = 30
"""One try at `init_transactions`; a timed-out one is tried again (librdkafka allows it)."""


class StopRequested(Exception):
    """A stop was asked for while a rebuild waited on the broker: a clean stop, not a fault."""


class ServiceHalted(RuntimeError):
    """The service cannot go on without risking a wrong or lost decision; the message says
    what happened and what the operator can do. The process exits non-zero."""


OWNER_OF_ROLE = {role: kind for kind, role in TOPIC_OF_OWNER.items()}

PARALLEL_REBUILD_RECORDS = 20_000
"""Tails shorter than this in all are reduced in the service's own process (about half a
second of reducing: less than forking and sending the states back)."""


class _Tail(NamedTuple):
    """A partition to rebuild, as read: the state of its latest snapshot (a new one where
    there is none or it is refused), the offset that reflects, the committed offset, and the
    values of the records in between."""

    driver: ReducerDriver
    start: int
    end: int
    values: list[bytes]


@dataclass(frozen=True)
class RuntimeConfig:
    batch_size: int = 500
    snapshot_every: int = 10_000
    """Snapshot a partition after this many inputs since its last snapshot (0: never)..."""
    snapshot_interval_s: float = 60.0
    """...or once this long has passed with inputs since the last one (0: never)."""
    timer_interval_ms: int = 1_000
    """Look this often for owners whose deadline has come, and append a TimerFired for each
    (0: no clock)."""
    health_interval_s: float = 10.0
    idle_commit_interval_s: float = 1.0
    """Inputs that derive nothing are committed with the next transaction that has output, or
    after this long: a transaction per tiny batch of such inputs (a task's end told to its
    TaskExecutor, a heartbeat) cost more than the reducing."""
    poll_timeout_s: float = 0.1
    """How long one poll waits for the first record when there is none; it returns as soon as
    one arrives, so this bounds only how late an idle service looks at its clock."""
    stop_deadline_s: float = 15.0
    """After SIGTERM, the current transaction may finish; a process still running this long
    after the signal (blocked on a broker that does not answer) exits at once, non-zero: its
    open transaction is aborted by the broker and the next owner redoes it."""
    session_timeout_ms: int = kafka.SESSION_TIMEOUT_MS
    client_grace_s: float = 5.0
    """How long past its own timeout a librdkafka call may take before it counts as stuck."""
    rebuild_silence_s: float = 60.0
    """A rebuild that hears nothing from the broker this long stops the service (it cannot
    own a partition whose log it cannot read) instead of waiting forever."""


@dataclass
class PartitionWorker:
    """The reducers of one input partition and the producer that speaks for it."""

    role: TopicRole
    partition: int
    driver: ReducerDriver
    producer: Producer
    next_offset: int
    since_snapshot: int = 0
    processed: int = 0
    rebuilt_from_snapshot_at: int | None = None
    last_snapshot: float = field(default_factory=time.monotonic)
    uncommitted_since: float | None = None
    """When the oldest input processed but not yet committed was processed (it derived
    nothing, so redoing it after a crash changes nothing)."""
    awaited: bool = False
    """A record a client waits on (`job_status.awaited_by_clients`) was read and not yet
    committed past: commit at once, not after the idle interval."""


@dataclass
class ServiceRuntime:
    bootstrap: str
    prefix: str
    config: RuntimeConfig = field(default_factory=RuntimeConfig)
    driver_factory: Callable[[], ReducerDriver] = ReducerDriver
    workers: dict[tuple[str, int], PartitionWorker] = field(default_factory=dict)
    running: bool = True
    failure: BaseException | None = None
    """What stopped `run()` if it did not stop cleanly (a host thread reads it)."""
    registry_url: str | None = None
    """A schema registry: decisions are written in the Confluent wire format, and inputs in
    it can be read (single-object encoded inputs are read either way)."""

    def __post_init__(self) -> None:
        self.serde = EventSerde(registry_url=self.registry_url)
        self.group = f"{SERVICES_GROUP_PREFIX}{self.prefix}"
        self.consumer = kafka.read_committed_consumer(self.bootstrap, self.group, extra={
            "session.timeout.ms": self.config.session_timeout_ms,
            "heartbeat.interval.ms": min(
                kafka.HEARTBEAT_INTERVAL_MS, self.config.session_timeout_ms // 3
            ),
            "enable.partition.eof": False,
            # a rebalance moves only the partitions that change owner: the others are not
            # given up and rebuilt each time an instance comes or goes
            "partition.assignment.strategy": "cooperative-sticky",
            "fetch.wait.max.ms": 10,
            "error_cb": self._client_error,
            # a topic grown or re-created under the service is noticed within seconds
            # (the rebalance it causes meets `_check_partition_counts`), not 5 minutes
            "topic.metadata.refresh.interval.ms": 5_000,
        })  # fmt: skip
        self.roles = {topic_name(role, self.prefix): role for role in INPUT_ROLES}
        self.last_tick = time.monotonic()
        self.last_health = time.monotonic()
        self._partition_counts: dict[str, int] = {}
        """Partitions of each input topic, counted at the first assignment (where a key
        belongs depends on them) and checked again at every later one: they may never change."""
        self._broker_down_since: float | None = None
        self._deadline: threading.Timer | None = None
        """Started by the first stop signal: exits the process when it runs out."""
        self._abandoned: list[Producer] = []
        """Producers left behind with a thread stuck inside (never closed under it)."""

    # -- ownership -----------------------------------------------------------------------

    def start(self) -> None:
        self.consumer.subscribe(
            list(self.roles), on_assign=self._on_assign, on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )  # fmt: skip

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._broker_back()
        self._check_partition_counts()
        # the producers first: each fences the previous owner's and aborts its open
        # transaction, whose offsets would otherwise keep the committed offsets unstable (a
        # read_committed fetch of them waits) until the broker's transaction timeout. Each
        # init waits on the broker's fencing, so they run side by side.
        keys = [(tp.topic, tp.partition) for tp in partitions]
        producers = dict(zip(keys, self._producers(keys), strict=True))
        self.workers.update(
            self._rebuild_all(consumer.committed(partitions, timeout=30), producers)
        )
        log.info("owns %s", sorted(f"{t}/{p}" for t, p in self.workers))

    def _check_partition_counts(self) -> None:
        """Keys are placed by the partition count: one that changes under a running service
        (a topic re-created or grown) moves every key to another partition, and the state
        rebuilt from the old ones belongs to other owners. The ResourceManager is one reducer,
        so its topic has one partition."""
        try:
            counts = {topic: self._count_partitions(topic) for topic in self.roles}
        except LookupError as exc:
            raise _topic_gone(f"an input topic is gone ({exc})") from exc
        rm_topic = topic_name(TopicRole.RESOURCE_MANAGER, self.prefix)
        if counts[rm_topic] != 1:
            raise ServiceHalted(
                f"topic {rm_topic} has {counts[rm_topic]} partitions; the ResourceManager is "
                "one reducer and its topic must have exactly 1. Re-create the cluster's "
                "topics with `jobledger topics create` under a new prefix."
            )
        changed = {
            topic: (self._partition_counts[topic], n)
            for topic, n in counts.items()
            if topic in self._partition_counts and self._partition_counts[topic] != n
        }
        if changed:
            raise ServiceHalted(
                "partition counts changed under the running service ("
                + ", ".join(f"{t}: {old} -> {new}" for t, (old, new) in sorted(changed.items()))
                + "): every key now hashes to another partition than its history. Restore the "
                "topics as they were, or start over with new topics (another prefix)."
            )
        self._partition_counts = self._partition_counts or counts

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            worker = self.workers.pop((tp.topic, tp.partition), None)
            if worker is not None and worker.uncommitted_since is not None:
                with contextlib.suppress(KafkaException):  # the next owner redoes them
                    self._commit(worker, [], giving_up=True)
        log.info("gave up %s", sorted(f"{tp.topic}/{tp.partition}" for tp in partitions))

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """The group session ended (its coordinator silent past the session timeout): the
        partitions may be another's already, and a commit of their offsets would wait on that
        coordinator only to be refused. Their inputs since the last commit are the next
        owner's to redo."""
        for tp in partitions:
            self.workers.pop((tp.topic, tp.partition), None)
        log.warning("lost %s (the group session ended); rejoining",
                    sorted(f"{tp.topic}/{tp.partition}" for tp in partitions))  # fmt: skip

    def _rebuild(self, committed: TopicPartition, producer: Producer) -> PartitionWorker:
        """Latest snapshot plus the tail of the log up to the committed offset, for the
        partition's producer (made first: it fences the previous owner's)."""
        role = self.roles[committed.topic]
        if committed.offset < 0:
            return PartitionWorker(role, committed.partition, self.driver_factory(), producer, 0)
        end = committed.offset
        with bulk_replay():  # the snapshot's objects and the tail's, collected in bulk
            found = self._latest_snapshot(committed.topic, committed.partition)
            settled()
            if found is not None and found.next_offset <= end:
                driver, start = found.driver, found.next_offset
            else:
                driver, start = self.driver_factory(), 0
            worker = PartitionWorker(role, committed.partition, driver, producer, start)
            if found is not None and start:
                worker.rebuilt_from_snapshot_at = start
            for msg in self._read_range(committed.topic, committed.partition, start, end):
                event, _ = self._admit(msg, driver)
                if event is not None:
                    driver.process(event)
                worker.next_offset = msg.offset() + 1
        worker.next_offset = end
        log.info(
            "rebuilt %s/%d from %s + %d records",
            committed.topic, committed.partition,
            f"snapshot@{start}" if found and start else "the beginning", end - start,
        )  # fmt: skip
        return worker

    def _rebuild_all(
        self, committed: list[TopicPartition], producers: dict[tuple[str, int], Producer]
    ) -> dict[tuple[str, int], PartitionWorker]:
        """Every newly owned partition rebuilt, as `_rebuild` does one: on all cores when the
        tails to replay are long and forking is safe. The one reader reads each partition's
        snapshot and tail here, one after another; the tails are then reduced side by side,
        one group of partitions per process (`parallel.run_groups`, the replay's way), and
        the states come back to this process. Short tails are reduced here: sending a state
        back costs more than reducing a few thousand records."""
        jobs = default_jobs()
        if len(committed) < 2 or jobs < 2 or not can_fork():
            return {(tp.topic, tp.partition): self._rebuild(tp, producers[(tp.topic, tp.partition)])
                    for tp in committed}  # fmt: skip
        read = {(tp.topic, tp.partition): self._read_rebuild(tp) for tp in committed}
        if sum(len(tail.values) for tail in read.values()) < PARALLEL_REBUILD_RECORDS:
            jobs = 1

        def reduce_group(keys: list[tuple[str, int]]) -> dict[tuple[str, int], ReducerDriver]:
            return {key: self._reduce_tail(key, read[key].driver, read[key].values) for key in keys}

        try:
            drivers = run_groups(
                {key: len(tail.values) for key, tail in read.items()}, reduce_group, jobs
            )
        except ReplayWorkerFailed as exc:
            # a worker killed (out of memory, say) would kill it again at every start: go on
            # in this process, from tails read anew (this process's own group was reduced)
            log.error("a rebuild worker failed (%s); rebuilding in this process instead", exc)
            read = {(tp.topic, tp.partition): self._read_rebuild(tp) for tp in committed}
            jobs = 1
            with bulk_replay():
                drivers = reduce_group(list(read))
        workers = {}
        for (topic, partition), tail in read.items():
            worker = PartitionWorker(
                self.roles[topic], partition, drivers[(topic, partition)],
                producers[(topic, partition)], tail.end,
            )  # fmt: skip
            if tail.start:
                worker.rebuilt_from_snapshot_at = tail.start
            workers[(topic, partition)] = worker
            log.info(
                "rebuilt %s/%d from %s + %d records (processes: %d)", topic, partition,
                f"snapshot@{tail.start}" if tail.start else "the beginning", len(tail.values),
                jobs,
            )  # fmt: skip
        return workers

    def _read_rebuild(self, committed: TopicPartition) -> _Tail:
        """What rebuilding a partition starts from (`_Tail`)."""
        end = max(committed.offset, 0)
        with bulk_replay():
            found = self._latest_snapshot(committed.topic, committed.partition) if end else None
        if found is not None and found.next_offset <= end:
            driver, start = found.driver, found.next_offset
        else:
            driver, start = self.driver_factory(), 0
        values = [msg.value() for msg in
                  self._read_range(committed.topic, committed.partition, start, end)]  # fmt: skip
        return _Tail(driver, start, end, values)

    def _reduce_tail(
        self, key: tuple[str, int], driver: ReducerDriver, values: list[bytes]
    ) -> ReducerDriver:
        """`driver` after the records `values` of partition `key` that a reducer may see (a
        refused record was dead-lettered live, and changes nothing here either)."""
        topic, partition = key
        for value in values:
            event, _ = self._admit_value(topic, partition, value, driver)
            if event is not None:
                driver.process(event)
        return driver

    def _producers(self, keys: list[tuple[str, int]]) -> list[Producer]:
        """`_transactional_producer` of each (topic, partition), side by side: each init waits
        on the broker's fencing."""
        with ThreadPoolExecutor(max(1, len(keys))) as pool:
            return list(pool.map(lambda key: self._transactional_producer(*key), keys))

    def _transactional_producer(self, topic: str, partition: int) -> Producer:
        """The partition's producer: its transactional id names the partition, so making it
        fences every earlier producer of the partition (another owner's, or a failed one).
        A broker that does not answer in time is waited for, said once a minute; a refusal
        for good stops the service in one line."""
        made = kafka.producer(self.bootstrap, f"jobledger-{topic}-{partition}", init=False)
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
                if not self.running:
                    raise StopRequested(f"stopped while {topic}/{partition} waited for the "
                                        f"broker ({error.str()})") from exc  # fmt: skip
                if time.monotonic() - said >= 60:
                    said = time.monotonic()
                    log.error("%s/%d: the broker did not start this partition's transactions "
                              "within %.0f s (%s); trying again until it does",
                              topic, partition, INIT_TIMEOUT_S, error.str())  # fmt: skip

    def _snapshot_partition(self, partition: int) -> int:
        return partition % self._snapshot_partitions

    @cached_property
    def _snapshot_partitions(self) -> int:
        return self._count_partitions(topic_name(TopicRole.SNAPSHOT, self.prefix))

    def _latest_snapshot(self, topic: str, partition: int) -> snapshot.Snapshot | None:
        key = f"{topic}/{partition}"
        snapshots = topic_name(TopicRole.SNAPSHOT, self.prefix)
        assembler = snapshot.SnapshotAssembler(key)
        for msg in self._read_range(snapshots, self._snapshot_partition(partition), 0, None):
            assembler.add(msg.key(), msg.value())
        return snapshot.decode_or_rebuild(assembler.latest, f"{topic}[{partition}]")

    def _read_range(self, topic: str, partition: int, start: int, end: int | None):
        """Committed records of one partition from `start` up to `end` (exclusive) or its end,
        through the one reader of the runtime (a new client spends half a second learning
        each topic's metadata: a rebuild that made two per partition took a second each)."""

        def silent(seconds: float) -> None:
            if not self.running:
                raise StopRequested(f"stopped while rebuilding {topic}/{partition}")
            if seconds > self.config.rebuild_silence_s:
                raise ServiceHalted(
                    f"the broker did not answer for {self.config.rebuild_silence_s:.0f} s "
                    f"while rebuilding {topic}/{partition} from its log; check that the "
                    f"broker at {self.bootstrap} is up, then start the service again"
                )

        return kafka.read_range(
            self._reader, topic, partition, start or OFFSET_BEGINNING, end, on_silence=silent
        )

    @cached_property
    def _reader(self) -> Consumer:
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

    # -- processing ----------------------------------------------------------------------

    def _admit(self, msg: Message, driver: ReducerDriver) -> tuple[Event | None, str | None]:
        """The input's event, or why no reducer may see it (`_admit_value`)."""
        return self._admit_value(msg.topic(), msg.partition(), msg.value(), driver)

    def _admit_value(
        self, topic: str, partition: int, value: bytes | None, driver: ReducerDriver
    ) -> tuple[Event | None, str | None]:
        """The event of a record of `topic`/`partition`, or why no reducer may see it: not a
        decodable event, not where its route puts it (another topic, or a partition its key
        does not hash to), or a producer it may not claim (`ReducerDriver.refusal`)."""
        try:
            event = self.serde.decode(value, topic)
        except DecodeError as exc:
            return None, str(exc)
        reason = misrouted(
            event, self.roles[topic], partition, self._partition_counts[topic]
        ) or driver.refusal(event)
        return (None, reason) if reason else (event, None)

    def _count_partitions(self, topic: str) -> int:
        return len(partitions_of(self.consumer, topic))

    def run(self, handle_signals: bool = True) -> None:
        """Until SIGTERM/SIGINT (or `stop()`): consume, reduce, produce and commit, batch by
        batch; a signal lets the current transaction finish first."""
        if handle_signals:
            on_stop_signal(self._on_signal)
        self.start()
        try:
            while self.running:
                self.step()
            self._commit_idle(0)
        except StopRequested as exc:
            log.info("%s", exc)
        except ServiceHalted as exc:
            self.failure = exc
            log.error("%s", exc)
            raise
        except BaseException as exc:
            self.failure = exc
            log.exception("the service runtime stopped on an error")
            raise
        finally:
            self.consumer.close()
            if "_reader" in vars(self):
                self._reader.close()
            log.info("stopped")

    def stop(self, *_: object) -> None:
        self.running = False

    def _on_signal(self, signum: int) -> None:
        """Stop after the current transaction, and exit regardless once the deadline passes:
        a call blocked on an unreachable broker must not keep the process alive. Heard twice
        for one signal (`stop_signals`): the deadline counts from the first."""
        self.stop()
        if self._deadline is not None:
            return
        deadline = self.config.stop_deadline_s

        def expire() -> None:
            log.error("still running %.0f s after signal %d (the broker does not answer?); "
                      "exiting now: the open transaction is aborted and the next owner redoes "
                      "it", deadline, signum)  # fmt: skip
            logging.shutdown()
            os._exit(3)

        self._deadline = threading.Timer(deadline, expire)
        self._deadline.daemon = True
        self._deadline.start()

    def step(self) -> int:
        """One poll: process what arrived, partition by partition; tick the clock when due."""
        batches: dict[tuple[str, int], list[Message]] = {}
        for msg in kafka.consume_available(
            self.consumer, self.config.batch_size, self.config.poll_timeout_s
        ):
            if msg.error():
                self._consumer_error(msg)
                continue
            self._broker_back()
            batches.setdefault((msg.topic(), msg.partition()), []).append(msg)
        for key, messages in batches.items():
            worker = self.workers.get(key)
            if worker is not None:
                self._process(worker, messages)
        self._commit_idle(self.config.idle_commit_interval_s)
        self._tick_if_due()
        self._report_health()
        return sum(len(m) for m in batches.values())

    def _consumer_error(self, msg: Message) -> None:
        """A deleted input topic stops the service: its partitions' history is gone."""
        error = msg.error()
        code = error.code()
        if code == KafkaError._PARTITION_EOF:
            return
        self._check_session(error)
        if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC) and (
            msg.topic() in self.roles
        ):
            raise _topic_gone(f"input topic {msg.topic()} is gone ({error.str()})")
        log.warning("consumer error: %s", error)

    def _client_error(self, error: KafkaError) -> None:
        """librdkafka's client-wide errors. A lost broker is reported once, at ERROR, and the
        service waits for it: librdkafka reconnects, the group assigns the partitions again
        and their state is rebuilt from the log. Connection errors of single sockets are
        librdkafka's own to retry (it logs them)."""
        self._check_session(error)
        if error.code() == KafkaError._ALL_BROKERS_DOWN:
            if self._broker_down_since is None:
                self._broker_down_since = time.monotonic()
                # librdkafka's own text counts brokers oddly ("0/2 brokers are down")
                log.error("the broker at %s cannot be reached: every connection to it is "
                          "down. Waiting for it: the service goes on where it left off once it "
                          "is back. If it does not come back, check it (`jobledger broker "
                          "--status`)", self.bootstrap)  # fmt: skip
        elif error.code() not in (KafkaError._TRANSPORT, KafkaError._RESOLVE):
            log.warning("Kafka client error: %s", error.str())

    def _check_session(self, error: KafkaError) -> None:
        if error.code() == KafkaError.INVALID_SESSION_TIMEOUT:
            raise ServiceHalted(
                f"the broker refuses a group session of {self.config.session_timeout_ms} ms "
                "(outside its group.min/max.session.timeout.ms): pass --session-timeout-ms "
                "within them (6000 for Apache Kafka's defaults), or lower the broker's minimum"
            )

    def _broker_back(self) -> None:
        if self._broker_down_since is not None:
            log.info("the broker is back after %.0f s", time.monotonic() - self._broker_down_since)
            self._broker_down_since = None

    def _process(self, worker: PartitionWorker, messages: list[Message]) -> None:
        outputs: list[Event] = []
        for msg in messages:
            if msg.offset() < worker.next_offset:
                continue
            outputs += self._reduce(worker, msg)
            worker.next_offset = msg.offset() + 1
            worker.since_snapshot += 1
            worker.processed += 1
        if outputs or worker.awaited or self._snapshot_due(worker):
            self._commit(worker, outputs)
        elif worker.uncommitted_since is None:
            worker.uncommitted_since = time.monotonic()

    def _commit(
        self, worker: PartitionWorker, outputs: list[Event], giving_up: bool = False
    ) -> None:
        """One transaction: the decisions, the input offsets and, when due, a snapshot;
        `giving_up` for a partition being given up (its next owner starts over)."""
        topic = topic_name(worker.role, self.prefix)

        def write(producer: Producer) -> None:
            for out in outputs:
                self._produce(producer, out)
            self._send_offsets(
                producer, TopicPartition(topic, worker.partition, worker.next_offset)
            )
            if self._snapshot_due(worker):
                self._write_snapshot(worker, topic)

        if self._transaction(worker, write, restore=not giving_up, giving_up=giving_up):
            worker.uncommitted_since = None
            worker.awaited = False

    def _send_offsets(self, producer: Producer, offset: TopicPartition) -> None:
        """`send_offsets_to_transaction`, bounded. librdkafka can block in it past its own
        timeout, for good, when the group coordinator went away (a broker restart;
        librdkafka issues #5456 and #5511, open in 2.16): the call is made in a thread of its
        own, and one that does not return in time leaves its producer behind as `Wedged`."""
        done = threading.Event()
        failure: list[BaseException] = []
        metadata = self.consumer.consumer_group_metadata()

        def call() -> None:
            try:
                producer.send_offsets_to_transaction([offset], metadata, SEND_OFFSETS_TIMEOUT_S)
            except BaseException as exc:  # handed to the caller's thread
                failure.append(exc)
            finally:
                done.set()

        threading.Thread(target=call, name="send-offsets", daemon=True).start()
        if not done.wait(SEND_OFFSETS_TIMEOUT_S + self.config.client_grace_s):
            raise Wedged("send_offsets_to_transaction did not return")
        if failure:
            raise failure[0]

    def _transaction(
        self, worker: PartitionWorker, write: Callable[[Producer], None], *, restore: bool,
        giving_up: bool = False,
    ) -> bool:  # fmt: skip
        """Run one transaction of the worker's producer. If it fails short of fatal (a
        timeout, a lost coordinator, a full queue, a stuck call), the producer is never used
        again and, unless the partition is being given up, a new one takes its place: making
        it fences the old one and aborts its open transaction. librdkafka lacks KIP-890
        (Kafka's hardened transactions): a producer whose commit or abort did not complete in
        time may still deliver them late, into its next transaction (Jepsen saw aborted reads,
        lost writes and torn transactions of that kind), while a fenced one cannot. With
        `restore`, the worker then goes back to its last committed offset: its reducers have
        seen inputs whose decisions were just thrown away, and going on from there would lose
        them. A fatal error (fenced: another instance owns the partition now) is raised."""
        producer = worker.producer
        try:
            producer.begin_transaction()
            write(producer)
            _commit_transaction(producer)
            return True
        except Wedged:
            log.error("%s/%d: the transaction's offsets were not sent within %.0f s (librdkafka "
                      "is stuck; see its issue #5511); leaving that producer behind%s",
                      worker.role.value, worker.partition,
                      SEND_OFFSETS_TIMEOUT_S + self.config.client_grace_s,
                      "" if giving_up else " and fencing it with a new one")  # fmt: skip
            self._abandoned.append(producer)  # a thread is still inside: never closed under it
            if not giving_up:
                self._renew_producers(worker)
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.INVALID_TIMESTAMP:
                what = f"{worker.role.value}/{worker.partition}'s transaction"
                raise ServiceHalted(kafka.clock_skew(exc.args[0], what)) from exc
            if exc.args[0].fatal():
                raise ServiceHalted(
                    f"{worker.role.value}/{worker.partition}: the broker refused this "
                    f"instance's transactions for good ({exc.args[0].str()}). Another instance "
                    "has taken the partition over (its producer fenced this one): two services "
                    "on the same partitions, or this one stalled past its session timeout. "
                    "This instance stops; the other goes on. Start it again to rejoin the group."
                ) from exc
            log.warning("%s/%d: transaction failed (%s); %s", worker.role.value,
                        worker.partition, exc.args[0].str(),
                        "left to the next owner" if giving_up
                        else "its producer is replaced")  # fmt: skip
            _retire(producer)
        if not giving_up:  # when giving the partition up, a new producer would fence the next owner
            worker.producer = self._transactional_producer(
                topic_name(worker.role, self.prefix), worker.partition
            )
            if restore:
                log.warning("%s/%d: going back to the committed offset", worker.role.value,
                            worker.partition)  # fmt: skip
                self._restore(worker)
        return False

    def _renew_producers(self, stuck: PartitionWorker) -> None:
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
        made = self._producers([(topic_name(w.role, self.prefix), w.partition) for w in others])
        for other, producer in zip(others, made, strict=True):
            _retire(other.producer)
            other.producer = producer
        log.warning("gave the %d other partitions new producers too (librdkafka #5511)",
                    len(others))  # fmt: skip

    def _restore(self, worker: PartitionWorker) -> None:
        """Rebuild the worker from its committed offset and fetch again from there."""
        topic = topic_name(worker.role, self.prefix)
        committed = self.consumer.committed([TopicPartition(topic, worker.partition)], 30)[0]
        self.workers[(topic, worker.partition)] = self._rebuild(committed, worker.producer)
        start = committed.offset if committed.offset >= 0 else OFFSET_BEGINNING
        self.consumer.seek(TopicPartition(topic, worker.partition, start))

    def _commit_idle(self, older_than_s: float) -> None:
        """Commit the offsets of inputs that derived nothing, once they wait long enough."""
        now = time.monotonic()
        for worker in list(self.workers.values()):
            since = worker.uncommitted_since
            if since is not None and now - since >= older_than_s:
                self._commit(worker, [])

    def _reduce(self, worker: PartitionWorker, msg: Message) -> list[Event]:
        """The input's decisions, or a dead letter if no reducer may see it."""
        event, refusal = self._admit(msg, worker.driver)
        if event is None:
            return [DeadLettered(
                event_id=f"dead-{msg.topic()}-{msg.partition()}-{msg.offset()}",
                event_time=msg.timestamp()[1], producer="runtime", source_topic=msg.topic(),
                source_partition=msg.partition(), source_offset=msg.offset(),
                original_key=msg.key(), original_value=msg.value(), reason=str(refusal),
            )]  # fmt: skip
        worker.awaited |= awaited_by_clients(event)
        return worker.driver.process(event)

    def _produce(self, producer: Producer, event: Event) -> None:
        kafka.produce_event(producer, self.prefix, event, self.serde)

    def _snapshot_due(self, worker: PartitionWorker) -> bool:
        every, interval = self.config.snapshot_every, self.config.snapshot_interval_s
        if not worker.since_snapshot:
            return False
        return bool(
            (every and worker.since_snapshot >= every)
            or (interval and time.monotonic() - worker.last_snapshot >= interval)
        )

    def _write_snapshot(self, worker: PartitionWorker, topic: str) -> None:
        data = snapshot.encode(snapshot.Snapshot(worker.driver, worker.next_offset))
        owner = f"{topic}/{worker.partition}"
        for key, value in snapshot.chunk_records(owner, worker.next_offset, data):
            worker.producer.produce(
                topic_name(TopicRole.SNAPSHOT, self.prefix),
                key=key,
                value=value,
                partition=self._snapshot_partition(worker.partition),
            )
        worker.since_snapshot = 0
        worker.last_snapshot = time.monotonic()

    # -- time and health -----------------------------------------------------------------

    def _tick_if_due(self) -> None:
        interval = self.config.timer_interval_ms
        if not interval or (time.monotonic() - self.last_tick) * 1000 < interval:
            return
        self.last_tick = time.monotonic()
        now_ms = int(time.time() * 1000)
        for worker in list(self.workers.values()):
            owners = worker.driver.due_timers(worker.role, now_ms)
            if not owners:
                continue

            def write(producer: Producer, owners: list[str] = owners, role=worker.role) -> None:
                for owner in owners:
                    self._produce(producer, TimerFired(
                        event_id=uuid.uuid4().hex, event_time=now_ms, producer="clock",
                        scope=OWNER_OF_ROLE[role], owner_id=owner,
                    ))  # fmt: skip

            # nothing reduced yet (the TimerFired are reduced when read back): the next tick
            # tries again
            self._transaction(worker, write, restore=False)

    def _report_health(self) -> None:
        if time.monotonic() - self.last_health < self.config.health_interval_s:
            return
        elapsed = time.monotonic() - self.last_health
        self.last_health = time.monotonic()
        for (topic, partition), worker in sorted(self.workers.items()):
            lag = self._lag(topic, partition, worker)
            if worker.processed or lag != "0":  # an idle partition has nothing to report
                log.info(
                    "%s/%d at offset %d, lag %s, %.0f events/s", topic, partition,
                    worker.next_offset, lag, worker.processed / elapsed,
                )  # fmt: skip
            worker.processed = 0

    def _lag(self, topic: str, partition: int, worker: PartitionWorker) -> str:
        """Records behind the partition's high watermark, as the broker reports it."""
        try:
            _, high = self.consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=1
            )
        except KafkaException as exc:
            return f"unknown ({exc.args[0]})"
        return str(max(0, high - worker.next_offset))


def _topic_gone(what: str) -> ServiceHalted:
    return ServiceHalted(
        f"{what}: the decisions it held are lost. Re-create the cluster's topics (`jobledger "
        "topics create`, a new prefix for a clean start) and start the service again"
    )


def _retire(producer: Producer) -> None:
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
