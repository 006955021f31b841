"""Broker faults on a three-node Kafka while a fail-once word count runs: one run of
each fault of `bench/faults.py` (kill -9 and restart of the node coordinating the
ResourceManager's transactions, a 45 s SIGSTOP of it, its loss for good, a rolling restart of
all three), held to its checker: the job finished, input equals output, no input decided
twice, `replay --verify` clean. The longer campaign (`--runs 5` of each) is run by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobledger.services.local import apache_kafka

pytest.importorskip("pyspark", reason="the runner needs the `spark` extra")

pytestmark = pytest.mark.broker

BENCH = Path(__file__).resolve().parents[2] / "bench" / "faults.py"
PAUSE_S = 45


def test_every_broker_fault_on_three_nodes_loses_and_duplicates_nothing(tmp_path):
    if not apache_kafka.available():
        pytest.skip("Apache Kafka needs Java and `make kafka`")
    env = {k: v for k, v in os.environ.items()
           if k not in ("JOBLEDGER_BOOTSTRAP", "JOBLEDGER_TOPIC_PREFIX")}  # fmt: skip
    done = subprocess.run(
        [sys.executable, str(BENCH), "--nodes", "3", "--fault", "kill", "pause", "lose", "roll",
         "--runs", "1", "--pause-s", str(PAUSE_S)],
        env={**env, "TMPDIR": str(tmp_path)}, cwd=BENCH.parent, capture_output=True, text=True,
        timeout=1500,
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads(lines[-1])
    verdicts = {kind: (s["ok"], s["lost"], s["duplicated"])
                for kind, s in summary["by_fault"].items()}  # fmt: skip
    assert verdicts == {kind: (1, 0, 0) for kind in ("kill", "pause", "lose", "roll")}, done.stdout
    assert done.returncode == 0, done.stdout
    # the services went on while the paused node slept: no task waited for it
    assert summary["by_fault"]["pause"]["max_stall_s"] < PAUSE_S, done.stdout
