"""Replay in parallel by partition: worker processes, one group of partitions each, give the
state one process gives (golden logs, a bench log, a real broker); a worker that dies or fails
is an error, never a hang."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from jobledger.projections.log.log_file import read_export
from jobledger.projections.log.replay import replay
from jobledger.schemas import EventSerde
from jobledger.services.control.driver import DECIDING_PRODUCERS, ReducerDriver
from jobledger.services.host.parallel import can_fork, groups
from jobledger.services.kafka import append_events, transactional_producer

from ..local.test_broker_cli import jobledger
from ..support.golden_logs import LOGS, as_log
from ..support.scheduler_golden import SCENARIOS

GOLDEN = sorted(Path(LOGS).glob("*.avro"))


def _states(result) -> dict:
    return {
        "merged": result.driver.to_dict(),
        "records": result.records,
        "partitions": {key: d.to_dict() for key, d in result.partitioned.drivers.items()},
    }


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
def test_a_golden_log_replays_in_parallel_to_the_state_of_one_process(path):
    records = list(read_export(path))
    one = replay(records)
    assert len(one.partitioned.drivers) > 1
    assert _states(replay(records, jobs=2)) == _states(one)
    assert _states(replay(records, jobs=5)) == _states(one)


def test_many_jobs_on_many_partitions_replay_in_parallel_to_the_state_of_one_process():
    log = [e for name in ("job-1", "job-2", "job-3", "slot-chaos-1") for e in SCENARIOS[name]()[0]]
    records = as_log([e for e in log if e.producer not in DECIDING_PRODUCERS])
    assert _states(replay(records, jobs=3)) == _states(replay(records))


def test_groups_split_partitions_whole_and_balance_them():
    sizes = {"a": 10, "b": 7, "c": 5, "d": 3, "e": 1}
    assert groups(sizes, 2) == [["a", "d"], ["b", "c", "e"]]
    assert groups(sizes, 9) == [["a"], ["b"], ["c"], ["d"], ["e"]]
    assert groups(sizes, 1) == [["a", "b", "c", "d", "e"]]


def _dying_factory(parent: int, how: str):
    class Dying(ReducerDriver):
        def process(self, event):
            if os.getpid() != parent:
                if how == "exit":
                    os._exit(3)
                # a fault of the worker's own (an input that raises is only left out)
                raise OSError("a worker broke")
            return super().process(event)

    return Dying


DYING = """
import os, sys
from jobledger.projections.log.log_file import read_export
from jobledger.projections.log.replay import replay
from tests.log.test_parallel_replay import _dying_factory
replay(list(read_export(sys.argv[1])), driver_factory=_dying_factory(os.getpid(), sys.argv[2]),
       jobs=2)
"""
"""A replay whose forked workers die or fail, run in a process of its own: forking needs a
process with no other thread running, which a test process sharing a broker may not be."""


def _replay_dying(how: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", DYING, str(GOLDEN[0]), how],
        capture_output=True, text=True, timeout=120, cwd=Path(__file__).parents[2],
    )  # fmt: skip


def test_a_worker_that_dies_is_a_clear_error():
    done = _replay_dying("exit")
    assert done.returncode == 1
    assert "ReplayWorkerFailed: a replay worker process died" in done.stderr


def test_a_worker_that_fails_raises_its_error_here():
    done = _replay_dying("raise")
    assert done.returncode == 1
    assert "OSError: a worker broke" in done.stderr


def test_with_other_threads_running_it_replays_in_this_process():
    """Forking copies locks other threads hold: with a thread running, no worker is forked
    (a worker would fail the factory below), and the answer is the same."""
    records = list(read_export(GOLDEN[0]))
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, daemon=True)
    thread.start()
    try:
        assert not can_fork()
        factory = _dying_factory(os.getpid(), "raise")
        assert _states(replay(records, driver_factory=factory, jobs=2)) == _states(replay(records))
    finally:
        stop.set()
        thread.join(10)


def test_replay_jobs_option_prints_the_same_state(tmp_path):
    path = str(next(p for p in GOLDEN if "wordcount" in p.stem))
    one, two = (
        subprocess.run(
            [sys.executable, "-m", "jobledger.cli", "replay", "--file", path, "--jobs", jobs],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "JOBLEDGER_HOME": str(tmp_path)},
        )
        for jobs in ("1", "2")
    )
    assert one.returncode == two.returncode == 0, one.stderr + two.stderr
    assert json.loads(two.stdout) == json.loads(one.stdout)
    assert json.loads(one.stdout)["state"]["job_masters"]


@pytest.mark.broker
def test_replay_from_the_broker_in_parallel_prints_the_state_of_one_process(cluster, tmp_path):
    path = next(p for p in GOLDEN if "wordcount" in p.stem)
    producer = transactional_producer(cluster.bootstrap, "test")
    append_events(producer, cluster.prefix, [r.event for r in read_export(path)], EventSerde())
    producer.flush(30)
    one = jobledger(cluster, tmp_path, "replay", "--jobs", "1")
    two = jobledger(cluster, tmp_path, "replay", "--jobs", "2")
    assert one.returncode == two.returncode == 0, one.stderr + two.stderr
    assert json.loads(two.stdout) == json.loads(one.stdout)
    assert json.loads(one.stdout)["state"]["task_executors"]


READ_THEN_ASK = """
import argparse, sys
from pathlib import Path
from jobledger.cli.log_source import log_records
from jobledger.services.host.parallel import can_fork
log_records(argparse.Namespace(), Path(sys.argv[1]))
print(can_fork())
"""


def test_reading_a_log_as_the_commands_do_leaves_replay_free_to_fork():
    """The progress bars start no thread: tqdm's monitor thread, alive once any bar had been
    made, kept every `replay --jobs N` of the command line in one process."""
    done = subprocess.run(
        [sys.executable, "-c", READ_THEN_ASK, str(GOLDEN[0])],
        capture_output=True, text=True, timeout=120, cwd=Path(__file__).parents[2],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
