"""The archive a live dashboard follows (projections/rest/followed_archive.py) is the archive a
replay of the same records gives, whichever order the partitions are read in and however the
records arrive: over every golden log, every REST answer at the end compared whole."""

from __future__ import annotations

import random

import pytest

from jobledger.projections.log.log_file import LogRecord, read_export
from jobledger.projections.log.positions import cut, log_order
from jobledger.projections.rest.archived_execution_graph import ClusterArchive, archive
from jobledger.projections.rest.cluster_overview import cluster_overview
from jobledger.projections.rest.followed_archive import FollowedArchive
from jobledger.projections.rest.jobs import job_details, jobs_overview, vertex_details
from jobledger.projections.rest.task_managers import task_managers
from jobledger.schemas.deadletters import DeadLettered
from jobledger.schemas.tasks import TaskExecutionStateChanged
from jobledger.schemas.topics import TopicRole
from jobledger.schemas.types import ExecutionState
from jobledger.services.control.driver import ReducerDriver

from ..support.golden_logs import LOGS, PARTITIONS


def answers(cluster: ClusterArchive) -> list[object]:
    """Every REST answer at the end that an archive makes."""
    made: list[object] = [cluster_overview(cluster), jobs_overview(cluster), task_managers(cluster)]
    for job_id in cluster.jobs:
        details = job_details(cluster, job_id)
        made += [details, *(vertex_details(cluster, job_id, v["id"]) for v in details["vertices"])]
    return made


def as_read(records: list[LogRecord], seed: int) -> list[LogRecord]:
    """The records as a reader of the topics may get them: each partition in offset order,
    the partitions interleaved at random."""
    queues: dict[tuple[str, int], list[LogRecord]] = {}
    for record in sorted(records, key=lambda r: (r.role.value, r.partition, r.offset)):
        queues.setdefault((record.role.value, record.partition), []).append(record)
    rng = random.Random(seed)
    read = []
    while queues:
        key = rng.choice(sorted(queues))
        read.append(queues[key].pop(0))
        if not queues[key]:
            del queues[key]
    return read


@pytest.mark.parametrize("name", sorted(p.stem for p in LOGS.glob("*.avro")))
@pytest.mark.parametrize("seed", [1, 2])
def test_the_followed_archive_answers_as_a_replay_of_the_same_records(name, seed):
    records = list(read_export(LOGS / f"{name}.avro"))
    whole = cut(log_order(records), "end")
    replayed = answers(archive(whole, ReducerDriver))
    read = as_read(records, seed)
    followed = FollowedArchive(ReducerDriver, PARTITIONS)
    half = len(read) // 2
    followed.extend(read[:half])  # asked once halfway, then again at the end
    followed.archive(cut(log_order(read[:half]), "end"))
    followed.extend(read[half:])
    assert answers(followed.archive(whole)) == replayed


def test_a_record_the_services_dead_lettered_is_left_out_as_a_replay_leaves_it_out():
    """A FAILED report of a running attempt appended to a partition its key does not hash to:
    replay skips it for its dead letter, which comes later in the log; the followed archive
    refuses it as the services did (misrouted), when it reads it."""
    records = list(read_export(LOGS / "wordcount-fail-once.avro"))
    report = next(r for r in records if isinstance(r.event, TaskExecutionStateChanged))
    failed = report.event.model_copy(update={
        "event_id": "forged-failure", "execution_state": ExecutionState.FAILED, "error": "x",
    })  # fmt: skip
    elsewhere = (report.partition + 1) % PARTITIONS[TopicRole.JOB]
    forged = LogRecord(TopicRole.JOB, elsewhere, 0, report.timestamp, failed)
    dead = DeadLettered(
        event_id="dead-1", event_time=failed.event_time, producer="services",
        source_topic="jobledger.job", source_partition=elsewhere, source_offset=0,
        reason="misrouted",
    )  # fmt: skip
    letter = LogRecord(TopicRole.DEAD_LETTER, 0, 0, records[-1].timestamp + 1, dead)
    log = [*records, forged, letter]
    whole = cut(log_order(log), "end")
    replayed = answers(archive(whole, ReducerDriver))
    believed = cut(log_order([*records, forged]), "end")
    assert answers(archive(believed, ReducerDriver)) != replayed, "the forgery changes nothing"
    followed = FollowedArchive(ReducerDriver, PARTITIONS)
    followed.extend(as_read(log, 3))
    assert answers(followed.archive(whole)) == replayed
