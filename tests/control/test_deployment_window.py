"""A job keeps a bounded window of unreported deployments, so that a giant job's
deployments do not hold back another job's.

An EAGER job's last slot made every deployment at once: a giant job's thousands then sat on
the TaskExecutor partitions (and its tasks' reports on the job's) ahead of any other job's
records. With `jobledger.scheduler.max-pending-deployments` the rest wait in the Scheduler,
in order, and each report of a deployed task lets the next one go."""

from __future__ import annotations

from jobledger.schemas.tasks import TaskDeploymentRequested
from jobledger.schemas.types import ExecutionState
from jobledger.services.configuration import Configuration
from jobledger.services.control.job_master import JobMaster, JobMasterConfig

from ..support.events import ANY_VALUE, assert_derived, derived_from, expect
from ..support.jobs import JM, JOB, JobCluster, vertex

WINDOW = JobMasterConfig(max_pending_deployments=2)


def test_an_eager_job_deploys_its_window_and_each_report_deploys_the_next():
    cluster = JobCluster(task_executors=2, config=WINDOW)
    cluster.submit([vertex("v", 5)])
    first = cluster.deployments()
    assert [d.subtask_index for d in first] == [0, 1]
    scheduler = cluster.jm.scheduler
    assert len(scheduler.deployments_waiting) == 3
    graph = scheduler.graph
    third = graph.vertices["v"].subtasks[2].current
    assert third.state is ExecutionState.SCHEDULED and third.has_slot
    report = cluster.state_report(first[0].execution_attempt_id, ExecutionState.INITIALIZING)
    cluster.run([report])
    assert_derived(derived_from(cluster.log, report, JobMaster.producer), [
        expect(TaskDeploymentRequested, job_id=JOB, job_master_id=JM,
               execution_attempt_id=third.attempt_id, vertex_id="v", subtask_index=2,
               attempt_number=0, number_of_subtasks=5, max_parallelism=ANY_VALUE,
               allocation_id=third.allocation_id, resource_id=third.resource_id,
               slot_index=third.slot_index, invokable_class_name=ANY_VALUE,
               operators=ANY_VALUE, inputs=[], outputs=[]),
    ])  # fmt: skip
    assert cluster.report(first[0].execution_attempt_id, ExecutionState.RUNNING) == []
    assert len(scheduler.deployments_waiting) == 2


def test_a_windowed_job_runs_to_finished_with_every_subtask_deployed_once():
    cluster = JobCluster(task_executors=3, config=WINDOW)
    cluster.submit([vertex("a", 5), vertex("b", 5, ("a", "ALL_TO_ALL", "PIPELINED"))])
    cluster.play(rounds=20)
    deployed = [(d.vertex_id, d.subtask_index) for d in cluster.deployments()]
    assert sorted(deployed) == sorted({(v, i) for v in "ab" for i in range(5)})
    assert cluster.statuses()[-1] == "FINISHED"


def test_the_window_is_an_option_of_100_by_default_and_0_lifts_it():
    """100 by default (a small job beside a giant's deployments stays within 1 s of its
    quiet time); 0, what every log before the default was written with, deploys at once."""
    config = Configuration.parse(["jobledger.scheduler.max-pending-deployments=7"])
    assert config.job_master().max_pending_deployments == 7
    assert Configuration.parse([]).job_master().max_pending_deployments == 100
    cluster = JobCluster(task_executors=60)
    cluster.submit([vertex("v", 240)])
    assert [d.subtask_index for d in cluster.deployments()] == list(range(100))
    unbounded = Configuration.parse(["jobledger.scheduler.max-pending-deployments=0"])
    cluster = JobCluster(task_executors=60, config=unbounded.job_master())
    cluster.submit([vertex("v", 240)])
    assert len(cluster.deployments()) == 240
