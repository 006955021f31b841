"""One syntax for a point in the log: parsing, log order across partitions, cuts, and the
errors that name what exists."""

from __future__ import annotations

import pytest

from jobledger.projections.log.log_file import LogRecord
from jobledger.projections.log.positions import Position, PositionError, cut, log_order, where
from jobledger.schemas.jobs import JobCancellationRequested, JobMasterLeadershipGranted
from jobledger.schemas.topics import TopicRole

from ..support.events import Clock

JOB, RM = TopicRole.JOB, TopicRole.RESOURCE_MANAGER


@pytest.fixture
def log() -> list[LogRecord]:
    """Two job partitions and the RM's, appended interleaved (timestamps say in which order)."""
    clock = Clock()
    rows = [  # (role, partition, offset, appended at)
        (JOB, 0, 0, 10), (RM, 0, 0, 11), (JOB, 1, 0, 12), (JOB, 0, 2, 13), (JOB, 1, 1, 14),
    ]  # fmt: skip
    return [
        LogRecord(role, p, o, ts, clock(JobCancellationRequested, job_id=f"j{p}"))
        for role, p, o, ts in rows
    ]


def test_log_order_merges_partitions_by_append_time_keeping_offsets_in_order(log):
    shuffled = [log[4], log[2], log[0], log[3], log[1]]
    assert [where(r) for r in log_order(shuffled)] == [
        "job/0@0", "resourcemanager/0@0", "job/1@0", "job/0@2", "job/1@1",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "held", "offsets"),
    [
        ("end", 5, {"job/0": 2, "job/1": 1, "resourcemanager/0": 0}),
        ("job/1@0", 3, {"job/0": 0, "job/1": 0, "resourcemanager/0": 0}),
        # offset 1 of job/0 holds no record (a transaction marker): it names the next, job/0@2
        ("job/0@1", 4, {"job/0": 2, "job/1": 0, "resourcemanager/0": 0}),
        ("count:2", 2, {"job/0": 0, "resourcemanager/0": 0}),
        ("count:0", 0, {}),
        ("s@12", 3, {"job/0": 0, "job/1": 0, "resourcemanager/0": 0}),
        ("1970-01-01T00:00:00.013Z", 4, {"job/0": 2, "job/1": 0, "resourcemanager/0": 0}),
        ("id:in-4", 4, {"job/0": 2, "job/1": 0, "resourcemanager/0": 0}),
    ],
)
def test_every_form_cuts_a_prefix_and_says_which_offsets_it_reflects(log, text, held, offsets):
    upto = cut(log_order(log), text)
    assert upto.records == log_order(log)[:held]
    assert upto.as_of() == {"position": text, "records": held, "offsets": offsets}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("job/1@7", "past the last record of job/1 (it holds offsets 0-1)"),
        (
            "job/5@0",
            "no records in job/5 (partitions with records: job/0, job/1, resourcemanager/0)",
        ),
        ("id:nope", "no event 'nope' in this log (5 records;"),
    ],
)
def test_a_position_naming_nothing_here_says_what_exists(log, text, message):
    with pytest.raises(PositionError) as error:
        cut(log_order(log), text)
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("jobs/1@2", "no topic role 'jobs'"),
        ("count:x", "count:N takes a whole number"),
        ("s@yesterday", "neither epoch ms nor an ISO time"),
        ("somewhere", "is not a position; use ROLE/PARTITION@OFFSET"),
    ],
)
def test_a_malformed_position_is_refused_with_the_forms(text, message):
    with pytest.raises(PositionError) as error:
        Position.parse(text)
    assert message in str(error.value)


def test_a_time_cut_separates_a_decision_from_its_input_by_append_time():
    """A decision carries its input's event time; only the append time tells them apart."""
    clock = Clock()
    granted = clock(JobMasterLeadershipGranted, job_id="j", job_master_id="m")
    decision = JobCancellationRequested(
        event_id="d", event_time=granted.event_time, producer="jobmaster",
        cause_event_id=granted.event_id, job_id="j",
    )  # fmt: skip
    log = [LogRecord(JOB, 0, 0, 100, granted), LogRecord(JOB, 0, 1, 105, decision)]
    assert cut(log, "s@100").records == log[:1]


@pytest.mark.parametrize("text", ["count:²", "count:" + "9" * 5000, "job/\u0661@0"])
def test_digits_that_are_not_ascii_or_too_long_are_no_position(text):
    with pytest.raises(PositionError, match=r"is not a position|whole number"):
        Position.parse(text)
