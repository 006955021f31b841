"""The debugging suite answers exactly, from the log alone: each command below is run on a
golden log (tests/golden/logs, see tests/support/golden_logs.py) with no broker, and its output must
equal the answer checked in under tests/golden/answers, Temporal-replayer style.
`JOBLEDGER_REGOLD=1` writes the answers again (then read the diff before committing it)."""

from __future__ import annotations

import os
from pathlib import Path
from xml.etree import ElementTree

import pytest

from jobledger.cli import main

from ..support.golden_logs import LOGS

ANSWERS = Path(__file__).resolve().parents[1] / "golden" / "answers"
FAIL_ONCE = "wordcount-94877528"
CLEAN = "wordcount-49f419c8"

QUESTIONS = {
    "stale-leader.history": ("stale-leader", ["history", "job-1"]),
    "stale-leader.history-at": ("stale-leader", ["history", "job-1", "--at", "job/0@9"]),
    "stale-leader.diff": ("stale-leader", ["diff", "job/0@8", "job/0@13"]),
    "stale-leader.slots": ("stale-leader", ["slots"]),
    "slot-shortage.slots": ("slot-shortage", ["slots"]),
    "slot-shortage.slots-json": ("slot-shortage", ["slots", "-o", "json"]),
    "slot-shortage.slots-before-offers": ("slot-shortage", ["slots", "--at", "count:12"]),
    "slot-shortage.history-jsonl": ("slot-shortage", ["history", "job-1", "-o", "jsonl"]),
    "fail-once.history": ("wordcount-fail-once", ["history", FAIL_ONCE]),
    "fail-once.slots-mid-run": ("wordcount-fail-once", ["slots", "--at", "count:200"]),
    "fail-once.diff-restart": ("wordcount-fail-once", ["diff", "count:200", "count:208"]),
    "fail-once.diff-json": (
        "wordcount-fail-once",
        ["diff", "count:181", "count:186", "-o", "json"],
    ),
    "fail-once.explain-task": ("wordcount-fail-once", ["explain", f"{FAIL_ONCE}/count[2]"]),
    "fail-once.explain-task-by-name": (
        "wordcount-fail-once",
        ["explain", f"{FAIL_ONCE}/count words[1]#1"],
    ),
    "fail-once.explain-mid-run": (
        "wordcount-fail-once",
        ["explain", f"{FAIL_ONCE}/count[2]", "--at", "job/0@118"],
    ),
    "fail-once.explain-event": (
        "wordcount-fail-once",
        ["explain", "093278a644465585bbd1cbf88939da06"],
    ),
    "stale-leader.explain-task": ("stale-leader", ["explain", "job-1/source[0]", "-o", "json"]),
    "stale-leader.explain-task-executor": ("stale-leader", ["explain", "tm-0"]),
    "slot-shortage.explain-waiting": ("slot-shortage", ["explain", "job-1/source[2]"]),
    "clean.history": ("wordcount", ["history", CLEAN]),
    "clean.slots": ("wordcount", ["slots"]),
    "clean.explain-task": ("wordcount", ["explain", f"{CLEAN}/count[0]"]),
    "clean.diff-whole-run": ("wordcount", ["diff", "count:0"]),
    "clean.timeline": ("wordcount", ["timeline", CLEAN]),
    "fail-once.timeline": ("wordcount-fail-once", ["timeline", FAIL_ONCE]),
    "fail-once.timeline-json": ("wordcount-fail-once", ["timeline", FAIL_ONCE, "-o", "json"]),
}


@pytest.mark.parametrize("name", sorted(QUESTIONS))
def test_the_answer_is_exactly_the_golden_one(name, capsys):
    log, args = QUESTIONS[name]
    assert main([*args, "--file", str(LOGS / f"{log}.avro")]) == 0
    answer = capsys.readouterr().out
    golden = ANSWERS / f"{name}.txt"
    if os.environ.get("JOBLEDGER_REGOLD"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(answer)
    assert answer == golden.read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["history", "nope"],
            "no event of job 'nope' in this part of the log (29 records); jobs in it: job-1",
        ),
        (["slots", "--at", "job/3@0"], "no records in job/3 (partitions with records: job/0"),
        (["diff", "id:missing"], "no event 'missing' in this log (29 records;"),
        (["diff", "end", "count:3"], "end is after count:3 in this log: give the earlier first"),
        (["explain", "job-1/source[3]"], "vertex source of job job-1 has subtasks 0-0"),
        (["history", "job-1", "--at", "job/0@99"], "past the last record of job/0"),
        (["explain", "job-1/sink[0]"], "job job-1 has no vertex 'sink'; vertices: source"),
        (["explain", "nothing"], "tasks look like JOB/VERTEX[SUBTASK] (job-1/source[0])"),
    ],
)
def test_a_target_or_position_naming_nothing_says_what_exists(args, message, capsys):
    assert main([*args, "--file", str(LOGS / "stale-leader.avro")]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("jobledger: ") and message in line


def test_the_timeline_picture_is_a_gantt_chart_of_every_slot(tmp_path, capsys):
    """The picture (saved as a test artifact) has a row per slot, a bar per attempt state,
    the failures and each region's restart (a line per failover, four of them): its SVG
    holds the labels matplotlib drew."""
    pytest.importorskip("matplotlib", reason="the picture needs the `plot` extra")
    picture = tmp_path / "timeline.svg"
    log = str(LOGS / "wordcount-fail-once.avro")
    assert main(["timeline", FAIL_ONCE, "--file", log, "-o", str(picture)]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {picture}: 48 bars (as of end: 284")
    svg = ElementTree.parse(picture).getroot()
    assert svg.tag.endswith("svg")
    drawn = picture.read_text()
    for text in ["runner-0/0", "runner-0/3", "count[2]#0", "count[2]#1", "4 restarts"]:
        assert text in drawn, text
    assert "source[0]#1" not in drawn  # region failover restarts no source
    artifacts = Path(os.environ.get("JOBLEDGER_ARTIFACTS", tmp_path))
    artifacts.mkdir(parents=True, exist_ok=True)
    (artifacts / "fail-once-timeline.svg").write_bytes(picture.read_bytes())


def test_a_timeline_file_of_another_kind_is_refused(capsys):
    with pytest.raises(SystemExit):
        main(
            ["timeline", FAIL_ONCE, "--file", str(LOGS / "wordcount-fail-once.avro"), "-o", "t.gif"]
        )
    assert "-o t.gif: text, json, or a file ending in .svg, .png, .pdf" in capsys.readouterr().err


def _explained(capsys, target: str, *extra: str) -> str:
    assert main(["explain", target, "--file", str(LOGS / "wordcount-fail-once.avro"), *extra]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("extra", [[], ["--no-index"]], ids=["index", "whole"])
def test_explain_takes_every_id_the_other_commands_print(extra, capsys):
    """An attempt id (as `job wait`, `kvstate lookup` and the REST API print it) is the
    attempt's story; an event id is its chain of causes with or without `id:` (the position
    form); allocation and TaskExecutor ids name their records."""
    from jobledger.projections.log.log_file import read_export
    from jobledger.schemas.tasks import TaskDeploymentRequested

    records = list(read_export(LOGS / "wordcount-fail-once.avro"))
    retried = next(r.event for r in records if isinstance(r.event, TaskDeploymentRequested)
                   and r.event.attempt_number == 1)  # fmt: skip
    task = f"{retried.job_id}/{retried.vertex_id}[{retried.subtask_index}]#1"
    by_task = _explained(capsys, task, *extra)
    subtask = f"{retried.job_id}/{retried.vertex_id}[{retried.subtask_index}]"
    assert by_task.splitlines()[1].startswith(f"task {subtask} "), by_task
    assert _explained(capsys, retried.execution_attempt_id, *extra) == by_task
    event = retried.event_id
    assert _explained(capsys, f"id:{event}", *extra) == _explained(capsys, event, *extra)
    assert f"event {event}: " in _explained(capsys, event, *extra)
    assert f"allocation {retried.allocation_id}: " in _explained(
        capsys, retried.allocation_id, *extra
    )
    assert f"TaskExecutor {retried.resource_id}: " in _explained(
        capsys, retried.resource_id, *extra
    )
