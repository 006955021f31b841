"""Faults during a real job: one of two `jobledger services run` instances is killed with
SIGKILL while the word count runs on Spark. The survivor takes its partitions (the killed
one's open transaction is aborted when the survivor's producer takes over its transactional
id), the job finishes with exact counts, every decision re-derives (`replay --verify`) and none
is visible twice to a read_committed reader."""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest

from jobledger.projections.log.log_file import processed_by_services
from jobledger.projections.log.replay import verify
from jobledger.schemas.jobs import JobStatusChanged
from jobledger.schemas.tasks import TaskDeploymentRequested
from jobledger.schemas.types import JobStatus
from jobledger.services.client.dispatcher import submission
from jobledger.services.control.job_status import GLOBALLY_TERMINAL

pytest.importorskip(
    "pyspark", reason="the runner needs the `spark` extra: pip install 'jobledger[spark]'"
)

from jobledger.cli import demo
from jobledger.services.runner.runner import RunnerConfig, TaskRunner

from ..runner.test_runner import counted, plain_count, text  # noqa: F401 (a fixture)
from ..support.runtime_harness import append, duplicates, read, service_process, wait_until_owning

pytestmark = pytest.mark.broker


def wait_for(cluster, found, what: str, limit_s: float = 180.0):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        records = read(cluster)
        hit = found(records)
        if hit:
            return hit
        time.sleep(0.5)
    raise AssertionError(f"{what} did not happen within {limit_s:.0f} s")


def test_kill_9_of_one_services_instance_mid_job_loses_and_duplicates_nothing(
    spark,
    cluster,
    text,  # noqa: F811 (the fixture imported above)
    tmp_path,
):
    home = str(tmp_path)
    instances = [service_process(cluster, home, "--timer-interval-ms", "500") for _ in range(2)]
    runner = None
    try:
        for instance in instances:
            wait_until_owning(instance)
        config = RunnerConfig(cluster.bootstrap, cluster.prefix, tmp_path / "ckpt",
                              runner_id="faults", slots=8,
                              data_roots=(text.parent, tmp_path / "job"))  # fmt: skip
        runner = TaskRunner(config, spark=spark)
        runner.start()
        job_id = f"wordcount-{uuid.uuid4().hex[:8]}"
        job = demo.wordcount_job(job_id, text, tmp_path / "job" / "counts", 4, fail_once=False)
        append(cluster, submission(job, "test"))
        wait_for(cluster, lambda rs: any(isinstance(r.event, TaskDeploymentRequested)
                                         for r in rs), "a deployment")  # fmt: skip
        victim = instances.pop(0)
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(10)
        end = wait_for(cluster, lambda rs: next(
            (r.event for r in rs if isinstance(r.event, JobStatusChanged)
             and r.event.job_id == job_id and r.event.to_status in GLOBALLY_TERMINAL), None),
            "the job's end")  # fmt: skip
    finally:
        if runner is not None:
            runner.stop()
        for instance in instances:
            instance.send_signal(signal.SIGTERM)
            instance.wait(30)
    assert end.to_status is JobStatus.FINISHED, end.cause
    assert counted(tmp_path) == plain_count(text)
    records = read(cluster)
    assert duplicates(records) == [], "a decision was visible twice"
    # the clock was on: a tick written as the services stopped is not decided yet
    _, divergence = verify(
        records, processed=processed_by_services(cluster.bootstrap, cluster.prefix)
    )
    assert divergence is None, divergence.describe()
