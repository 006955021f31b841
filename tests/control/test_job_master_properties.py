"""JobMaster invariants under random event sequences: the job status never leaves a terminal
state and only moves legally; no attempt is in two places or two states; no two attempts hold
one slot; replaying the same events gives the same decisions."""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobledger.schemas.cluster import ResourceManagerConnected, TaskManagerDisconnected
from jobledger.schemas.jobs import (
    JobCancellationRequested,
    JobMasterLeadershipGranted,
    JobMasterLeadershipRevoked,
    JobStatusChanged,
    RescaleRequested,
)
from jobledger.schemas.tasks import TaskDeploymentRequested
from jobledger.schemas.types import ExecutionState, ScheduleMode
from jobledger.services.control.job_status import TERMINAL, transition_refusal

from ..support.jobs import JM, JOB, JobCluster, fixed_delay, vertex

GRAPH = [vertex("src", 2), vertex("sink", 2, ("src", "POINTWISE", "BLOCKING"))]
REPORTABLE = [ExecutionState.INITIALIZING, ExecutionState.RUNNING, ExecutionState.FINISHED,
              ExecutionState.FAILED, ExecutionState.CANCELED, ExecutionState.SCHEDULED]  # fmt: skip

steps = st.lists(
    st.tuples(
        st.sampled_from(["report", "report", "report", "report", "tick", "cancel", "rescale",
                         "lose", "lead", "revoke", "connect", "run", "run"]),
        st.integers(0, 50), st.sampled_from(REPORTABLE), st.integers(1, 3),
        st.sampled_from([JM, "jm-2"]),
    ),
    max_size=30,
)  # fmt: skip


def play(mode: ScheduleMode, script) -> JobCluster:
    c = JobCluster()
    c.submit(GRAPH, mode=mode, restart=fixed_delay(attempts=2, delay_ms=100))
    for kind, n, state, parallelism, leader in script:
        attempts = [d.execution_attempt_id for d in c.log if isinstance(d, TaskDeploymentRequested)]
        if kind == "report" and attempts:
            c.report(attempts[n % len(attempts)], state, job_master_id=leader)
        elif kind == "run":
            c.play()
        elif kind == "tick":
            c.tick(c.clock.now + 50 * n)
        elif kind == "cancel":
            c.run([c.clock(JobCancellationRequested, job_id=JOB)])
        elif kind == "rescale":
            c.run([c.clock(RescaleRequested, job_id=JOB, new_parallelism=parallelism)])
        elif kind == "lose":
            c.run([c.clock(TaskManagerDisconnected, job_id=JOB, resource_id=f"tm-{n % 2}",
                           cause="lost")])  # fmt: skip
        elif kind == "lead":
            c.run([c.clock(JobMasterLeadershipGranted, job_id=JOB, job_master_id=leader)])
        elif kind == "revoke":
            c.run([c.clock(JobMasterLeadershipRevoked, job_id=JOB, job_master_id=leader)])
        else:
            c.run([c.clock(ResourceManagerConnected, job_id=JOB,
                           resource_manager_id="resourcemanager")])  # fmt: skip
        check(c)
    return c


def check(c: JobCluster) -> None:
    for change in (e for e in c.log if isinstance(e, JobStatusChanged)):
        assert change.from_status not in TERMINAL, f"left terminal {change.from_status}"
        assert transition_refusal(change.from_status, change.to_status) is None
    graph = c.jm.graph
    seen = Counter(
        e.attempt_id for ev in graph.execution_vertices() for e in [ev.current, *ev.prior]
    )
    assert all(n == 1 for n in seen.values()), "an attempt in two places"
    held = Counter(e.allocation_id for e in graph.executions()
                   if e.allocation_id and e.state not in (ExecutionState.FINISHED,
                                                          ExecutionState.CANCELED,
                                                          ExecutionState.FAILED))  # fmt: skip
    assert all(n == 1 for n in held.values()), "two live attempts in one slot"


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(list(ScheduleMode)[:3]), steps)
def test_job_invariants_hold_after_every_event(mode, script):
    play(mode, script)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(list(ScheduleMode)[:3]), steps)
def test_replaying_a_job_gives_the_same_decisions(mode, script):
    assert play(mode, script).log == play(mode, script).log
