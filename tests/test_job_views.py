"""`jobledger job list` and `job show` over the golden logs, as of chosen points: the exact
lines a person reads, the JSON the REST API answers, and one-line errors."""

from __future__ import annotations

import json

import pytest

from jobledger.cli.main import main

from .golden_logs import LOGS

FAIL_ONCE = str(LOGS / "wordcount-fail-once.avro")
JOB = "wordcount-bbfa270e"


def test_list_sorts_jobs_into_flinks_sections_with_their_times(capsys):
    assert main(["job", "list", "--file", FAIL_ONCE]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "as of end: 295 records, last offsets job/2@183 resourcemanager/0@88 taskexecutor/1@223",
        "------------------ Finished Jobs ------------------",
        f"2026-11-24T19:00:12.485Z : {JOB} : wordcount words.txt (FINISHED; 8/8 tasks finished, "
        "1 restart(s), 15.2 s, ended 2026-11-24T19:00:27.646Z)",
    ]


def test_list_as_of_the_restart_shows_the_job_restarting(capsys):
    assert main(["job", "list", "--file", FAIL_ONCE, "--at", "job/2@90"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1:] == [
        "------------------ Running/Restarting Jobs ------------------",
        f"2026-11-24T19:00:12.485Z : {JOB} : wordcount words.txt (RESTARTING; 4/8 tasks "
        "finished, 0 restart(s), 9.9 s)",
    ]


def test_list_before_any_job_says_so(capsys):
    assert main(["job", "list", "--file", FAIL_ONCE, "--at", "count:0"]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == ["No jobs in this part of the log."]


def test_list_as_json_is_the_rest_apis_jobs_overview(capsys):
    assert main(["job", "list", "--file", FAIL_ONCE, "-o", "json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert [(j["jid"], j["state"], j["restarts"]) for j in answer["jobs"]] == [(JOB, "FINISHED", 1)]
    assert answer["as-of"]["records"] == 295


def test_show_tells_every_subtasks_attempts_slots_and_times(capsys):
    assert main(["job", "show", JOB, "--file", FAIL_ONCE, "--at", "job/2@90"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:5] == [
        f"job {JOB} 'wordcount words.txt': RESTARTING, 0 restart(s)",
        "  submitted 2026-11-24T19:00:12.485Z, 9.9 s",
        "  last failure: d6e29113eb8359d7ab67f8b78dc9af3e: InjectedFailure: operator 'count' "
        "fails on attempt 0 as configured",
        "  statuses: INITIALIZING@+0.0 s CREATED@+0.0 s RUNNING@+0.0 s RESTARTING@+9.9 s",
    ]
    count = out.index("vertex count 'count words': FAILED, parallelism 4 (max 128), inputs "
                      "source (ALL_TO_ALL)")  # fmt: skip
    assert out[count + 1 : count + 3] == [
        "  [0] #0 FAILED       runner-0/0         DEPLOYING@+8.9 s INITIALIZING@+9.4 s "
        "RUNNING@+9.4 s FAILED@+9.9 s",
        "      error: InjectedFailure: operator 'count' fails on attempt 0 as configured",
    ]


def test_show_as_json_holds_the_job_and_each_vertexs_subtasks(capsys):
    assert main(["job", "show", JOB, "--file", FAIL_ONCE, "-o", "json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert (answer["state"], answer["restarts"]) == ("FINISHED", 1)
    count = answer["vertex-details"][1]
    assert [(a["attempt"], a["status"], a["slot-index"])
            for a in count["subtasks"][0]["attempt-history"]] == [
        (0, "FAILED", 0), (1, "FINISHED", 1),
    ]  # fmt: skip


def test_show_of_an_unknown_job_is_one_line_naming_the_jobs(capsys):
    assert main(["job", "show", "nope", "--file", FAIL_ONCE]) == 1
    assert capsys.readouterr().err == (
        f"jobledger: no job 'nope' as of end (295 records); jobs: {JOB}\n"
    )


def test_show_at_a_bad_position_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["job", "show", JOB, "--file", FAIL_ONCE, "--at", "nowhere"])
    assert exit_info.value.code == 2
    assert "'nowhere' is not a position" in capsys.readouterr().err
