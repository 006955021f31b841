"""The REST API (projections/rest/web_monitor.py) over the golden logs, in process through
FastAPI's TestClient: Flink's paths and field names with exact values at chosen points of the
log, the offsets every answer reflects, and Flink-style errors (400/404, never a 500)."""

from __future__ import annotations

import socket

import pytest
from fastapi.testclient import TestClient

from jobledger.cli.main import main
from jobledger.cli.ui import FileLog
from jobledger.projections.rest.jobs import vertex_status
from jobledger.projections.rest.web_monitor import create_app

from ..support.golden_logs import LOGS

JOB = "wordcount-94877528"
RESTARTING = "job/0@106"
"""The JobStatusChanged RUNNING -> RESTARTING of wordcount-fail-once: its first region (count[1])
failed; under region failover the job stays RESTARTING while the other three fail in turn."""


def client(name: str) -> TestClient:
    return TestClient(create_app(FileLog(LOGS / f"{name}.avro")), raise_server_exceptions=False)


@pytest.fixture(scope="module")
def fail_once() -> TestClient:
    return client("wordcount-fail-once")


@pytest.fixture(scope="module")
def shortage() -> TestClient:
    return client("slot-shortage")


def ok(c: TestClient, path: str, **params: str) -> dict:
    response = c.get(path, params=params)
    assert response.status_code == 200, response.text
    return response.json()


def test_overview_counts_taskmanagers_slots_and_jobs_by_status(fail_once):
    assert ok(fail_once, "/overview") == {
        "taskmanagers": 1, "slots-total": 8, "slots-available": 8, "jobs-running": 0,
        "jobs-finished": 1, "jobs-cancelled": 0, "jobs-failed": 0, "flink-version": "jobledger",
        "flink-commit": "", "pending-slot-requests": 0,
        "as-of": {"position": "end", "records": 284, "offsets": {
            "job/0": 169, "resourcemanager/0": 105, "taskexecutor/1": 223}},
    }  # fmt: skip


def test_jobs_overview_has_flinks_job_details(fail_once):
    [job] = ok(fail_once, "/jobs/overview")["jobs"]
    assert job == {
        "jid": JOB, "name": "wordcount words.txt", "state": "FINISHED",
        "start-time": 1795558732093, "end-time": 1795558750516, "duration": 18423,
        "last-modification": 1795558750516, "restarts": 4, "decided": True,
        "tasks": {"total": 8, "created": 0, "scheduled": 0, "deploying": 0, "initializing": 0,
                  "running": 0, "finished": 8, "canceling": 0, "canceled": 0, "failed": 0,
                  "reconciling": 0},
    }  # fmt: skip


def test_a_job_before_its_restart_is_restarting_with_a_failed_vertex(fail_once):
    """Region failover: the failed subtask's region restarts alone, so the other subtasks of
    the vertex go on (none is cancelled)."""
    job = ok(fail_once, f"/jobs/{JOB}", at=RESTARTING)
    assert (job["state"], job["end-time"], job["as-of"]) == ("RESTARTING", -1, {
        "position": RESTARTING, "records": 186,
        "offsets": {"job/0": 106, "resourcemanager/0": 68, "taskexecutor/1": 147},
    })  # fmt: skip
    assert job["timestamps"]["RESTARTING"] == 1795558746030
    assert job["timestamps"]["FINISHED"] == 0
    assert [(v["id"], v["name"], v["status"], {s: n for s, n in v["tasks"].items() if n})
            for v in job["vertices"]] == [
        ("source", "read and split", "FINISHED", {"FINISHED": 4}),
        ("count", "count words", "FAILED", {"DEPLOYING": 2, "RUNNING": 1, "FAILED": 1}),
    ]  # fmt: skip


def test_the_same_job_at_the_end_has_finished_after_four_region_restarts(fail_once):
    job = ok(fail_once, f"/jobs/{JOB}")
    assert (job["state"], job["restarts"], job["end-time"]) == ("FINISHED", 4, 1795558750516)
    assert [v["status"] for v in job["vertices"]] == ["FINISHED", "FINISHED"]
    assert job["plan"]["nodes"][1]["inputs"] == [
        {"num": 0, "id": "source", "ship_strategy": "ALL_TO_ALL", "exchange": "blocking"}
    ]


def test_a_vertex_shows_each_subtasks_attempts_with_their_slots_and_times(fail_once):
    vertex = ok(fail_once, f"/jobs/{JOB}/vertices/count")
    first = vertex["subtasks"][0]
    assert (first["status"], first["attempt"], first["taskmanager-id"]) == (
        "FINISHED", 1, "runner-0",
    )  # fmt: skip
    assert [(a["attempt"], a["status"], a["slot-index"], a["timestamps"], a["error"])
            for a in first["attempt-history"]] == [
        (0, "FAILED", 0, {"DEPLOYING": 1795558744603, "INITIALIZING": 1795558745469,
                          "RUNNING": 1795558745469, "FAILED": 1795558746065},
         "InjectedFailure: operator 'count' fails on attempt 0 as configured"),
        (1, "FINISHED", 0, {"DEPLOYING": 1795558747283, "INITIALIZING": 1795558748196,
                            "RUNNING": 1795558748196, "FINISHED": 1795558748742}, None),
    ]  # fmt: skip


def test_subtask_times_name_every_state_with_zero_for_not_reached(fail_once):
    times = ok(fail_once, f"/jobs/{JOB}/vertices/count/subtasktimes", at=RESTARTING)
    assert times["subtasks"][1] == {
        "subtask": 1, "host": "runner-0", "endpoint": "runner-0", "duration": 1392,
        "timestamps": {"CREATED": 0, "SCHEDULED": 0, "DEPLOYING": 1795558744603,
                       "INITIALIZING": 1795558745425, "RUNNING": 1795558745426,
                       "FINISHED": 0, "CANCELING": 0, "CANCELED": 0, "FAILED": 1795558745995,
                       "RECONCILING": 0},
    }  # fmt: skip


def test_exceptions_give_the_root_cause_and_every_task_failure_newest_first(fail_once):
    """The root exception is the latest failure's: under region failover each region's
    failure is one, though only the first moved the job to RESTARTING."""
    exceptions = ok(fail_once, f"/jobs/{JOB}/exceptions", at=RESTARTING)
    assert (exceptions["root-exception"], exceptions["timestamp"]) == (
        "184844dec56959f4a2fdeccc0ae6ef98: InjectedFailure: operator 'count' fails on attempt 0 "
        "as configured", 1795558746030,
    )  # fmt: skip
    assert [
        (e["exceptionName"], e["taskName"], e["taskManagerId"], e["timestamp"], e["position"])
        for e in exceptions["exceptionHistory"]["entries"]
    ] == [("InjectedFailure", "count words (2/4)", "runner-0", 1795558745995, "job/0@102")]
    later = ok(fail_once, f"/jobs/{JOB}/exceptions")
    assert [(e["taskName"], e["position"]) for e in later["exceptionHistory"]["entries"]] == [
        ("count words (3/4)", "job/0@124"), ("count words (4/4)", "job/0@118"),
        ("count words (1/4)", "job/0@108"), ("count words (2/4)", "job/0@102"),
    ]  # fmt: skip
    assert (later["root-exception"], later["timestamp"]) == (
        "6832c8c3f8ed5dc6888d11943eb584da: InjectedFailure: operator 'count' fails on attempt 0 "
        "as configured", 1795558747257,
    )  # fmt: skip


def test_a_slot_shortage_shows_a_full_taskmanager_and_the_waiting_request(shortage):
    [tm] = ok(shortage, "/taskmanagers")["taskmanagers"]
    assert (tm["id"], tm["slotsNumber"], tm["freeSlots"], tm["registered"]) == ("tm-0", 2, 0,
                                                                                  True)  # fmt: skip
    detail = ok(shortage, "/taskmanagers/tm-0")
    assert [(s["index"], s["jobId"], s["state"]) for s in detail["allocatedSlots"]] == [
        (0, "job-1", "ALLOCATED"), (1, "job-1", "ALLOCATED"),
    ]  # fmt: skip
    [pending] = ok(shortage, "/slots")["pending"]
    assert (pending["job_id"], pending["reason"]) == (
        "job-1", "all 2 matching slots are taken: tm-0/0 to job-1, tm-0/1 to job-1",
    )  # fmt: skip
    [job] = ok(shortage, "/jobs/overview")["jobs"]
    assert (job["state"], job["tasks"]["scheduled"], job["end-time"]) == ("RUNNING", 3, -1)


def test_a_tasks_explain_and_a_jobs_history_are_served_as_of_a_point(fail_once):
    story = ok(fail_once, f"/jobs/{JOB}/vertices/count/subtasks/0/explain", attempt="0")
    assert story["target"].startswith(f"task {JOB}/count[0] ('count words', subtask 0 of 4)")
    assert any("FAILED" in line for line in story["lines"])
    history = ok(fail_once, f"/jobs/{JOB}/history", at="count:10")
    assert history["as-of"]["records"] == 10
    assert [e["event"]["type"] for e in history["events"]][:2] == [
        "JobSubmitted", "JobMasterLeadershipGranted",
    ]  # fmt: skip


def test_the_log_endpoint_gives_the_slider_its_length_and_job_status_marks(fail_once):
    log = ok(fail_once, "/log")
    assert log["records"] == 284
    assert [(m["count"], m["status"]) for m in log["marks"]] == [
        (6, "CREATED"), (7, "RUNNING"), (186, "RESTARTING"), (229, "RUNNING"), (265, "FINISHED"),
    ]  # fmt: skip


def test_before_the_job_was_submitted_there_is_no_job(fail_once):
    assert ok(fail_once, "/jobs/overview", at="count:0")["jobs"] == []
    assert ok(fail_once, "/overview", at="count:0")["as-of"] == {
        "position": "count:0", "records": 0, "offsets": {},
    }  # fmt: skip


@pytest.mark.parametrize(
    ("path", "params", "status", "says"),
    [
        (f"/jobs/{JOB}", {"at": "count:0"}, 404, "no job 'wordcount-94877528' as of count:0"),
        ("/jobs/nope", {}, 404, "no job 'nope' as of end (284 records); jobs: wordcount-"),
        (f"/jobs/{JOB}/vertices/nope", {}, 404, "has no vertex 'nope' (vertices: source, count)"),
        (f"/jobs/{JOB}/vertices/count/subtasks/9/explain", {}, 404, "subtask"),
        ("/taskmanagers/nope", {}, 404, "no TaskManager 'nope' as of end (TaskManagers: runner-0)"),
        ("/overview", {"at": "bogus"}, 400, "'bogus' is not a position"),
        ("/overview", {"at": "count:999"}, 400, "this log has 284 records"),
        ("/overview", {"at": "count:²"}, 400, "count:N takes a whole number"),
        ("/overview", {"at": "count:" + "9" * 5000}, 400, "count:N takes a whole number"),
        ("/overview", {"at": "job/7@0"}, 400, "no records in job/7"),
        ("/overview", {"at": "s@yesterday"}, 400, "neither epoch ms nor an ISO time"),
        (f"/jobs/{JOB}/vertices/count/subtasks/x/explain", {}, 400, "path.subtaskindex"),
        (f"/jobs/{JOB}/vertices/count/subtasks/0/explain", {"attempt": "-1"}, 400, "attempt"),
        ("/no/such/path", {}, 404, "Not Found"),
    ],
)  # fmt: skip
def test_bad_requests_get_flinks_error_json(fail_once, path, params, status, says):
    response = fail_once.get(path, params=params)
    assert response.status_code == status, response.text
    [error] = response.json()["errors"][:1]
    assert says in error


def test_a_method_not_served_is_refused_with_error_json(fail_once):
    response = fail_once.post("/overview")
    assert (response.status_code, response.json(), response.headers["allow"]) == (
        405, {"errors": ["Method Not Allowed"]}, "GET",
    )  # fmt: skip


def test_the_openapi_document_lists_flinks_paths(fail_once):
    paths = set(ok(fail_once, "/openapi.json")["paths"])
    assert {
        "/overview", "/jobs/overview", "/jobs/{jobid}", "/jobs/{jobid}/vertices/{vertexid}",
        "/jobs/{jobid}/vertices/{vertexid}/subtasktimes", "/jobs/{jobid}/exceptions",
        "/jobs/{jobid}/plan", "/taskmanagers", "/taskmanagers/{taskmanagerid}", "/slots",
        "/jobs/{jobid}/history", "/jobs/{jobid}/status", "/config",
        "/jobs/{jobid}/vertices/{vertexid}/subtasks/{subtaskindex}",
        "/jobs/{jobid}/vertices/{vertexid}/subtasks/{subtaskindex}/attempts/{attempt}",
        "/jobs/{jobid}/vertices/{vertexid}/subtasks/{subtaskindex}/explain",
    } <= paths  # fmt: skip


def test_a_port_in_use_is_one_line(capsys):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        assert main(["ui", "--file", str(LOGS / "slot-shortage.avro"), "--port", str(port)]) == 1
    finally:
        taken.close()
    assert capsys.readouterr().err == (
        f"jobledger: --bind 127.0.0.1 --port {port}: Address already in use\n"
    )


@pytest.mark.parametrize(
    ("states", "shown"),
    [
        (["FINISHED", "FINISHED"], "FINISHED"),
        (["FINISHED", "SCHEDULED"], "RUNNING"),
        (["SCHEDULED", "DEPLOYING"], "CREATED"),
        (["RUNNING", "FAILED", "CANCELING"], "FAILED"),
        (["CANCELED", "CANCELING"], "CANCELING"),
        (["INITIALIZING", "RUNNING"], "INITIALIZING"),
        ([], "CREATED"),
    ],
)
def test_a_vertexs_status_is_flinks_aggregate_of_its_subtasks(states, shown):
    assert vertex_status(states) == shown


def test_a_vertex_whose_subtasks_wait_for_slots_shows_created(shortage):
    [vertex] = ok(shortage, "/jobs/job-1")["vertices"]
    assert (vertex["status"], vertex["tasks"]["SCHEDULED"]) == ("CREATED", 3)


def test_reports_the_jobmaster_refused_are_no_exceptions_of_the_job():
    stale = client("stale-leader")
    exceptions = ok(stale, "/jobs/job-1/exceptions")
    assert (exceptions["root-exception"], exceptions["exceptionHistory"]["entries"]) == (
        "leadership passed to jm-2", [],
    )  # fmt: skip
    job = ok(stale, "/jobs/job-1")
    assert (job["state"], job["timestamps"]["SUSPENDED"]) == ("RUNNING", 1764000000019)
    [subtask] = ok(stale, "/jobs/job-1/vertices/source")["subtasks"]
    assert (subtask["status"], subtask["timestamps"], len(subtask["attempt-history"])) == (
        "SCHEDULED", {}, 1,
    )  # fmt: skip


def test_a_subtask_and_each_of_its_attempts_as_flink_serves_them(fail_once):
    base = f"/jobs/{JOB}/vertices/count/subtasks/0"
    current = ok(fail_once, base)
    assert (current["attempt"], current["status"], current["slot-index"]) == (1, "FINISHED", 0)
    first = ok(fail_once, f"{base}/attempts/0")
    assert (first["attempt"], first["status"], first["error"]) == (
        0, "FAILED", "InjectedFailure: operator 'count' fails on attempt 0 as configured",
    )  # fmt: skip
    assert ok(fail_once, f"{base}/attempts/0", at=RESTARTING)["as-of"]["records"] == 186
    assert ok(fail_once, f"/jobs/{JOB}/status", at=RESTARTING)["status"] == "RESTARTING"
    assert ok(fail_once, "/config")["flink-version"] == "jobledger"


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("subtasks/4", "has subtasks 0-3, not 4"),
        ("subtasks/0/attempts/7", "subtask 0 of 'count' has no attempt 7 (attempts: 0, 1)"),
    ],
)
def test_a_subtask_or_attempt_that_does_not_exist_is_a_404(fail_once, path, says):
    response = fail_once.get(f"/jobs/{JOB}/vertices/count/{path}")
    assert response.status_code == 404
    assert says in response.json()["errors"][0]


# -- Flink's metric endpoints ------------------------------------------------------------


def test_the_jobmanager_s_metrics_are_listed_then_answered_as_flink_does(fail_once):
    assert ok(fail_once, "/jobmanager/metrics") == [
        {"id": "numRegisteredTaskManagers"}, {"id": "taskSlotsTotal"},
        {"id": "taskSlotsAvailable"}, {"id": "numPendingSlotRequests"},
        {"id": "numLostTaskManagers"}, {"id": "numRunningJobs"},
    ]  # fmt: skip
    wanted = "numRegisteredTaskManagers,taskSlotsTotal,numRunningJobs,noSuchMetric"
    assert ok(fail_once, "/jobmanager/metrics", get=wanted) == [
        {"id": "numRegisteredTaskManagers", "value": "1"}, {"id": "taskSlotsTotal", "value": "8"},
        {"id": "numRunningJobs", "value": "0"},
    ]  # fmt: skip


def test_a_job_s_metrics_at_any_point_of_its_log(fail_once):
    wanted = "numRestarts,fullRestarts,uptime,downtime,runningState,restartingState"
    assert ok(fail_once, f"/jobs/{JOB}/metrics", get=wanted, at=RESTARTING) == [
        {"id": "uptime", "value": "0"}, {"id": "downtime", "value": "35"},
        {"id": "numRestarts", "value": "1"}, {"id": "fullRestarts", "value": "0"},
        {"id": "runningState", "value": "0"}, {"id": "restartingState", "value": "1"},
    ]  # fmt: skip
    assert ok(fail_once, f"/jobs/{JOB}/metrics", get="uptime", at="job/0@60") == [
        {"id": "uptime", "value": "11238"}
    ]
    assert ok(fail_once, f"/jobs/{JOB}/metrics", get="numRestarts,uptime,finishedState") == [
        {"id": "uptime", "value": "-1"}, {"id": "numRestarts", "value": "4"},
        {"id": "finishedState", "value": "1"},
    ]  # fmt: skip


def test_task_manager_metrics_aggregated_and_one_by_one(fail_once):
    assert ok(fail_once, "/taskmanagers/metrics", get="taskSlotsTotal") == [
        {"id": "taskSlotsTotal", "min": 8.0, "max": 8.0, "avg": 8.0, "sum": 8.0, "skew": 0.0}
    ]
    assert ok(fail_once, "/taskmanagers/metrics", get="taskSlotsAvailable", agg="min,sum",
              taskmanagers="runner-0,runner-9") == [
        {"id": "taskSlotsAvailable", "min": 8.0, "sum": 8.0}
    ]  # fmt: skip
    assert ok(fail_once, "/taskmanagers/runner-0/metrics", get="taskSlotsTotal") == [
        {"id": "taskSlotsTotal", "value": "8"}
    ]


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("/jobs/nope/metrics", "no job 'nope' as of end (284 records); jobs: " + JOB),
        ("/taskmanagers/nope/metrics", "no TaskManager 'nope' as of end"),
    ],
)
def test_metrics_of_what_the_log_does_not_hold_are_a_404(fail_once, path, error):
    response = fail_once.get(path)
    assert (response.status_code, response.json()) == (404, {"errors": [error]})
