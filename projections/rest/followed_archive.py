"""The archive at the end of a log that keeps growing, advanced by the records read since it
was last asked for, never replayed from the beginning: `jobledger ui` on a live cluster gets
new records every few seconds (heartbeats, if nothing else), and each refresh of its
dashboard replayed the whole log again (20 s on a million records).

Each input record reaches its partition's reducers as it does live: unless the services'
admission refuses it (misrouted, or a forgery in a reducer's name: `ReducerDriver.refusal`),
which is what they dead-letter. A task state report counts unless the JobMaster refuses it
when it reduces it (the refusal derived then, not read later from the log). So the followed
archive is the archive a replay of the same records gives (tests/rest/test_followed_archive.py).
"""

from __future__ import annotations

from collections.abc import Callable

from jobledger.schemas.rejections import EventRejected
from jobledger.schemas.topics import INPUT_ROLES, TopicRole
from jobledger.services.control.driver import PartitionedDriver, ReducerDriver
from jobledger.services.control.partitioning import misrouted

from ..log.log_file import LogRecord
from ..log.positions import Cut
from ..log.writers import Writers
from .archived_execution_graph import ArchivedJob, ClusterArchive, take


class FollowedArchive:
    """The reducers' state and the jobs' times at the end of the records given so far."""

    def __init__(
        self, factory: Callable[[], ReducerDriver], partitions: dict[TopicRole, int],
        writers: Writers | None = None,
    ) -> None:  # fmt: skip
        self.partitioned = PartitionedDriver(factory)
        self.writers = writers or Writers()
        """Who wrote each record taken."""
        self.partitions = partitions
        """How many partitions each input topic has (where its records belong)."""
        self.times: dict[str, ArchivedJob] = {}
        self.applied = 0
        self.now = -1

    def extend(self, records: list[LogRecord]) -> None:
        """Take the records read since those taken so far (`applied` of them)."""
        for record in records:
            self._take(record)
        self.applied += len(records)

    def _take(self, record: LogRecord) -> None:
        self.now = max(self.now, record.timestamp)
        refused: dict[str, str] = {}
        admitted = record.role not in INPUT_ROLES or not self._refusal(record)
        if record.role in INPUT_ROLES and admitted:
            for decision in self.partitioned.process(record.role, record.partition, record.event):
                if isinstance(decision, EventRejected):
                    refused[decision.rejected_event_id] = decision.reason
        job_id = getattr(record.event, "job_id", None)
        if job_id:
            job = self.times.setdefault(job_id, ArchivedJob(job_id, None, None, -1))
            take(job, record, refused, self.writers.of(record), admitted)

    def _refusal(self, record: LogRecord) -> str | None:
        """Why the services refuse the record (runtime's admission), or None."""
        drivers = self.partitioned.drivers
        key = (record.role, record.partition)
        driver = drivers.get(key) or drivers.setdefault(key, self.partitioned.factory())
        count = self.partitions.get(record.role, 0)
        return misrouted(record.event, record.role, record.partition, count) or driver.refusal(
            record.event
        )

    def archive(self, upto: Cut) -> ClusterArchive:
        """The archive of the records taken so far (`upto`: the cut they make)."""
        driver = self.partitioned.merged()
        jobs = {}
        for job_id, master in sorted(driver.job_masters.items()):
            job = self.times.setdefault(job_id, ArchivedJob(job_id, None, None, -1))
            job.held_by(master)
            jobs[job_id] = job
        return ClusterArchive(upto, driver, jobs, self.now)
