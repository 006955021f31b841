"""Who may write which input, once a record's signature has said who wrote it.

Kafka's ACLs say who may write a topic; every role writes the owners' inboxes, so they
cannot say who may write which event. This says it, per principal role (`signing.ROLES`),
from the event and what the reducers know (after Kafka's `Authorizer`: a principal, an
operation, a resource; the answer is a refusal or nothing):

- `services` write the reducers' decisions and the clock's `TimerFired`, and nothing else;
  nobody else writes those.
- a `runner` writes what a TaskExecutor and its tasks say, for TaskExecutors it owns (a
  record of beats: every one its own): the keyring states each TaskExecutor's owner
  (`owners`: ResourceID -> principal, from `signing.Keyring.owners`), and nothing else does;
  a name is never read as a claim (a prefix rule once gave principal `rk` the TaskExecutor
  `rk-2-0` of principal `rk-2`). Why the
  keyring and not the first registration: every partition that judges a runner's record
  needs the binding (the ResourceManager's for registrations and beats, the TaskExecutors'
  for final states, the jobs' for task reports), and only the keyring is known to all of
  them, and to replay, without a decision to carry it; nor can a runner claim a TaskExecutor
  by registering it before its owner does. A task's report is about an execution attempt:
  the attempt's TaskExecutor, as its JobMaster placed it, must be the runner's own.
- a `client` submits a job and is then that job's submitter (the binding lives in the
  reducer driver, and in its snapshots); only the submitter cancels or rescales it, and grants
  its first leadership (the Dispatcher's part of the submission), never once the job has a
  leader.
- an `admin` writes any input: an operator's lost TaskManager, a cancellation of anyone's
  job, a new leader.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from jobledger.schemas import Event
from jobledger.schemas.cluster import (
    JobMasterHeartbeatTimedOut,
    JobMasterRegistrationRequested,
    ResourceManagerConnected,
    ResourceManagerHeartbeatTimedOut,
    TaskManagerDisconnected,
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
from jobledger.schemas.kvstate import KvStateRegistered, KvStateUnregistered
from jobledger.schemas.slots import AllocationFailed, SlotOfferFailed
from jobledger.schemas.tasks import TaskExecutionStateChanged, TaskFinalStateReported
from jobledger.schemas.timers import TimerFired

SERVICES, RUNNER, CLIENT, ADMIN = "services", "runner", "client", "admin"

TASK_EXECUTOR_EVENTS = (
    TaskManagerRegistered, TaskManagerHeartbeat, TaskFinalStateReported, SlotOfferFailed,
    JobMasterRegistrationRequested, TaskManagerDisconnected, JobMasterHeartbeatTimedOut,
    ResourceManagerHeartbeatTimedOut, AllocationFailed, TaskManagerLost,
)  # fmt: skip
"""What a TaskExecutor says in its own name: each names its resource id (`TaskManagerLost`:
its own instance shutting down)."""
TASK_EVENTS = (TaskExecutionStateChanged,)
"""What a task says about its execution attempt."""
JOB_TASK_EVENTS = (KvStateRegistered, KvStateUnregistered, GlobalAggregateUpdateRequested)
"""What a task says to its job without naming its attempt: from a runner hosting the job."""
SUBMITTER_EVENTS = (JobCancellationRequested, RescaleRequested, ResourceManagerConnected)
"""What only a job's submitter (or an admin) asks of it; the Dispatcher connects a new job's
JobMaster to the ResourceManager in the submitter's name."""


class JobView(Protocol):
    """What the authorizer asks of the job partitions' reducers (`ReducerDriver`)."""

    def submitter_of(self, job_id: str) -> str | None: ...

    def has_leader(self, job_id: str) -> bool: ...

    def attempt_location(self, job_id: str, attempt_id: str) -> str | None: ...

    def job_locations(self, job_id: str) -> set[str]: ...


NO_OWNERS: Mapping[str, str] = {}


def _whose(owners: Mapping[str, str], resource_id: str | None) -> str:
    owner = owners.get(resource_id) if resource_id is not None else None
    return "the keyring states no owner" if owner is None else f"it is {owner}'s"


def refusal(
    event: Event, principal: str, role: str, jobs: JobView, deciding: bool,
    owners: Mapping[str, str] = NO_OWNERS,
) -> str | None:  # fmt: skip
    """Why `principal` (of `role`) may not write `event`, or None; `deciding`: the event
    claims to be a reducer's decision; `owners`: each TaskExecutor's runner principal, as the
    keyring states it."""
    who = f"{principal} ({role})"
    if deciding or isinstance(event, TimerFired):
        if role == SERVICES:
            return None
        what = "TimerFired" if isinstance(event, TimerFired) else "a decision"
        return f"{who} wrote {what}: only the services decide and keep time"
    name = event.type_name()
    if role == SERVICES:
        return f"{who} wrote {name}, an input: the services write only decisions and timers"
    if role == ADMIN:
        return None
    if role == RUNNER:
        return _runner_refusal(event, principal, who, jobs, owners)
    if role == CLIENT:
        return _client_refusal(event, principal, who, jobs)
    return f"{who}: no such role"


def _runner_refusal(
    event: Event, principal: str, who: str, jobs: JobView, owners: Mapping[str, str]
) -> str | None:
    name = event.type_name()
    if isinstance(event, TASK_EXECUTOR_EVENTS):
        resource_id = getattr(event, "resource_id", None)
        if resource_id is None or owners.get(resource_id) != principal:
            return (
                f"{who} wrote {name} for TaskExecutor {resource_id!r}, which is not its own "
                f"({_whose(owners, resource_id)})"
            )
        return None
    if isinstance(event, TaskManagerHeartbeatsReported):
        for beat in event.beats:
            if owners.get(beat.resource_id) != principal:
                return (
                    f"{who} wrote {name} with a beat of TaskExecutor {beat.resource_id!r}, "
                    f"which is not its own ({_whose(owners, beat.resource_id)})"
                )
        return None
    if isinstance(event, TASK_EVENTS):
        located = jobs.attempt_location(event.job_id, event.execution_attempt_id)
        for resource_id in (located, event.resource_id):
            if resource_id is not None and owners.get(resource_id) != principal:
                return (
                    f"{who} reported attempt {event.execution_attempt_id} of job "
                    f"{event.job_id}, which runs on TaskExecutor {resource_id}, not its own "
                    f"({_whose(owners, resource_id)})"
                )
        return None
    if isinstance(event, JOB_TASK_EVENTS):
        if any(owners.get(rid) == principal for rid in jobs.job_locations(event.job_id)):
            return None
        return f"{who} wrote {name} for job {event.job_id}, none of whose tasks it runs"
    return f"{who} wrote {name}: a runner writes only what its TaskExecutors and tasks say"


def _client_refusal(event: Event, principal: str, who: str, jobs: JobView) -> str | None:
    name = event.type_name()
    if isinstance(event, JobSubmitted):
        submitter = jobs.submitter_of(event.job_id)
        if submitter not in (None, principal):
            return f"{who} submitted job {event.job_id}, which {submitter} submitted"
        if event.principal not in (None, principal):
            return (
                f"{who} submitted job {event.job_id} as principal {event.principal!r}: a job "
                "counts against its signer's limits, or the anonymous tenant's"
            )
        return None
    if isinstance(event, (*SUBMITTER_EVENTS, JobMasterLeadershipGranted)):
        submitter = jobs.submitter_of(event.job_id)
        if submitter != principal:
            return (
                f"{who} wrote {name} for job {event.job_id}, submitted by "
                f"{submitter or 'nobody'}: only its submitter or an admin may"
            )
        if isinstance(event, JobMasterLeadershipGranted) and jobs.has_leader(event.job_id):
            return (
                f"{who} wrote {name} for job {event.job_id}, which has a leader: leadership "
                "is granted only by the submission or an admin"
            )
        return None
    return f"{who} wrote {name}: a client writes only submissions and requests about its jobs"
