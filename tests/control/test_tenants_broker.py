"""A flooding client is refused while another client's job finishes: the real service runtime
over the real broker, with one TaskExecutor of two slots whose runner is played by the test."""

from __future__ import annotations

import pytest

from jobledger.schemas import Event
from jobledger.schemas.cluster import TaskManagerRegistered
from jobledger.schemas.jobs import JobStatusChanged, JobSubmitted
from jobledger.schemas.slots import SlotRequestRefused
from jobledger.schemas.tasks import TaskDeploymentRequested, TaskExecutionStateChanged
from jobledger.schemas.types import ExecutionState
from jobledger.services.client.dispatcher import submission
from jobledger.services.configuration import Configuration

from ..support.broker_pump import BrokerPump
from ..support.events import Clock, profile
from ..support.jobs import vertex

pytestmark = pytest.mark.broker

LIMITS = Configuration.parse(["jobledger.principal.max-jobs-in-flight=3"])


def submit(clock: Clock, job_id: str, principal: str) -> list[Event]:
    job = clock(JobSubmitted, job_id=job_id, job_name=job_id, vertices=[vertex("only", 1)],
                principal=principal)  # fmt: skip
    return submission(job, "test")


def run_tasks(pump: BrokerPump, clock: Clock, answered: set[str]) -> list[str]:
    """Play the runner: every deployment not answered yet runs and finishes; the jobs whose
    task it ran, in deployment order."""
    deployments = [e for e in pump.log if isinstance(e, TaskDeploymentRequested)
                   and e.execution_attempt_id not in answered]  # fmt: skip
    reports = [
        clock(TaskExecutionStateChanged, job_id=d.job_id, job_master_id=d.job_master_id,
              execution_attempt_id=d.execution_attempt_id, execution_state=state)
        for d in deployments
        for state in (ExecutionState.INITIALIZING, ExecutionState.RUNNING, ExecutionState.FINISHED)
    ]  # fmt: skip
    answered.update(d.execution_attempt_id for d in deployments)
    if reports:
        pump.append(reports)
        pump.run_until_quiet()
    return [d.job_id for d in deployments]


def test_a_flooding_client_is_refused_while_another_clients_job_finishes(cluster):
    pump = BrokerPump(cluster.bootstrap, cluster.prefix, LIMITS.new_driver)
    clock, answered = Clock(), set[str]()
    try:
        pump.append([clock(TaskManagerRegistered, resource_id="tm-1", address="tm-1:1",
                           number_of_slots=2, resource_profile=profile(1.0, 1024))])  # fmt: skip
        flood = [f"flood-{n}" for n in range(6)]
        pump.append([e for job in flood for e in submit(clock, job, "mallory")])
        pump.run_until_quiet()
        pump.append(submit(clock, "small", "alice"))  # after every request of the flood
        pump.run_until_quiet()
        order = run_tasks(pump, clock, answered)
        while ran := run_tasks(pump, clock, answered):
            order += ran
    finally:
        pump.close()
    refused = [e for e in pump.log if isinstance(e, SlotRequestRefused)]
    cause = (
        "principal 'mallory' has 3 jobs in flight, the limit "
        "(jobledger.principal.max-jobs-in-flight=3)"
    )
    assert [e.cause for e in refused] == [cause] * 3
    ends = {
        e.job_id: (e.to_status.value, e.cause)
        for e in pump.log
        if isinstance(e, JobStatusChanged) and e.to_status.value in ("FINISHED", "FAILED")
    }
    assert ends["small"] == ("FINISHED", None)
    failed = sorted(e.job_id for e in refused)
    assert sorted(job for job in flood if ends[job][0] == "FAILED") == failed
    assert all(cause in ends[job][1] for job in failed)
    assert sorted(job for job in flood if ends[job][0] == "FINISHED") == sorted(
        set(flood) - set(failed)
    )
    # two slots, two of mallory's jobs in them, a third waiting before alice's: the first
    # slot freed goes to alice, who holds none, not to mallory's older request
    assert order[2] == "small" and len(order) == 4
