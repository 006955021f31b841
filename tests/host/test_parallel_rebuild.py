"""A service's rebuild on all cores: the partitions it takes over are read by its one reader,
reduced side by side in forked processes, and come back in the state rebuilding them one by
one gives (over a real broker). The rebuilds run in a fresh interpreter (`rebuild_check.py`):
this one has threads of earlier tests running, and a process with threads never forks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from jobledger.projections.log.log_file import read_export
from jobledger.schemas import EventSerde
from jobledger.services.kafka import append_events, transactional_producer

from ..support.golden_logs import LOGS

WORDCOUNT = next(p for p in sorted(Path(LOGS).glob("*.avro")) if "wordcount" in p.stem)
ROOT = Path(__file__).resolve().parents[2]


def _rebuilt(cluster, *flags: str) -> dict:
    """The golden word count written to the topics, then rebuilt both ways (`rebuild_check`)."""
    producer = transactional_producer(cluster.bootstrap, "test")
    append_events(producer, cluster.prefix, [r.event for r in read_export(WORDCOUNT)], EventSerde())
    producer.flush(30)
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.rebuild_check", cluster.bootstrap, cluster.prefix,
         *flags],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.splitlines()[-1])
    assert answer["forkable"], "the check runs the forked rebuild, not the one-process one"
    assert answer["partitions_with_records"] > 1, "records on several partitions"
    return answer


@pytest.mark.broker
def test_partitions_rebuilt_side_by_side_are_those_rebuilt_one_by_one(cluster):
    answer = _rebuilt(cluster)
    assert "(processes: 2)" in answer["log"]
    assert answer["equal"]
    assert answer["job_masters"] > 0


@pytest.mark.broker
def test_a_rebuild_worker_that_dies_leaves_the_rebuild_to_the_service(cluster):
    """A worker killed (out of memory, say) would be killed again at every start: the service
    rebuilds in its own process instead of stopping, to the same state."""
    answer = _rebuilt(cluster, "--worker-dies")
    assert "a rebuild worker failed (a replay worker process died" in answer["log"]
    assert "(processes: 1)" in answer["log"]
    assert answer["equal"]
