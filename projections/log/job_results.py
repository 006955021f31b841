"""Jobs as the job topic tells them, followed live: which jobs were submitted, each one's
latest status, and the result of each that reached a globally terminal status (what Flink's
`ClusterClient#requestJobResult` waits for).

Only the JobMaster's own decisions count as a job's status: a `JobStatusChanged` with its
producer and a cause. Any Kafka client can write such a record, so an end (or a refusal) is
believed only once the services have read it back and not dead-lettered it: they check every
record in the JobMaster's name against what it derived, and commit their offset past a
record in the transaction that writes its dead letter, if any. Every wait is bounded by the
caller's deadline, and every poll by a fraction of a second, so a broker that stops answering
ends a wait at its deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import OffsetSpec

from jobledger.schemas import DecodeError, Event, EventSerde, topic_name
from jobledger.schemas.deadletters import DeadLettered
from jobledger.schemas.jobs import JobStatusChanged, JobSubmitted
from jobledger.schemas.rejections import EventRejected
from jobledger.schemas.topics import TopicRole
from jobledger.schemas.types import JobStatus
from jobledger.services.control.driver import OWN_PRODUCERS
from jobledger.services.control.job_master import PRODUCER as JOB_MASTER
from jobledger.services.control.job_status import GLOBALLY_TERMINAL
from jobledger.services.control.partitioning import partition_of
from jobledger.services.kafka import SERVICES_GROUP_PREFIX, admin_client, read_committed_consumer
from jobledger.services.kafka_reads import consume_available
from jobledger.services.kafka_topics import partitions_of

from .log_file import LogRecord
from .replay import position

POLL_S = 0.05
JOB_PRODUCERS = OWN_PRODUCERS[TopicRole.JOB]
"""Who refuses inputs on the job topic: the JobMaster and its SlotPool."""
MOVING = frozenset({
    KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE, KafkaError.REQUEST_TIMED_OUT, KafkaError._TRANSPORT,
    KafkaError._TIMED_OUT,
})  # fmt: skip
"""What a broker answers while a leader or a coordinator moves to another broker."""
JUDGING_POLL_S = 0.005
JUDGING_QUICK_POLLS = 20
"""A watcher that has read an end (or a refusal) the services have not judged yet waits
`JUDGING_POLL_S` at its first `JUDGING_QUICK_POLLS` polls: their commit past it, which wakes
no poll (it writes no record), follows a few tens of milliseconds later, and a client polling
at `POLL_S` noticed it up to 50 ms late (half of a no-op job's last hop, `bench/e2e.py`). After
those, each wait is twice the one before, up to `POLL_S`: a judgement that does not come (the
services down) costs some quick admin requests, then the usual rate."""


class SubmissionRefused(Exception):
    """The JobMaster refused the job's submission: the job will never run. The message is
    the JobMaster's reason."""


class JobWatcher:
    """Follows the job topic from its beginning with one consumer (assigned, so no group
    join delays it): every partition, or only those of `jobs` (their events are keyed by
    job id, so each job's story is in one partition), and the dead-letter partition that
    holds the job topic's dead letters. `serde` reads the Confluent wire format too when it
    has a schema registry."""

    def __init__(
        self,
        bootstrap: str,
        prefix: str,
        jobs: tuple[str, ...] = (),
        serde: EventSerde | None = None,
    ) -> None:
        self.serde = serde or EventSerde()
        self.submitted: dict[str, JobSubmitted] = {}
        self.statuses: dict[str, list[LogRecord]] = {}
        """Each job's JobStatusChanged records in the JobMaster's name, in order."""
        self.ended: dict[str, LogRecord] = {}
        """Each job's globally terminal JobStatusChanged, with where it is in the log."""
        self.refused: dict[str, str] = {}
        """Why the JobMaster refused a job's (first) submission, for each job it refused."""
        self.forged: dict[str, list[str]] = {}
        """Per job, the ends and refusals in the JobMaster's name that the services
        dead-lettered, each with where it is and why."""
        self._claims: list[LogRecord] = []
        """Ends and refusals read but not yet judged by the services."""
        self._unjudged_polls = 0
        """Polls made since the oldest claim pending was read (`JUDGING_POLL_S`)."""
        self._dead: dict[tuple[int, int], str] = {}
        """The job topic's dead-lettered records: (partition, offset) -> the reason."""
        # librdkafka's default 500 ms fetch wait would be most of a short job's latency
        self.consumer = read_committed_consumer(bootstrap, extra={"fetch.wait.max.ms": 10})
        self.admin = admin_client(bootstrap)
        self.group = f"{SERVICES_GROUP_PREFIX}{prefix}"
        self.topic = topic_name(TopicRole.JOB, prefix)
        dead_letters = topic_name(TopicRole.DEAD_LETTER, prefix)
        try:
            every = partitions_of(self.consumer, self.topic)
            held = partitions_of(self.consumer, dead_letters)
        except LookupError:
            self.close()
            raise
        wanted = sorted({partition_of(job, len(every)) for job in jobs}) if jobs else every
        self.dead_letters = TopicPartition(dead_letters, partition_of(self.topic, len(held)))
        self.unread = {(self.topic, p) for p in wanted} | {self._key(self.dead_letters)}
        """Partitions not yet read to the end they had when this watcher started (or, for
        the dead letters, since the services last judged a claim)."""
        self.consumer.assign(
            [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in wanted]
            + [TopicPartition(self.dead_letters.topic, self.dead_letters.partition,
                              OFFSET_BEGINNING)]
        )  # fmt: skip
        self._dead_letters_next = 0

    @staticmethod
    def _key(tp: TopicPartition) -> tuple[str, int]:
        """A partition as `unread` holds it (TopicPartition's equality counts the offset)."""
        return tp.topic, tp.partition

    def status(self, job_id: str) -> JobStatus | None:
        """The job's latest status as its JobMaster decided it, passing over the records
        the services have dead-lettered so far (None: none decided yet)."""
        decided = (r.event for r in reversed(self.statuses.get(job_id, []))
                   if (r.partition, r.offset) not in self._dead)  # fmt: skip
        latest = next(decided, None)
        return latest.to_status if isinstance(latest, JobStatusChanged) else None

    def poll(self) -> None:
        """Read what has been committed since the last poll: waits at most `POLL_S` for it,
        less while a claim waits for the services' judgement (`JUDGING_POLL_S`)."""
        if self._claims:
            doublings = max(0, self._unjudged_polls + 1 - JUDGING_QUICK_POLLS)
            wait = min(POLL_S, JUDGING_POLL_S * 2**doublings)
            self._unjudged_polls += wait < POLL_S
        else:
            wait, self._unjudged_polls = POLL_S, 0
        for msg in consume_available(self.consumer, 1_000, wait):
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    self.unread.discard((msg.topic(), msg.partition()))
                elif error.fatal():
                    raise KafkaException(error)
                continue
            try:
                event = self.serde.decode(msg.value(), msg.topic())
            except DecodeError:
                continue  # dead-lettered by the services; nothing a job's status is made of
            if msg.topic() != self.topic:
                self._dead_letters_next = msg.offset() + 1
                if isinstance(event, DeadLettered) and event.source_topic == self.topic:
                    self._dead[(event.source_partition, event.source_offset)] = event.reason
            elif isinstance(event, JobSubmitted):
                self.submitted.setdefault(event.job_id, event)
            elif isinstance(event, EventRejected) and event.producer in JOB_PRODUCERS:
                self._claims.append(_record(msg, event))
            elif (
                isinstance(event, JobStatusChanged)
                and event.producer == JOB_MASTER
                and event.cause_event_id is not None
            ):
                record = _record(msg, event)
                self.statuses.setdefault(event.job_id, []).append(record)
                if event.to_status in GLOBALLY_TERMINAL:
                    self._claims.append(record)

    def judge(self, timeout_s: float, check_alive: Callable[[], None] = lambda: None) -> None:
        """Settle the claims the services have read: believed unless dead-lettered.

        The services commit their offset past a record in the transaction that writes its
        dead letter, if any, but the transaction's markers reach the offsets topic and the
        dead-letter partition in no set order. So once the commit is seen, the dead letters
        are read up to the end they had then (which holds any dead letter of that
        transaction) as soon as that end is stable. Bounded by `timeout_s`; `check_alive`
        raises to stop sooner."""
        if not self._claims:
            return
        deadline = time.monotonic() + timeout_s
        committed = self._committed({c.partition for c in self._claims}, deadline)
        read = [c for c in self._claims if c.offset < committed.get(c.partition, -1)]
        if not read:
            return
        written = self._end(IsolationLevel.READ_UNCOMMITTED, deadline)
        while (stable := self._end(IsolationLevel.READ_COMMITTED, deadline)) < written:
            check_alive()
            self._before(deadline)
            self.poll()
        if self._dead_letters_next < stable:  # maybe unread ones, maybe transaction markers
            # a seek to where the reading is would not report the end again: assign anew
            self.consumer.incremental_unassign([self.dead_letters])
            self.consumer.incremental_assign([TopicPartition(
                self.dead_letters.topic, self.dead_letters.partition, self._dead_letters_next
            )])  # fmt: skip
            self.unread.add(self._key(self.dead_letters))
        while self._key(self.dead_letters) in self.unread:
            check_alive()
            self._before(deadline)
            self.poll()
        self._claims = [c for c in self._claims if c not in read]
        for claim in read:
            self._settle(claim)

    def _committed(self, partitions: set[int], deadline: float) -> dict[int, int]:
        """The services' committed offsets of the job topic's `partitions` (stable ones:
        the broker holds back an offset of a transaction still open)."""
        asked = ConsumerGroupTopicPartitions(
            self.group, [TopicPartition(self.topic, p) for p in sorted(partitions)]
        )
        answer = self._answer(
            lambda: self.admin.list_consumer_group_offsets([asked], require_stable=True)[
                self.group
            ],
            deadline,
        )
        return {tp.partition: tp.offset for tp in answer.topic_partitions if tp.offset >= 0}

    def _end(self, isolation: IsolationLevel, deadline: float) -> int:
        """The dead-letter partition's end: everything written (READ_UNCOMMITTED) or its
        last stable offset (READ_COMMITTED)."""
        return self._answer(
            lambda: self.admin.list_offsets(
                {self.dead_letters: OffsetSpec.latest()}, isolation_level=isolation
            )[self.dead_letters],
            deadline,
        ).offset

    def _answer(self, ask: Callable[[], Future], deadline: float) -> Any:
        """The answer to an admin request; one refused because a leader or coordinator is
        moving (a broker of the cluster restarting or lost) is asked again until `deadline`:
        the cluster answers once it has elected another."""
        while True:
            try:
                return ask().result(timeout=self._left(deadline))
            except KafkaException as exc:
                if exc.args[0].code() not in MOVING or time.monotonic() > deadline:
                    raise
            time.sleep(POLL_S)

    def _before(self, deadline: float) -> None:
        """TimeoutError past `deadline`: the dead letters' end stayed unstable, held by a
        transaction left open (a services instance that died mid-write; the instance that
        takes its partitions over aborts it)."""
        if time.monotonic() > deadline:
            raise TimeoutError(
                "the dead-letter topic was not read to its end in time (a transaction on it is "
                "still open: a services instance that died mid-write, until another takes over)"
            )

    @staticmethod
    def _left(deadline: float) -> float:
        """Seconds to `deadline`, at least a poll's: a future's wait of 0 would never do."""
        return max(deadline - time.monotonic(), POLL_S)

    def _settle(self, claim: LogRecord) -> None:
        reason = self._dead.get((claim.partition, claim.offset))
        event = claim.event
        if reason is not None:
            job = event.job_id if isinstance(event, JobStatusChanged) else event.owner_id
            self.forged.setdefault(job, []).append(
                f"{event.type_name()} at {position(claim)}: {reason}"
            )
        elif isinstance(event, JobStatusChanged):
            self.ended.setdefault(event.job_id, claim)
        elif isinstance(event, EventRejected):
            submitted = self.submitted.get(event.owner_id)
            if submitted is not None and event.rejected_event_id == submitted.event_id:
                self.refused.setdefault(event.owner_id, event.reason)

    def catch_up(self, timeout_s: float) -> None:
        """Read every watched partition to the end it has now; TimeoutError after
        `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while self.unread:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the job topic was not read to its end within {timeout_s:.0f} s"
                )
            self.poll()
        self.judge(max(0.0, deadline - time.monotonic()))

    def wait(
        self, job_id: str, timeout_s: float, check_alive: Callable[[], None] = lambda: None
    ) -> JobStatusChanged:
        """The job's globally terminal JobStatusChanged, read as soon as it is committed;
        SubmissionRefused if the JobMaster refused the job, TimeoutError after `timeout_s`.
        `check_alive` raises to stop waiting sooner."""
        deadline = time.monotonic() + timeout_s
        while job_id not in self.ended:
            if job_id in self.refused:
                raise SubmissionRefused(self.refused[job_id])
            check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} did not end within {timeout_s:.0f} s")
            self.poll()
            self.judge(max(0.0, deadline - time.monotonic()), check_alive)
        return self.ended[job_id].event

    def close(self) -> None:
        self.consumer.close()


def _record(msg: Message, event: Event) -> LogRecord:
    """A job-topic record with where it is, for positions in messages."""
    return LogRecord(TopicRole.JOB, msg.partition(), msg.offset(), msg.timestamp()[1], event)


def job_list(job_ids: list[str], limit: int = 20) -> str:
    """Job ids for a message: sorted, the first `limit` of them."""
    shown = sorted(job_ids)[:limit]
    more = f" and {len(job_ids) - limit} more" if len(job_ids) > limit else ""
    return (", ".join(shown) + more) if shown else "none"
