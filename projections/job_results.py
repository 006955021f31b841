"""Jobs as the job topic tells them, followed live: which jobs were submitted, each one's
latest status, and the result of each that reached a globally terminal status (what Flink's
`ClusterClient#requestJobResult` waits for).

Only the JobMaster's own decisions count as a job's status: a `JobStatusChanged` with its
producer and a cause. Every wait is bounded by the caller's deadline, and every poll by a
fraction of a second, so a broker that stops answering ends a wait at its deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from jobledger.schemas import DecodeError, EventSerde, topic_name
from jobledger.schemas.jobs import JobStatusChanged, JobSubmitted
from jobledger.schemas.rejections import EventRejected
from jobledger.schemas.topics import TopicRole
from jobledger.schemas.types import JobStatus
from jobledger.services.job_master import PRODUCER as JOB_MASTER
from jobledger.services.job_status import GLOBALLY_TERMINAL
from jobledger.services.kafka import consume_available, partitions_of, read_committed_consumer
from jobledger.services.partitioning import partition_of

from .log_file import LogRecord

POLL_S = 0.05


class SubmissionRefused(Exception):
    """The JobMaster refused the job's submission: the job will never run. The message is
    the JobMaster's reason."""


class JobWatcher:
    """Follows the job topic from its beginning with one consumer (assigned, so no group
    join delays it): every partition, or only those of `jobs` (their events are keyed by
    job id, so each job's story is in one partition). `serde` reads the Confluent wire format
    too when it has a schema registry."""

    def __init__(
        self,
        bootstrap: str,
        prefix: str,
        jobs: tuple[str, ...] = (),
        serde: EventSerde | None = None,
    ) -> None:
        self.serde = serde or EventSerde()
        self.submitted: dict[str, JobSubmitted] = {}
        self.latest: dict[str, JobStatusChanged] = {}
        self.ended: dict[str, LogRecord] = {}
        """Each job's globally terminal JobStatusChanged, with where it is in the log."""
        self.refused: dict[str, str] = {}
        """Why the JobMaster refused a job's (first) submission, for each job it refused."""
        # librdkafka's default 500 ms fetch wait would be most of a short job's latency
        self.consumer = read_committed_consumer(bootstrap, extra={"fetch.wait.max.ms": 10})
        topic = topic_name(TopicRole.JOB, prefix)
        try:
            every = partitions_of(self.consumer, topic)
        except LookupError:
            self.consumer.close()
            raise
        wanted = sorted({partition_of(job, len(every)) for job in jobs}) if jobs else every
        self.unread = set(wanted)
        """Partitions not yet read to the end they had when this watcher started."""
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in wanted])

    def status(self, job_id: str) -> JobStatus | None:
        """The job's latest status as its JobMaster decided it (None: none decided yet)."""
        latest = self.latest.get(job_id)
        return latest.to_status if latest else None

    def poll(self) -> None:
        """Read what has been committed since the last poll (waits at most `POLL_S`)."""
        for msg in consume_available(self.consumer, 1_000, POLL_S):
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    self.unread.discard(msg.partition())
                elif error.fatal():
                    raise KafkaException(error)
                continue
            try:
                event = self.serde.decode(msg.value(), msg.topic())
            except DecodeError:
                continue  # dead-lettered by the services; nothing a job's status is made of
            if isinstance(event, JobSubmitted):
                self.submitted.setdefault(event.job_id, event)
            elif isinstance(event, EventRejected) and event.producer == JOB_MASTER:
                submitted = self.submitted.get(event.owner_id)
                if submitted is not None and event.rejected_event_id == submitted.event_id:
                    self.refused[event.owner_id] = event.reason
            elif (
                isinstance(event, JobStatusChanged)
                and event.producer == JOB_MASTER
                and event.cause_event_id is not None
            ):
                self.latest[event.job_id] = event
                if event.to_status in GLOBALLY_TERMINAL:
                    self.ended.setdefault(
                        event.job_id,
                        LogRecord(TopicRole.JOB, msg.partition(), msg.offset(),
                                  msg.timestamp()[1], event),
                    )  # fmt: skip

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
        return self.ended[job_id].event

    def close(self) -> None:
        self.consumer.close()


def job_list(job_ids: list[str], limit: int = 20) -> str:
    """Job ids for a message: sorted, the first `limit` of them."""
    shown = sorted(job_ids)[:limit]
    more = f" and {len(job_ids) - limit} more" if len(job_ids) > limit else ""
    return (", ".join(shown) + more) if shown else "none"
