"""Every view of a job tells the same story (newcomer issue, item 2): the restart count of
`job list`, `job show`, the REST API, `explain` and the timeline; each attempt's state times in
`job show`, the REST API and the timeline's bars (the text lines and the picture are drawn
from them); and each status's time in `job show` and the JobStatusChanged `history` lists.
Over every golden log, at its end and at every tenth record."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from jobledger.cli import main
from jobledger.cli.ui import FileLog
from jobledger.projections.log.log_file import read_export
from jobledger.projections.rest.web_monitor import create_app

from ..support.golden_logs import LOGS


def ask(capsys, *argv: str) -> dict:
    capsys.readouterr()
    assert main([*argv, "-o", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def points(log: str) -> list[str]:
    total = sum(1 for _ in read_export(LOGS / f"{log}.avro"))
    return ["end", *(f"count:{n}" for n in range(total // 10, total, total // 10))]


@pytest.mark.parametrize("log", sorted(p.stem for p in LOGS.glob("*.avro")))
def test_every_view_of_a_job_tells_the_same_story(log, capsys):
    path = str(LOGS / f"{log}.avro")
    rest = TestClient(create_app(FileLog(LOGS / f"{log}.avro")))
    for at in points(log):
        where = ["--file", path, "--at", at]
        listed = {j["jid"]: j for j in ask(capsys, "job", "list", *where)["jobs"]}
        served = {j["jid"]: j for j in rest.get("/jobs/overview", params={"at": at}).json()["jobs"]}
        assert served.keys() == listed.keys()
        for job, overview in listed.items():
            shown = ask(capsys, "job", "show", job, *where)
            detail = rest.get(f"/jobs/{job}", params={"at": at}).json()
            drawn = ask(capsys, "timeline", job, *where)
            vertex = shown["vertices"][0]["id"]
            story = ask(capsys, "explain", f"{job}/{vertex}[0]", *where)
            told = [line for line in story["lines"] if line.startswith("restart ")]
            counts = {
                "job list": overview["restarts"], "REST overview": served[job]["restarts"],
                "job show": shown["restarts"], "REST job": detail["restarts"],
                "explain": len(told), "timeline": len(drawn["restarts_s"]),
            }  # fmt: skip
            assert len(set(counts.values())) == 1, (at, counts)

            start = shown["start-time"]
            bars = {
                (bar["attempt"], bar["state"]): round(bar["start"] * 1000) for bar in drawn["bars"]
            }
            first = min(e["timestamp"] for e in ask(capsys, "history", job, *where)["events"])
            assert first == start, "the timeline's origin is the job's submission"
            for vertex_detail in shown["vertex-details"]:
                for subtask in vertex_detail["subtasks"]:
                    for attempt in subtask["attempt-history"]:
                        for state, ms in attempt["timestamps"].items():
                            assert bars[(attempt["attempt-id"], state)] == ms - start, (at, state)

            changes = [
                e for e in ask(capsys, "history", job, *where)["events"]
                if e["event"]["type"] == "JobStatusChanged"
            ]  # fmt: skip
            last_entered = {e["event"]["to_status"]: e["timestamp"] for e in changes}
            for status, ms in shown["timestamps"].items():
                if ms and status in last_entered:
                    assert ms == last_entered[status], (at, status)
                    assert detail["timestamps"][status] == ms
