"""`jobledger ui` live on a real broker: it reads the log to its end before serving, then
follows it, so an event appended later shows in the next answers."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from ..local.test_broker_cli import jobledger
from ..support.web_server import ui_server

pytestmark = pytest.mark.broker
FOLLOW_S = 60.0


def registered(resource_id: str, n: int) -> str:
    return json.dumps({
        "type": "TaskManagerRegistered", "event_id": f"tm-{n}", "event_time": 1700000000000 + n,
        "producer": "runner", "cause_event_id": None, "resource_id": resource_id,
        "address": f"{resource_id}:1", "number_of_slots": 2,
        "resource_profile": {"kind": "SPECIFIED", "cpu_cores": 1.0, "task_heap_memory_mb": 512,
                             "managed_memory_mb": 0},
    })  # fmt: skip


def _taskmanagers(url: str) -> list[str]:
    answer = httpx.get(f"{url}taskmanagers", timeout=30).json()
    return [tm["id"] for tm in answer["taskmanagers"]]


def test_ui_follows_the_brokers_log_as_it_grows(cluster, tmp_path):
    produced = jobledger(cluster, tmp_path, "produce", stdin=registered("tm-a", 1))
    assert produced.returncode == 0, produced.stderr
    with ui_server(None, env=cluster.env(str(tmp_path))) as url:
        assert _taskmanagers(url) == ["tm-a"]
        produced = jobledger(cluster, tmp_path, "produce", stdin=registered("tm-b", 2))
        assert produced.returncode == 0, produced.stderr
        deadline = time.monotonic() + FOLLOW_S
        while _taskmanagers(url) != ["tm-a", "tm-b"]:
            assert time.monotonic() < deadline, f"tm-b not shown within {FOLLOW_S:g} s"
            time.sleep(0.2)
        overview = httpx.get(f"{url}overview", params={"at": "count:1"}, timeout=30).json()
        assert (overview["taskmanagers"], overview["slots-total"]) == (1, 2)
