"""The debugging suite over a real broker: `history --follow` prints a job's events as the log
grows, and the answers read from the topics equal those read from an export of them."""

from __future__ import annotations

import json
import selectors
import subprocess
import sys
import time

import pytest

from ..local.test_broker_cli import STATE, jobledger

pytestmark = pytest.mark.broker


def _next_line(proc: subprocess.Popen[str], within_s: float) -> str:
    """The follower's next line, or a failure after `within_s` (never a hang)."""
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if selector.select(timeout=0.2):
            return proc.stdout.readline()
        assert proc.poll() is None, proc.stderr.read()
    pytest.fail(f"no line from `history --follow` within {within_s:.0f} s")


def test_history_follow_prints_the_jobs_events_as_they_are_appended(cluster, tmp_path):
    first = {**STATE, "event_id": "follow-1"}
    assert jobledger(cluster, tmp_path, "produce", stdin=json.dumps(first)).returncode == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobledger.cli", "history", "job-1", "--follow", "-o", "jsonl"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=cluster.env(str(tmp_path)),
    )  # fmt: skip
    try:
        assert json.loads(_next_line(proc, 60))["event"]["event_id"] == "follow-1"
        later = [{**STATE, "event_id": "follow-2"}, {**STATE, "job_id": "other", "event_id": "x"}]
        produced = jobledger(cluster, tmp_path, "produce", stdin="\n".join(map(json.dumps, later)))
        assert produced.returncode == 0, produced.stderr
        line = json.loads(_next_line(proc, 60))
        assert (line["event"]["event_id"], line["position"].split("/")[0]) == ("follow-2", "job")
    finally:
        proc.terminate()
        proc.wait(30)


def test_answers_from_the_topics_equal_those_from_their_export(cluster, tmp_path):
    lines = [{**STATE, "event_id": f"same-{i}"} for i in range(3)]
    assert (
        jobledger(cluster, tmp_path, "produce", stdin="\n".join(map(json.dumps, lines))).returncode
        == 0
    )
    export = tmp_path / "log.avro"
    assert jobledger(cluster, tmp_path, "export", str(export)).returncode == 0
    for question in (["history", "job-1"], ["slots"], ["diff", "count:1"]):
        live = jobledger(cluster, tmp_path, *question, "-o", "json")
        offline = jobledger(cluster, tmp_path, *question, "-o", "json", "--file", str(export))
        assert live.returncode == offline.returncode == 0, live.stderr + offline.stderr
        assert json.loads(live.stdout) == json.loads(offline.stdout), question
