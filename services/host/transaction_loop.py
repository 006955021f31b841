"""The transaction loop: hosts the reducers of the partitions this instance owns, over Kafka.

Per owned input partition there is one transactional producer whose transactional id names
the partition, so whoever owned it before is fenced when a new owner starts. Each batch is
one transaction (`transactions.PartitionCommit`): the derived events, the dead letters, the
input offsets (through the consumer group) and now and then a snapshot commit together, so a
reader with `read_committed` sees every decision exactly once. A new owner rebuilds the state
from the latest snapshot plus the tail of the log up to the committed offset before it
processes anything new (`rebuild.py`). The clock (`clock.py`) appends TimerFired events to the
owned partitions for the owners whose next deadline has come: time reaches the reducers only
through the log, so replay fires every timeout where it fired live. Given a keyring, every
input must carry a signature of it and its signer be allowed to write it (`_admit`); what
fails is dead-lettered in the same transaction, with the reason, and reaches no reducer.

An input whose processing raises (in a reducer, in encoding its decisions, in the snapshot
after it) is dead-lettered with the exception in one line, and the partition's state is
exactly what it would be had the input never been read: it is poisoned, the partition goes
back to its last commit (snapshot + tail) and dead-letters it where it reads it again, in a
transaction that snapshots the partition. An input whose transaction the broker refuses for
what it holds is found by committing the batch again one input per transaction, and
dead-lettered without its bytes. Records larger than `MAX_EVENT_BYTES` are dead-lettered
before decoding, and a dead letter too large to carry its record carries the record's digest.
Only infrastructure faults stop the service (`poison.py`). Committing a batch, and going back
to the last commit, is the `Committer`'s (`committer.py`); the poisoned inputs are kept by
`poison.Quarantines`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from jobledger.schemas import DecodeError, Event, EventSerde, roles_by_topic, topic_name
from jobledger.schemas.model import MAX_EVENT_BYTES
from jobledger.schemas.topics import INPUT_ROLES, TopicRole

from .. import kafka, kafka_reads
from ..control.driver import ReducerDriver
from ..control.event_time import ahead_refusal
from ..control.job_status import awaited_by_clients
from ..control.partitioning import misrouted
from ..kafka import SERVICES_GROUP_PREFIX
from ..kafka_topics import partitions_of
from ..signing import Keyring
from . import gc_policy
from .clock import Clock, timers_fired
from .committer import Committer
from .errors import ServiceHalted, StopRequested, topic_gone
from .health import HealthReport
from .metrics import ServiceMetrics
from .partition_worker import PartitionWorker
from .poison import Poison, Quarantines, dead_letter, exception_line, infrastructure
from .rebuild import Rebuilder, Refusal
from .runtime_config import RuntimeConfig
from .stop_signals import on_stop_signal
from .transactions import Encoded, PartitionCommit, TransactionWriter

log = logging.getLogger("jobledger.runtime")

PREFETCH_KB = 512
"""What the loop's consumer fetches ahead of what it has processed, at most (about 2,000
records of ~250 bytes, four batches): enough to keep it busy between fetches on a broker
milliseconds away, little enough that a record of a quiet partition is not queued behind
seconds of another partition's backlog."""


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
    keyring: Keyring | None = None
    """Whose signatures to accept (`signing`): with one, every input must be signed by a key
    of it and its signer allowed to write it (`control/authorizer.py`); without, anyone who
    can write a topic is believed, as on a cluster nobody else uses."""
    metrics: ServiceMetrics | None = None
    """Where the metrics go, if they are served (`services run --metrics-port`)."""
    signing_key: Any = kafka.PROCESS_KEY
    """The key that signs the services' decisions, timers and dead letters (by default the
    process's: `signing.use_signing_key`)."""

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
            # the records fetched wait in one queue, in the order fetched, whatever their
            # partition: with librdkafka's 64 MB of prefetch, a quiet partition's next record
            # waited behind every record fetched before it from a busy one (a giant job's
            # 20,000 deployments, seconds of work). A few batches' worth bounds that wait.
            "queued.max.messages.kbytes": PREFETCH_KB,
            "max.partition.fetch.bytes": PREFETCH_KB * 1024 // 4,
        })  # fmt: skip
        self.roles = roles_by_topic(self.prefix, INPUT_ROLES)
        self.clock = Clock(self.config.timer_interval_ms)
        self.health = HealthReport(self.config.health_interval_s)
        self.rebuilder = Rebuilder(
            self.bootstrap, self.group, self.prefix, self.roles, self.driver_factory,
            self._admit, self._count_partitions, lambda: self.running,
            self.config.rebuild_silence_s,
        )  # fmt: skip
        self.writer = TransactionWriter(
            self.bootstrap, self.prefix, self.serde, self.consumer.consumer_group_metadata,
            topic_name(TopicRole.SNAPSHOT, self.prefix), self.rebuilder.snapshot_partition,
            lambda: self.running, self.config.client_grace_s, self.signing_key,
        )  # fmt: skip
        self._partition_counts: dict[str, int] = {}
        """Partitions of each input topic, counted at the first assignment (where a key
        belongs depends on them) and checked again at every later one: they may never change."""
        self._broker_down_since: float | None = None
        self._deadline: threading.Timer | None = None
        """Started by the first stop signal: exits the process when it runs out."""
        self.quarantines = Quarantines(self.prefix)
        """Each owned partition's poisoned inputs (`poison.py`)."""
        self.committer = Committer(
            self.prefix, self.config, self.writer, self.consumer, self.rebuilder, self.metrics,
            self.workers, self.quarantines,
        )  # fmt: skip

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
        producers = dict(zip(keys, self.writer.producers(keys), strict=True))
        self.workers.update(
            self.rebuilder.rebuild_all(consumer.committed(partitions, timeout=30), producers)
        )
        gc_policy.rebuilt()
        log.info("owns %s", sorted(f"{t}/{p}" for t, p in self.workers))

    def _check_partition_counts(self) -> None:
        """Keys are placed by the partition count: one that changes under a running service
        (a topic re-created or grown) moves every key to another partition, and the state
        rebuilt from the old ones belongs to other owners. The ResourceManager is one reducer,
        so its topic has one partition."""
        try:
            counts = {topic: self._count_partitions(topic) for topic in self.roles}
        except LookupError as exc:
            raise topic_gone(f"an input topic is gone ({exc})") from exc
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
                    self.committer.commit(worker, [], giving_up=True)
            self.quarantines.drop(tp.topic, tp.partition)
        log.info("gave up %s", sorted(f"{tp.topic}/{tp.partition}" for tp in partitions))

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """The group session ended (its coordinator silent past the session timeout): the
        partitions may be another's already, and a commit of their offsets would wait on that
        coordinator only to be refused. Their inputs since the last commit are the next
        owner's to redo."""
        for tp in partitions:
            self.workers.pop((tp.topic, tp.partition), None)
            self.quarantines.drop(tp.topic, tp.partition)
        log.warning("lost %s (the group session ended); rejoining",
                    sorted(f"{tp.topic}/{tp.partition}" for tp in partitions))  # fmt: skip

    def _count_partitions(self, topic: str) -> int:
        return len(partitions_of(self.consumer, topic))

    # -- the loop ------------------------------------------------------------------------

    def run(self, handle_signals: bool = True) -> None:
        """Until SIGTERM/SIGINT (or `stop()`): consume, reduce, produce and commit, batch by
        batch; a signal lets the current transaction finish first."""
        if handle_signals:
            on_stop_signal(self._on_signal)
        self.start()
        try:
            while self.running:
                self.step()
            self.committer.commit_idle(0)
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
            self.committer.forks.close()
            self.consumer.close()
            self.rebuilder.close()
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
        for msg in kafka_reads.consume_available(
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
        self.committer.commit_idle(self.config.idle_commit_interval_s)
        self.committer.snapshot_quiet()
        self._tick_if_due()
        self.health.report_if_due(self.consumer, self.workers)
        if self.metrics is not None and self.metrics.wanted():
            self._answer_metrics(self.metrics)
        return sum(len(m) for m in batches.values())

    def _answer_metrics(self, metrics: ServiceMetrics) -> None:
        """Answer a scrape from the reducers, once what was processed is committed (every
        number is then what replay says at the commit). A metric that cannot be computed is
        an error to log, never a reason to stop deciding: the scrape is served the last
        answer, with its age."""
        self.committer.commit_idle(0)
        topics = {role: topic for topic, role in self.roles.items()}
        try:
            metrics.answer(self.workers.values(), self.consumer, topics, int(time.time() * 1000))
        except Exception:
            log.exception("could not compute the metrics; the last ones are served")

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
            raise topic_gone(f"input topic {msg.topic()} is gone ({error.str()})")
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

    # -- reducing ------------------------------------------------------------------------

    def _process(self, worker: PartitionWorker, messages: list[Message]) -> None:
        """Reduce what arrived and commit it; an input whose processing raises is poisoned
        (`poison.py`) and the partition goes back to its last commit to read again without
        it."""
        outputs: list[Encoded] = []
        for msg in messages:
            if msg.offset() < worker.next_offset:
                continue
            try:
                outputs += self._reduce(worker, msg)
            except Exception as exc:
                if infrastructure(exc):
                    raise
                self.committer.poison(worker, msg.offset(), Poison("raised", exception_line(exc)))
                return
            worker.next_offset = msg.offset() + 1
            worker.since_snapshot += 1
            worker.processed += 1
            if self.quarantines.one_by_one(worker):
                if not self.committer.commit(worker, outputs):
                    return
                outputs = []
        if outputs or worker.awaited or self.committer.snapshot_due(worker):
            self.committer.commit(worker, outputs)
        elif worker.uncommitted_since is None:
            worker.uncommitted_since = time.monotonic()

    def _reduce(self, worker: PartitionWorker, msg: Message) -> list[Encoded]:
        """The input's decisions, encoded, or a dead letter if no reducer may see it."""
        poison = self.quarantines.of(worker).poisoned.get(msg.offset())
        if poison is not None:
            worker.snapshot_forced = True
            refusal = Refusal(poison.kind, poison.reason)
            return [self._dead_letter(msg, refusal, with_bytes=poison.kind != "transaction")]
        event, refusal = self._admit(msg, worker.driver)
        if event is None:
            return [self._dead_letter(msg, refusal)]
        worker.awaited |= awaited_by_clients(event)
        return [self.writer.encode(decision) for decision in worker.driver.process(event)]

    def _dead_letter(self, msg: Message, refusal: Refusal, with_bytes: bool = True) -> Encoded:
        if self.metrics is not None:
            self.metrics.dead_letters.labels(refusal.kind).inc()
        return self.writer.encode(dead_letter(msg, refusal.reason, with_bytes=with_bytes))

    def _admit(self, msg: Message, driver: ReducerDriver) -> tuple[Event | None, Refusal | None]:
        """The event of an input record, or why no reducer may see it: larger than an event
        may be (`MAX_EVENT_BYTES`: what `produce` refuses, refused again where it is read),
        not a decodable event, not where its route puts it (another topic, or a partition its
        key does not hash to), or a producer it may not claim (`ReducerDriver.refusal`). With
        a keyring, also a record no key of it signed, or whose signer may not write it
        (`ReducerDriver.admit`); the owner's own decisions coming back are known by what
        they are (the owner derived them), not by a signature."""
        topic, partition = msg.topic(), msg.partition()
        size = len(msg.value() or b"")
        if size > MAX_EVENT_BYTES:
            return None, Refusal(
                "oversized", f"{size} bytes, more than the {MAX_EVENT_BYTES} an event may be"
            )
        try:
            event = self.serde.decode(msg.value(), topic)
        except DecodeError as exc:
            return None, Refusal("undecodable", str(exc))
        reason = misrouted(event, self.roles[topic], partition, self._partition_counts[topic])
        if reason is not None:
            return None, Refusal("misrouted", reason)
        ahead = ahead_refusal(
            event.event_time, msg.timestamp()[1], self.config.max_event_time_ahead_ms
        )
        if ahead is not None and not driver.awaited(event):
            return None, Refusal("event_time", ahead)
        if self.keyring is None or driver.awaited(event):
            reason = driver.refusal(event)
        else:
            signer = self.keyring.check(topic, msg.key(), msg.value(), msg.headers(),
                                        msg.timestamp()[1])  # fmt: skip
            if isinstance(signer, str):
                return None, Refusal("signature", signer)
            reason = driver.admit(event, signer.principal, signer.role, self.keyring.owners())
        return (None, Refusal("refused", reason)) if reason else (event, None)

    def _tick_if_due(self) -> None:
        now_ms = self.clock.tick()
        if now_ms is None:
            return
        for worker in list(self.workers.values()):
            fired = timers_fired(worker.driver, worker.role, now_ms)
            if fired:
                # nothing reduced yet (the TimerFired are reduced when read back): the next
                # tick tries again
                encoded = [self.writer.encode(event) for event in fired]
                self.committer.transaction(worker, PartitionCommit(encoded, None), restore=False)
