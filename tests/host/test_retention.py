"""Retention and archives without a broker: which retention the snapshots make
safe, what a restart needs of each partition, a closed job's story and its archive in an
fsspec location, the debugging answers an archive gives, and the verification of a log whose
beginning is deleted, from snapshots."""

from __future__ import annotations

import json
import uuid

import pytest

from jobledger.cli.main import main
from jobledger.projections.log import archive
from jobledger.projections.log.log_file import LogRecord, read_export, write_export
from jobledger.projections.log.replay import replay, verify
from jobledger.projections.log.retained import DeletedBeforeSnapshot, resumed
from jobledger.schemas.cluster import TaskManagerRegistered
from jobledger.schemas.jobs import JobStatusChanged
from jobledger.schemas.topics import TopicRole
from jobledger.schemas.types import JobStatus
from jobledger.services.host import retention, snapshot

from ..support.events import profile
from ..support.golden_logs import LOGS, as_log
from ..support.jobs import JOB, JobCluster, vertex


def test_a_retention_is_read_with_its_unit_and_refused_below_twice_the_snapshot_interval():
    assert [retention.duration_ms(t) for t in ("-1", "500", "500ms", "30s", "10m", "7d")] == [
        -1, 500, 500, 30_000, 600_000, 604_800_000,
    ]  # fmt: skip
    with pytest.raises(ValueError, match="no duration"):
        retention.duration_ms("a week")
    assert retention.retention_refusal(-1, 60) is None
    assert retention.retention_refusal(120_000, 60) is None
    assert retention.retention_refusal(119_999, 60) == (
        "a retention of 119999 ms is shorter than the 120000 ms the snapshots guarantee (2 x the "
        "60 s snapshot interval): the broker could delete records no snapshot covers yet, and a "
        "restart would rebuild without them"
    )
    assert "snapshot by input count alone" in retention.retention_refusal(86_400_000, 0)


def test_a_restart_needs_the_records_after_the_snapshot_the_committed_offset_reached():
    assert retention.oldest_needed(40, 52) == (40, "after snapshot@40")
    assert retention.oldest_needed(None, 52)[0] == 0
    assert retention.oldest_needed(60, 52) == (
        0, "snapshot@60 is past the committed offset: a restart replays all",
    )  # fmt: skip
    row = retention.PartitionRetention("t", 0, 3000, 41, 60, 40, "after snapshot@40")
    assert not row.lost, "the offset after the snapshot's may be its transaction's marker"
    assert retention.PartitionRetention("t", 0, 3000, 42, 60, 40, "").lost
    assert not retention.within_held(0, 1), "from the beginning, no marker comes first"


def closed_job_log() -> list[LogRecord]:
    """A job of two subtasks run to FINISHED, and a TaskExecutor it never used."""
    cluster = JobCluster(task_executors=1, slots=2)
    cluster.submit([vertex("work", 2)])
    cluster.play()
    idle = cluster.clock(TaskManagerRegistered, resource_id="tm-idle", address="x:1",
                         number_of_slots=1, resource_profile=profile(1.0, 1024))  # fmt: skip
    cluster.run([idle])
    return as_log(cluster.log)


POINT = ("as_of", "as-of", "now")
"""Where in the log an answer is given (the whole log's end, or the story's last record)."""


def without_point(answer: object) -> object:
    """An answer without the point of the log it is as of, at any depth: what an archived
    job's answer shares with the log's is everything else."""
    if isinstance(answer, dict):
        return {k: without_point(v) for k, v in answer.items() if k not in POINT}
    if isinstance(answer, list):
        return [without_point(v) for v in answer]
    return answer


def test_a_closed_jobs_story_is_its_records_and_those_they_rest_on():
    log = closed_job_log()
    assert archive.closed_jobs(log) == [JOB]
    story = archive.story(log, JOB)
    ids = {r.event.event_id for r in story}
    job_topic = [r for r in log if r.role is TopicRole.JOB and r.event.route()[1] == JOB]
    assert set(map(id, job_topic)) <= set(map(id, story)), "every input of its JobMaster"
    causes = {r.event.cause_event_id for r in story} - {None}
    assert causes <= ids, "every cause of a record of the story is in it"
    assert not any(getattr(r.event, "resource_id", None) == "tm-idle" for r in story)
    assert story == [r for r in log if r.event.event_id in ids], "in log order"


def test_an_archive_in_an_fsspec_location_answers_and_verifies_as_the_log(
    tmp_path, monkeypatch, capsys
):
    log = closed_job_log()
    whole = tmp_path / "whole.avro"
    with whole.open("wb") as out:
        write_export(log, out)
    monkeypatch.setenv("JOBLEDGER_HOME", str(tmp_path / "home"))
    location = f"memory://archive-{uuid.uuid4().hex[:8]}"
    assert main(["archive", "--file", str(whole), "--to", location]) == 0
    url = f"{location}/{JOB}.avro"
    assert capsys.readouterr().out == f"{JOB}\t{len(archive.story(log, JOB))} records\t{url}\n"
    assert main(["archive", "list", "--to", location]) == 0
    assert capsys.readouterr().out == f"{JOB}\t{url}\n"
    local = archive.local_copy(url, tmp_path / "cache")
    assert list(read_export(local)) == archive.story(log, JOB)
    assert archive.archived_job(local) == JOB and archive.archived_job(whole) is None

    def answer(*argv: str) -> object:
        assert main([*argv, "-o", "json"]) == 0
        return without_point(json.loads(capsys.readouterr().out))

    for argv in (["history", JOB], ["timeline", JOB], ["job", "show", JOB],
                 ["explain", f"{JOB}/work[1]"]):  # fmt: skip
        assert answer(*argv, "--archive", location) == answer(*argv, "--file", str(whole)), argv
    assert main(["replay", "--verify", "--archive", url]) == 0
    said = capsys.readouterr().out
    assert said.startswith(f"the archive of job {JOB}: its JobMaster's decisions re-derived")
    assert "no difference" in said
    assert main(["history", "other-job", "--archive", location]) == 1
    assert "no such archive file" in capsys.readouterr().err


def test_an_archive_whose_job_master_decided_otherwise_is_a_divergence():
    story = archive.story(closed_job_log(), JOB)
    whole = lambda r: r.role is TopicRole.JOB and r.event.route()[1] == JOB  # noqa: E731
    matched, divergence = verify(story, whole=whole)
    assert divergence is None and matched > 0
    end = next(r for r in story if isinstance(r.event, JobStatusChanged)
               and r.event.to_status is JobStatus.FINISHED)  # fmt: skip
    forged = LogRecord(end.role, end.partition, end.offset, end.timestamp,
                       end.event.model_copy(update={"to_status": JobStatus.FAILED}))  # fmt: skip
    _, divergence = verify([forged if r is end else r for r in story], whole=whole)
    assert divergence is not None and divergence.event_id == end.event.event_id


def snapshot_of(log: list[LogRecord], role: TopicRole, partition: int, upto: int) -> bytes:
    """The snapshot the services would have written of a partition after its records below
    `upto`."""
    before = [r for r in log if (r.role, r.partition) == (role, partition) and r.offset < upto]
    state = replay(before).partitioned.driver_of(role, partition)
    return snapshot.encode(snapshot.Snapshot(state, upto))


def test_a_log_whose_beginning_is_deleted_verifies_from_the_snapshots_that_cover_it():
    log = list(read_export(LOGS / "slot-shortage.avro"))
    job = next(r for r in log if r.role is TopicRole.JOB)
    key, prefix = (job.role, job.partition), "jobledger."
    owner = f"{prefix}{job.role.value}/{job.partition}"
    ends = [r.offset for r in log if (r.role, r.partition) == key]
    cut_at = ends[len(ends) // 2]
    held = [r for r in log if (r.role, r.partition) != key or r.offset >= cut_at]
    oldest = {key: cut_at}
    from_it = resumed(held, oldest, {owner: snapshot_of(log, *key, cut_at)}, prefix)
    matched, divergence = verify(held, resumed=from_it)
    assert divergence is None and matched > 0
    assert verify(held)[1] is not None, "without the snapshot, the cut log diverges"
    with pytest.raises(DeletedBeforeSnapshot, match="deleted its records before offset"):
        resumed(held, oldest, {owner: snapshot_of(log, *key, cut_at - 2)}, prefix)
