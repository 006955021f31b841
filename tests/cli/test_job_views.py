"""`jobledger job list` and `job show` over the golden logs, as of chosen points: the exact
lines a person reads, the JSON the REST API answers, and one-line errors."""

from __future__ import annotations

import json

import pytest

from jobledger.cli.main import main

from ..support.golden_logs import LOGS

FAIL_ONCE = str(LOGS / "wordcount-fail-once.avro")
JOB = "wordcount-94877528"
RESTARTING = "job/0@106"
"""The job's move to RESTARTING, when its first region (count[1]) failed."""


def test_list_sorts_jobs_into_flinks_sections_with_their_times(capsys):
    assert main(["job", "list", "--file", FAIL_ONCE]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "as of end: 284 records, last offsets job/0@169 resourcemanager/0@105 taskexecutor/1@223",
        "------------------ Finished Jobs ------------------",
        f"2026-11-24T22:18:52.093Z : {JOB} : wordcount words.txt (FINISHED; 8/8 tasks finished, "
        "4 restart(s), 18.4 s, ended 2026-11-24T22:19:10.516Z)",
    ]


def test_list_as_of_the_restart_shows_the_job_restarting(capsys):
    assert main(["job", "list", "--file", FAIL_ONCE, "--at", RESTARTING]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1:] == [
        "------------------ Running/Restarting Jobs ------------------",
        f"2026-11-24T22:18:52.093Z : {JOB} : wordcount words.txt (RESTARTING; 4/8 tasks "
        "finished, 1 restart(s), 13.9 s)",
    ]


def test_list_before_any_job_says_so(capsys):
    assert main(["job", "list", "--file", FAIL_ONCE, "--at", "count:0"]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == ["No jobs in this part of the log."]


def test_list_as_json_is_the_rest_apis_jobs_overview(capsys):
    assert main(["job", "list", "--file", FAIL_ONCE, "-o", "json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert [(j["jid"], j["state"], j["restarts"]) for j in answer["jobs"]] == [(JOB, "FINISHED", 4)]
    assert answer["as-of"]["records"] == 284


def test_show_tells_every_subtasks_attempts_slots_and_times(capsys):
    assert main(["job", "show", JOB, "--file", FAIL_ONCE, "--at", RESTARTING]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:6] == [
        f"job {JOB} 'wordcount words.txt': RESTARTING, 1 restart(s)",
        "  submitted 2026-11-24T22:18:52.093Z, 13.9 s",
        "  submitted by: unsigned",
        "  last failure: 184844dec56959f4a2fdeccc0ae6ef98: InjectedFailure: operator 'count' "
        "fails on attempt 0 as configured",
        "  statuses: INITIALIZING@+0.0 s CREATED@+0.0 s RUNNING@+0.0 s RESTARTING@+13.9 s",
    ]
    count = out.index("vertex count 'count words': FAILED, parallelism 4 (max 128), inputs "
                      "source (ALL_TO_ALL)")  # fmt: skip
    assert out[count + 1 : count + 6] == [
        "  [0] #0 RUNNING      runner-0/0         DEPLOYING@+12.5 s INITIALIZING@+13.4 s "
        "RUNNING@+13.4 s",
        "  [1] #0 FAILED       runner-0/1         DEPLOYING@+12.5 s INITIALIZING@+13.3 s "
        "RUNNING@+13.3 s FAILED@+13.9 s",
        "      error: InjectedFailure: operator 'count' fails on attempt 0 as configured",
        "  [2] #0 DEPLOYING    runner-0/3         DEPLOYING@+12.5 s",
        "  [3] #0 DEPLOYING    runner-0/2         DEPLOYING@+12.5 s",
    ]


def test_show_as_json_holds_the_job_and_each_vertexs_subtasks(capsys):
    assert main(["job", "show", JOB, "--file", FAIL_ONCE, "-o", "json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert (answer["state"], answer["restarts"]) == ("FINISHED", 4)
    count = answer["vertex-details"][1]
    assert [(a["attempt"], a["status"], a["slot-index"])
            for a in count["subtasks"][0]["attempt-history"]] == [
        (0, "FAILED", 0), (1, "FINISHED", 0),
    ]  # fmt: skip


def test_show_of_an_unknown_job_is_one_line_naming_the_jobs(capsys):
    assert main(["job", "show", "nope", "--file", FAIL_ONCE]) == 1
    assert capsys.readouterr().err == (
        f"jobledger: no job 'nope' as of end (284 records); jobs: {JOB}\n"
    )


def test_show_at_a_bad_position_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["job", "show", JOB, "--file", FAIL_ONCE, "--at", "nowhere"])
    assert exit_info.value.code == 2
    assert "'nowhere' is not a position" in capsys.readouterr().err
