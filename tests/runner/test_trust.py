"""Which decisions read from the TaskExecutor topic a runner with a keyring acts on
(`services/runner/trust.py`): only those a `services` key signed; anything else is one warning
line and changes nothing. The rows are built as Spark hands them to `foreachBatch`
(bytearrays, header structs, local times)."""

from __future__ import annotations

import logging
from datetime import datetime
from types import SimpleNamespace

import pytest
from pyspark.sql import Row

from jobledger.schemas import Event, EventSerde
from jobledger.schemas.cluster import TaskManagerConnectionClosed
from jobledger.schemas.tasks import (
    ResultPartitionsReleased,
    TaskCancellationRequested,
    TaskDeploymentRequested,
    TaskSubmissionAccepted,
)
from jobledger.schemas.types import JobStatus
from jobledger.services.runner.metrics import RunnerMetrics
from jobledger.services.runner.routing import BatchRouter
from jobledger.services.runner.runner import RunnerConfig, warn_if_unchecked
from jobledger.services.runner.trust import ServicesDecisions, decision_refusal
from jobledger.services.signing import TYPE_HEADER, Keyring, SigningKey

TOPIC = "sec.taskexecutor"
TE = "runner-0"
RELEASE = ResultPartitionsReleased(
    event_id="e-1",
    event_time=1,
    producer="jm",
    job_id="job-1",
    resource_id=TE,
    job_status=JobStatus.FINISHED,
)
VALUE = EventSerde().encode(RELEASE, TOPIC)
APPENDED_MS = 1_700_000_000_123


def row(signer: SigningKey | None, event: Event = RELEASE, value: bytes | None = None,
        topic: str = TOPIC) -> Row:  # fmt: skip
    """`event` as the query's row: `signer`'s signature over `topic` (none: unsigned) and
    `value` (default: the event's own bytes), which the row carries as written on TOPIC."""
    written = EventSerde().encode(event, TOPIC)
    kind = event.type_name()
    headers = [(TYPE_HEADER, kind.encode())]
    if signer is not None:
        headers += signer.headers(topic, TE.encode(), value or written, kind).items()
    return Row(
        value=bytearray(written), topic=TOPIC, key=bytearray(TE.encode()),
        timestamp=datetime.fromtimestamp(APPENDED_MS / 1000),
        headers=[Row(key=k, value=bytearray(v)) for k, v in headers],
    )  # fmt: skip


@pytest.fixture
def keys() -> dict[str, SigningKey]:
    return {who: SigningKey.generate() for who in ("services", "runner", "client", "stranger")}


@pytest.fixture
def keyring(keys) -> Keyring:
    ring = Keyring({})
    for who in ("services", "runner", "client"):
        ring.add(keys[who], who, who)
    return ring


def test_a_decision_the_services_signed_is_acted_on(keys, keyring):
    assert decision_refusal(keyring, row(keys["services"])) is None


def test_a_decision_anyone_else_wrote_is_refused_saying_why(keys, keyring):
    services_id = keys["services"].key_id
    refusals = {
        "unsigned": decision_refusal(keyring, row(None)),
        "a client's": decision_refusal(keyring, row(keys["client"])),
        "a runner's": decision_refusal(keyring, row(keys["runner"])),
        "a stranger's": decision_refusal(keyring, row(keys["stranger"])),
        "of other bytes": decision_refusal(keyring, row(keys["services"], value=VALUE + b"\0")),
        "for another topic": decision_refusal(keyring, row(keys["services"], topic="x.te")),
    }  # fmt: skip
    bad = f"bad signature for key {services_id} (services): the record is not what that key signed"
    assert refusals == {
        "unsigned": "unsigned record (no jobledger.signer/jobledger.signature header)",
        "a client's": "written by client (client): only the services decide",
        "a runner's": "written by runner (runner): only the services decide",
        "a stranger's": f"signed by key '{keys['stranger'].key_id}', which is not in the keyring",
        "of other bytes": bad,
        "for another topic": bad,
    }


def test_a_revoked_services_key_is_believed_only_for_what_was_appended_before(keys, keyring):
    """The row's local time read back as the broker's milliseconds, to the millisecond."""
    keyring.revoke("services", APPENDED_MS + 1)
    assert decision_refusal(keyring, row(keys["services"])) is None
    again = Keyring({})
    again.add(keys["services"], "services", "services")
    again.revoke("services", APPENDED_MS)
    assert decision_refusal(again, row(keys["services"])) == (
        f"signed by key {keys['services'].key_id} of services, revoked at {APPENDED_MS} "
        f"(the record was appended at {APPENDED_MS})"
    )


def _event(cls: type[Event], n: int, **fields) -> Event:
    return cls(event_id=f"{cls.type_name()}-{n}", event_time=1, producer="taskexecutor",
               resource_id=TE, **fields)  # fmt: skip


def _deployment(attempt: str) -> TaskDeploymentRequested:
    return _event(TaskDeploymentRequested, 0, job_id="job-1", job_master_id="jm",
                  execution_attempt_id=attempt, vertex_id="v", subtask_index=0,
                  attempt_number=0, number_of_subtasks=1, max_parallelism=128,
                  allocation_id=f"alloc-{attempt}", slot_index=0, invokable_class_name="chain",
                  operators=[], inputs=[])  # fmt: skip


def _acceptance(d: TaskDeploymentRequested) -> TaskSubmissionAccepted:
    return _event(TaskSubmissionAccepted, 0, job_id=d.job_id,
                  execution_attempt_id=d.execution_attempt_id,
                  allocation_id=d.allocation_id)  # fmt: skip


def _cancellation(n: int, attempt: str) -> TaskCancellationRequested:
    return _event(TaskCancellationRequested, n, job_id="job-1", execution_attempt_id=attempt)


class _Actions:
    """What the router asked of the runner's parts, in order."""

    def __init__(self) -> None:
        self.done: list[tuple[str, str]] = []
        self.resource_ids = [TE]

    def is_live(self, resource_id: str) -> bool:
        return True

    def submit(self, group, *args) -> None:
        if callable(group):  # the pool: a release
            self.done.append(("release", args[0]))
        else:
            self.done += [("run", a) for a in sorted(d.execution_attempt_id
                                                     for d in group.deployments)]  # fmt: skip

    def cancel(self, attempt: str) -> None:
        self.done.append(("cancel", attempt))

    def report(self, deployment, state) -> None:
        self.done.append((f"report {state.value}", deployment.execution_attempt_id))

    def on_connection_closed(self, event) -> None:
        self.done.append(("connection closed", event.resource_id))


def _route(decisions: ServicesDecisions, *batches: list[Row]) -> list[tuple[str, str]]:
    actions = _Actions()
    releases = SimpleNamespace(release=lambda job_id: None)
    router = BatchRouter(actions, actions, actions, releases, decisions, actions, actions,
                         RunnerMetrics())  # fmt: skip
    for n, rows in enumerate(batches):
        router.on_batch(SimpleNamespace(collect=lambda rows=rows: rows), n)
    return actions.done


def test_the_router_acts_only_on_decisions_the_services_signed(keys, keyring, caplog):
    """A tenant forges a cancellation of a running task (unsigned, and signed by a client
    key), a deployment with its acceptance, a closed connection and a release: none is acted
    on, each is one warning line; the real deployment runs and the real cancellation stops it."""
    caplog.set_level(logging.WARNING, "jobledger.runner")
    services, client = keys["services"], keys["client"]
    real, forged = _deployment("a-real"), _deployment("a-forged")
    closed = _event(TaskManagerConnectionClosed, 0, resource_manager_id="rm", cause="forged")
    batches = (
        [row(services, real), row(services, _acceptance(real))],
        [row(None, _cancellation(1, "a-real")), row(client, _cancellation(2, "a-real")),
         row(client, forged), row(client, _acceptance(forged)), row(None, closed),
         row(keys["runner"], RELEASE)],
        [row(services, _cancellation(3, "a-real"))],
    )  # fmt: skip

    done = _route(ServicesDecisions(keyring), *batches)

    assert done == [("run", "a-real"), ("cancel", "a-real")]
    unsigned = "unsigned record (no jobledger.signer/jobledger.signature header)"
    by_client = "written by client (client): only the services decide"
    assert [r.getMessage() for r in caplog.records] == [
        f"ignored TaskCancellationRequested for attempt a-real of job job-1: {unsigned}",
        f"ignored TaskCancellationRequested for attempt a-real of job job-1: {by_client}",
        f"ignored TaskDeploymentRequested for attempt a-forged of job job-1: {by_client}",
        f"ignored TaskSubmissionAccepted for attempt a-forged of job job-1: {by_client}",
        f"ignored TaskManagerConnectionClosed for TaskExecutor {TE}: {unsigned}",
        "ignored ResultPartitionsReleased for job job-1: written by runner (runner): only the "
        "services decide",
    ]


def test_without_a_keyring_every_decision_is_believed(keys):
    forged = _deployment("a-forged")
    done = _route(ServicesDecisions(None),
                  [row(None, forged), row(keys["client"], _acceptance(forged))],
                  [row(None, _cancellation(1, "a-forged"))])  # fmt: skip
    assert done == [("run", "a-forged"), ("cancel", "a-forged")]


@pytest.mark.parametrize(
    ("signs", "properties", "with_keyring", "warned"),
    [(True, (), False, True), (False, (("security.protocol", "SASL_SSL"),), False, True),
     (True, (), True, False), (False, (), False, False)],
)  # fmt: skip
def test_a_runner_of_a_secured_cluster_without_a_keyring_says_so(
    keys, keyring, caplog, signs, properties, with_keyring, warned
):
    """Signing its records, or authenticating to Kafka, it is on a secured cluster: with no
    keyring it believes every decision, and says so in one line."""
    caplog.set_level(logging.WARNING, "jobledger.runner")
    config = RunnerConfig(
        bootstrap="b:1", prefix="sec.", checkpoint="/nowhere", runner_id="rk",
        signing_key=keys["runner"].pem() if signs else None, client_properties=properties,
        keyring=keyring if with_keyring else None,
    )  # fmt: skip
    warn_if_unchecked(config)
    assert [r.getMessage() for r in caplog.records] == (
        ["runner rk has no keyring (--keyring) on a secured cluster: it acts on every "
         "deployment, cancellation, release and registration answer on the TaskExecutor "
         "topic, whoever wrote it"] if warned else []
    )  # fmt: skip
