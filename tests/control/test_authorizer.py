"""Who may write which input, decided by `ReducerDriver.admit` from the
signer's principal and role and what the reducers know: each rule, allowed and refused."""

from __future__ import annotations

import pytest

from jobledger.schemas.cluster import (
    TaskManagerHeartbeat,
    TaskManagerHeartbeatsReported,
    TaskManagerLost,
    TaskManagerRegistered,
)
from jobledger.schemas.jobs import (
    GlobalAggregateUpdateRequested,
    JobCancellationRequested,
    JobMasterLeadershipGranted,
    JobSubmitted,
    RescaleRequested,
)
from jobledger.schemas.kvstate import KvStateRegistered
from jobledger.schemas.timers import CLOCK, TimerFired
from jobledger.schemas.types import ExecutionState, KeyGroupRange, OwnerKind, TaskManagerBeat
from jobledger.services.host import snapshot

from ..support.events import profile
from ..support.jobs import JM, JOB, JobCluster, vertex

OWNERS = {"tm-0": "tm", "tm-1": "tm", "tm-9": "tm", "tm-2-0": "tm-2", "rogue-0": "rogue"}
"""Each TaskExecutor's runner principal, as a keyring states it (`Keyring.owners`)."""


@pytest.fixture
def cluster() -> JobCluster:
    """Two TaskExecutors, tm-0 and tm-1 (runner principal `tm` owns both), and a job of two
    subtasks deployed on them, submitted by principal `alice`."""
    c = JobCluster(task_executors=2, slots=1)
    [job, *_] = c.submit([vertex("v", 2)])
    assert c.driver.admit(job, "alice", "client") is None  # binds alice as the submitter
    return c


def attempts(c: JobCluster) -> dict[str, str]:
    """Each current attempt's TaskExecutor."""
    return {
        d.execution_attempt_id: d.resource_id for d in c.deployments()
    }  # fmt: skip


def test_a_runner_speaks_for_the_task_executors_the_keyring_states_never_for_a_name(cluster):
    """Principal `tm` once owned `tm-2-0` of principal `tm-2`, its name being a prefix of the
    ResourceID: ownership is what the keyring states, and the reason names the owner."""
    c = cluster
    beats = {rid: c.clock(TaskManagerHeartbeat, resource_id=rid)
             for rid in ("tm-0", "tm-2-0", "tm", "tm-7")}  # fmt: skip
    assert {rid: c.driver.admit(beat, "tm", "runner", OWNERS) for rid, beat in beats.items()} == {
        "tm-0": None,
        "tm-2-0": "tm (runner) wrote TaskManagerHeartbeat for TaskExecutor 'tm-2-0', which is "
        "not its own (it is tm-2's)",
        "tm": "tm (runner) wrote TaskManagerHeartbeat for TaskExecutor 'tm', which is not its "
        "own (the keyring states no owner)",
        "tm-7": "tm (runner) wrote TaskManagerHeartbeat for TaskExecutor 'tm-7', which is not "
        "its own (the keyring states no owner)",
    }
    assert c.driver.admit(beats["tm-2-0"], "tm-2", "runner", OWNERS) is None
    # a keyring that states nothing gives a runner nothing
    assert c.driver.admit(beats["tm-0"], "tm", "runner") is not None


def test_only_the_services_write_decisions_and_timers(cluster):
    c = cluster
    decision = next(e for e in c.log if e.cause_event_id is not None and e.producer == "jobmaster")
    tick = c.clock(TimerFired, at=5, scope=OwnerKind.JOB, owner_id=JOB).model_copy(
        update={"producer": CLOCK}
    )
    assert c.driver.admit(tick, "services", "services") is None
    assert c.driver.admit(tick, "mallory", "client") == (
        "mallory (client) wrote TimerFired: only the services decide and keep time"
    )
    assert c.driver.admit(decision, "admin", "admin") == (
        "admin (admin) wrote a decision: only the services decide and keep time"
    )


def test_the_services_write_no_input():
    c = JobCluster()
    job = c.clock(JobSubmitted, job_id="j2", job_name="x", vertices=[vertex("v", 1)])
    assert c.driver.admit(job, "services", "services") == (
        "services (services) wrote JobSubmitted, an input: the services write only decisions "
        "and timers"
    )


def test_a_runner_registers_and_beats_only_for_its_own_task_executors(cluster):
    c = cluster
    registered = c.clock(TaskManagerRegistered, resource_id="tm-9", address="a:1",
                         number_of_slots=1, resource_profile=profile(1.0, 1024))  # fmt: skip
    assert c.driver.admit(registered, "tm", "runner", OWNERS) is None
    assert c.driver.admit(registered, "rogue", "runner", OWNERS) == (
        "rogue (runner) wrote TaskManagerRegistered for TaskExecutor 'tm-9', which is not its own "
        "(it is tm's)"
    )
    beat = c.clock(TaskManagerHeartbeat, resource_id="tm-0")
    assert c.driver.admit(beat, "tm", "runner", OWNERS) is None
    assert c.driver.admit(beat, "tm-0x", "runner", OWNERS) is not None
    batch = c.clock(TaskManagerHeartbeatsReported, runner_id="tm", beats=[
        TaskManagerBeat(resource_id=rid) for rid in ("tm-0", "tm-1", "tm-2-0")])  # fmt: skip
    assert c.driver.admit(batch, "tm", "runner", OWNERS) == (
        "tm (runner) wrote TaskManagerHeartbeatsReported with a beat of TaskExecutor 'tm-2-0', "
        "which is not its own (it is tm-2's)"
    )
    batch.beats.pop()
    assert c.driver.admit(batch, "tm", "runner", OWNERS) is None
    assert c.driver.admit(registered, "alice", "client") == (
        "alice (client) wrote TaskManagerRegistered: a client writes only submissions and "
        "requests about its jobs"
    )


def test_only_the_runner_of_an_attempts_task_executor_reports_its_state(cluster):
    c = cluster
    attempt, where = next(iter(attempts(c).items()))
    report = c.state_report(attempt, ExecutionState.FAILED, "java.lang.RuntimeException: forged")
    assert c.driver.admit(report, "tm", "runner", OWNERS) is None
    assert c.driver.admit(report, "rogue", "runner", OWNERS) == (
        f"rogue (runner) reported attempt {attempt} of job {JOB}, which runs on TaskExecutor "
        f"{where}, not its own (it is tm's)"
    )
    claiming = report.model_copy(update={"resource_id": "rogue-0"})
    assert c.driver.admit(claiming, "rogue", "runner", OWNERS) is not None
    # an attempt the job does not run is the JobMaster's to reject, with its own reason
    unknown = c.state_report("no-such-attempt", ExecutionState.FINISHED)
    assert c.driver.admit(unknown, "rogue", "runner", OWNERS) is None


def test_a_task_speaks_to_its_job_only_from_a_runner_hosting_it(cluster):
    c = cluster
    registered = c.clock(
        KvStateRegistered, job_id=JOB, job_master_id=JM, job_vertex_id="v",
        key_group_range=KeyGroupRange(start_key_group=0, end_key_group=1),
        registration_name="r", kv_state_id="k", server_host="h", server_port=1,
    )  # fmt: skip
    aggregate = c.clock(GlobalAggregateUpdateRequested, job_id=JOB, job_master_id=JM,
                        aggregate_name="a", value=1)  # fmt: skip
    for event in (registered, aggregate):
        assert c.driver.admit(event, "tm", "runner", OWNERS) is None
        assert c.driver.admit(event, "rogue", "runner", OWNERS) == (
            f"rogue (runner) wrote {event.type_name()} for job {JOB}, none of whose tasks it runs"
        )


def test_only_the_submitter_or_an_admin_cancels_or_rescales_a_job(cluster):
    c = cluster
    cancel = c.clock(JobCancellationRequested, job_id=JOB)
    rescale = c.clock(RescaleRequested, job_id=JOB, new_parallelism=1)
    for event in (cancel, rescale):
        assert c.driver.admit(event, "mallory", "client") == (
            f"mallory (client) wrote {event.type_name()} for job {JOB}, submitted by alice: "
            "only its submitter or an admin may"
        )
        assert c.driver.admit(event, "alice", "client") is None
        assert c.driver.admit(event, "root", "admin") is None


def test_leadership_is_granted_by_the_submission_or_an_admin_never_seized(cluster):
    c = cluster
    seize = c.clock(JobMasterLeadershipGranted, job_id=JOB, job_master_id="jm-mallory")
    assert c.driver.admit(seize, "mallory", "client") == (
        f"mallory (client) wrote JobMasterLeadershipGranted for job {JOB}, submitted by alice: "
        "only its submitter or an admin may"
    )
    assert c.driver.admit(seize, "alice", "client") == (
        f"alice (client) wrote JobMasterLeadershipGranted for job {JOB}, which has a leader: "
        "leadership is granted only by the submission or an admin"
    )
    assert c.driver.admit(seize, "root", "admin") is None


def test_a_submission_binds_its_job_to_the_first_submitter_only():
    c = JobCluster()
    job = c.clock(JobSubmitted, job_id="j2", job_name="x", vertices=[vertex("v", 1)])
    lead = c.clock(JobMasterLeadershipGranted, job_id="j2", job_master_id="jm-2")
    assert c.driver.admit(job, "alice", "client") is None
    assert c.driver.admit(job, "mallory", "client") == (
        "mallory (client) submitted job j2, which alice submitted"
    )
    assert c.driver.admit(lead, "alice", "client") is None  # the submission's own grant
    assert c.driver.submitters == {"j2": "alice"}


def test_a_lost_task_manager_is_an_admins_word_or_its_own_runners_as_it_shuts_down(cluster):
    c = cluster
    lost = c.clock(TaskManagerLost, resource_id="tm-0", cause="operator")
    assert c.driver.admit(lost, "root", "admin") is None
    assert c.driver.admit(lost, "tm", "runner", OWNERS) is None
    assert c.driver.admit(lost, "rogue", "runner", OWNERS) == (
        "rogue (runner) wrote TaskManagerLost for TaskExecutor 'tm-0', which is not its own "
        "(it is tm's)"
    )
    assert c.driver.admit(lost, "alice", "client", OWNERS) == (
        "alice (client) wrote TaskManagerLost: a client writes only submissions and requests "
        "about its jobs"
    )


def test_a_rebuilt_partition_remembers_who_submitted_its_jobs(cluster):
    """The submitters travel in the partition's snapshot: an owner that starts from it
    refuses what the first one refused."""
    restored = snapshot.decode(snapshot.encode(snapshot.Snapshot(cluster.driver, 7)))
    assert restored.driver.submitters == {JOB: "alice"}
    cancel = cluster.clock(JobCancellationRequested, job_id=JOB)
    assert restored.driver.admit(cancel, "mallory", "client") == (
        f"mallory (client) wrote JobCancellationRequested for job {JOB}, submitted by alice: "
        "only its submitter or an admin may"
    )
