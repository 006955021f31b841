"""One task: an execution attempt of a vertex, run inside a Spark task on an executor.

It reports INITIALIZING, then RUNNING once its chain is accepted, and ends FINISHED or FAILED
with the error. Everything the attempt produces (result partitions, queryable state and its
KvStateRegistered, topic sink records) is written in one Kafka transaction together with
FINISHED, so a failed or retried attempt leaves nothing half-visible. Status events have ids
derived from the deployment's, so a Spark retry or a restarted query reporting the same state
again is dropped by the JobMaster as a duplicate.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache, partial
from itertools import chain
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from pyspark import TaskContext

from jobledger.schemas import Event, EventSerde
from jobledger.schemas.kvstate import KvStateRegistered
from jobledger.schemas.tasks import (
    TaskDeploymentRequested,
    TaskExecutionStateChanged,
    TaskFinalStateReported,
)
from jobledger.schemas.types import ExecutionState, OperatorSpec

from .. import kafka, signing
from ..control.decisions import derived_id
from ..control.execution_state import TERMINAL
from ..control.key_groups import compute_key_group_range_for_operator_index
from . import kv_state, task_producers
from .exchange import ResultWriter, create_result_topics, read_input_gate
from .operators import (
    FunctionLoader,
    Keyed,
    Subtask,
    aggregate,
    check_chain,
    confined_path,
    confined_topic,
    open_source,
    run_transforms,
    split_chain,
    to_json,
    write_file_sink,
)
from .start_gate import may_start

PRODUCER = "runner"


class InjectedFailure(RuntimeError):
    """The failure an operator's `fail_on_attempt` config asks for (tests, `--fail-once`)."""


@dataclass(frozen=True)
class RunnerSettings:
    """What a task needs to know of its runner; shipped to the executors with each task."""

    bootstrap: str
    prefix: str
    allowed_modules: frozenset[str] = frozenset()
    gate_url: str = ""
    """The driver's start gate (`start_gate.py`), asked before each attempt starts."""
    lease_url: str = ""
    """Where the driver leases the tasks' transactional ids (`task_producers.py`)."""
    transactional_id: str = ""
    """Prefix of the Python workers' transactional ids (`task_producers.py`)."""
    spark_job: str = ""
    """The Spark job's group, which the driver leases the ids of its tasks to."""
    data_roots: tuple[Path, ...] = ()
    """The directories (resolved on the driver when the runner started) that `text_file`
    sources and `file` sinks may use; none: no file is read or written."""
    client_properties: tuple[tuple[str, str], ...] = ()
    """The operator's Kafka client properties (`-F`/`-X`), for the executors' clients."""
    signing_key: bytes | None = None
    """The runner principal's signing key (PEM), for the records the executors write."""


_serde = EventSerde()


def task_producer(
    bootstrap: str, transactional_id: str, failures: list[KafkaError] | None = None
) -> Producer:
    """A transactional producer under a fixed id: starting it aborts whatever transaction a
    predecessor with the same id left open. Records
    whose delivery failed go to `failures`, so a transaction missing one is never committed
    as if it were whole."""

    def delivered(error: KafkaError | None, _msg: object) -> None:
        if error is not None and failures is not None:
            failures.append(error)

    return kafka.producer(
        bootstrap, transactional_id, extra={"linger.ms": 1, "on_delivery": delivered}
    )


def final_state_event(
    deployment: TaskDeploymentRequested, state: ExecutionState
) -> TaskFinalStateReported:
    """The same end told to the attempt's TaskExecutor, which unregisters the task."""
    return TaskFinalStateReported(
        event_id=derived_id(deployment.event_id, f"runner/final/{state.value}"),
        event_time=int(time.time() * 1000),
        producer=PRODUCER,
        job_id=deployment.job_id,
        resource_id=deployment.resource_id,
        execution_attempt_id=deployment.execution_attempt_id,
        execution_state=state,
    )


def state_event(
    deployment: TaskDeploymentRequested, state: ExecutionState, error: str | None = None
) -> TaskExecutionStateChanged:
    """The runner's report of one state of an attempt; its id depends only on the deployment
    and the state, so reporting it twice is reporting it once."""
    return TaskExecutionStateChanged(
        event_id=derived_id(deployment.event_id, f"runner/{state.value}"),
        event_time=int(time.time() * 1000),
        producer=PRODUCER,
        job_id=deployment.job_id,
        job_master_id=deployment.job_master_id,
        execution_attempt_id=deployment.execution_attempt_id,
        execution_state=state,
        error=error,
        resource_id=deployment.resource_id,
    )


class TaskIO:
    """The attempt's writes, all transactional (read_committed readers see an attempt's
    writes whole or not at all). INITIALIZING + RUNNING commit together before the chain
    runs, unless there is no chain (a no-op attempt reports everything at its end); what the
    attempt produces commits with its final state."""

    def __init__(
        self,
        settings: RunnerSettings,
        deployment: TaskDeploymentRequested,
        producer: Producer,
        failures: list[KafkaError],
    ) -> None:
        self.settings = settings
        self.deployment = deployment
        self.producer = producer
        self.failures = failures
        self.open = False
        self.pending: list[tuple[ExecutionState, str | None]] = []

    def emit(self, event: Event) -> None:
        kafka.produce_event(self.producer, self.settings.prefix, event, _serde)

    def output(self) -> Producer:
        """The transactional producer, inside the attempt's transaction."""
        if not self.open:
            self.producer.begin_transaction()
            self.open = True
        return self.producer

    def report(self, *states: tuple[ExecutionState, str | None], now: bool = True) -> None:
        """States that happened together, committed now (or, with `now=False`, with the
        attempt's last transaction); a final state is also told to the TaskExecutor."""
        self.pending += states
        if not now:
            return
        self.output()
        for state, error in self.pending:
            self.emit(state_event(self.deployment, state, error))
            if state in TERMINAL:
                self.emit(final_state_event(self.deployment, state))
        self.pending = []
        self.producer.flush(60)
        if self.failures:
            error = self.failures[0]
            self.failures.clear()
            raise KafkaException(error)  # the caller aborts: never commit a partial output
        self.producer.commit_transaction(60)
        self.open = False

    def finish(self) -> None:
        """FINISHED, atomically with everything the attempt produced."""
        self.report((ExecutionState.FINISHED, None))

    def fail(self, error: str) -> None:
        if self.open:
            # An abort that does not complete (nor a commit before it) leaves the producer
            # unusable: librdkafka lacks KIP-890, so either may still reach the broker late,
            # into this producer's next transaction. The KafkaException fails the Spark
            # task: its producer is closed, the driver fences its id and reports the
            # attempts FAILED.
            self.producer.abort_transaction(30)
            self.open = False
        self.report((ExecutionState.FAILED, error))

    def sink(self, spec: OperatorSpec, records: Iterable[Any]) -> None:
        d = self.deployment
        if spec.name == "file":
            path = confined_path(spec, self.settings.data_roots)
            write_file_sink(path, d.subtask_index, records)
            return
        topic, producer = confined_topic(spec, self.settings.prefix), self.output()
        for record in records:
            key = to_json(record.key) if isinstance(record, Keyed) else None
            producer.produce(
                topic, key=None if key is None else json.dumps(key).encode(),
                value=json.dumps(to_json(record)).encode(),
            )  # fmt: skip

    def register_kv_state(self, registration_name: str, state: dict[Any, Any]) -> None:
        """Publish the state and register this attempt as the KvState instance for the
        subtask's key groups."""
        d = self.deployment
        kv_state_id = d.execution_attempt_id
        kv_state.publish(self.output(), self.settings.prefix, kv_state_id, state)
        groups = compute_key_group_range_for_operator_index(
            d.max_parallelism, d.number_of_subtasks, d.subtask_index
        )
        self.emit(KvStateRegistered(
            event_id=derived_id(d.event_id, f"runner/kvstate/{registration_name}"),
            event_time=int(time.time() * 1000), producer=PRODUCER, job_id=d.job_id,
            job_master_id=d.job_master_id, job_vertex_id=d.vertex_id,
            key_group_range=groups.to_record(),
            registration_name=registration_name, kv_state_id=kv_state_id,
            server_host=d.resource_id, server_port=0,
        ))  # fmt: skip


def _fail_where_asked(
    chain_specs: list[OperatorSpec], attempt: int, records: Iterator[Any]
) -> Iterator[Any]:
    """Let one record through, then fail, if an operator asks to fail on this attempt."""
    failing = [s.name for s in chain_specs if s.config.get("fail_on_attempt") == str(attempt)]
    if not failing:
        yield from records
        return
    yield from (r for _, r in zip(range(1), records, strict=False))
    raise InjectedFailure(f"operator {failing[0]!r} fails on attempt {attempt} as configured")


def _execute(
    d: TaskDeploymentRequested, settings: RunnerSettings, loader: FunctionLoader, io: TaskIO
) -> None:
    subtask = Subtask(d.subtask_index, d.number_of_subtasks)
    parts = split_chain(d.operators)
    if parts.source is not None:
        records: Iterator[Any] = open_source(parts.source, subtask, settings.data_roots)
    else:
        records = chain.from_iterable(
            read_input_gate(settings.bootstrap, settings.prefix, d.job_id, d.vertex_id,
                            d.subtask_index, d.attempt_number, gate)
            for gate in d.inputs
        )  # fmt: skip
    records = _fail_where_asked(d.operators, d.attempt_number, records)
    records = run_transforms(parts.before, records, loader, io.sink)
    if parts.aggregation is not None:
        state = aggregate(parts.aggregation.name, records)
        name = parts.aggregation.config.get("queryable")
        if name:
            io.register_kv_state(name, state)
        keyed = (Keyed(k, v) for k, v in state.items())
        records = run_transforms(parts.after, keyed, loader, io.sink)
    if d.outputs:
        writer = ResultWriter(
            io.output(), settings.prefix, d.job_id, d.vertex_id, d.subtask_index,
            d.number_of_subtasks, d.attempt_number, d.outputs,
        )  # fmt: skip
        create_result_topics(settings.bootstrap, writer.topics())
        writer.write_all(records)
    else:
        for _ in records:
            pass


@cache
def _signing_key(pem: bytes | None) -> signing.SigningKey | None:
    """The key of a PEM, read once per Python worker."""
    return signing.SigningKey.from_pem(pem) if pem else None


def run_tasks(settings: RunnerSettings, deployments: Iterable[bytes]) -> Iterator[str]:
    """One Spark task's share of a job's deployments (their records as the driver read them,
    decoded here once), one after another (a Spark task costs more than a no-op deployment),
    each started only if the driver's start gate says so.
    Consecutive attempts with nothing to run (no operators, inputs or outputs) report their
    whole lives in one shared transaction: a commit per no-op attempt was most of its cost.
    They write with the Python worker's producer, leased to this task and kept for the
    worker's next task if this one ends clean (`task_producers.py`)."""
    kafka.use_client_properties(dict(settings.client_properties))
    signing.use_signing_key(_signing_key(settings.signing_key))
    context = TaskContext.get()
    partition = context.partitionId() if context is not None else 0
    held = task_producers.acquire(
        settings.bootstrap, settings.transactional_id, settings.lease_url, settings.spark_job,
        partition, partial(task_producer, settings.bootstrap),
    )  # fmt: skip
    producer, failures = held.producer, held.failures
    clean = False
    try:
        noops: list[TaskDeploymentRequested] = []
        for payload in deployments:
            deployment = _serde.decode(payload, "")
            assert isinstance(deployment, TaskDeploymentRequested)
            if not (deployment.operators or deployment.inputs or deployment.outputs):
                noops.append(deployment)
                continue
            yield from _finish_noops(settings, producer, failures, noops)
            if deployment.execution_attempt_id in may_start(
                settings.gate_url, [deployment.execution_attempt_id]
            ):
                yield run_task(settings, deployment, producer, failures)
        yield from _finish_noops(settings, producer, failures, noops)
        clean = True
    finally:
        task_producers.release(settings.bootstrap, settings.transactional_id, held, clean)


def _finish_noops(
    settings: RunnerSettings,
    producer: Producer,
    failures: list[KafkaError],
    noops: list[TaskDeploymentRequested],
) -> list[str]:
    if not noops:
        return []
    allowed = may_start(settings.gate_url, [d.execution_attempt_id for d in noops])
    started = [d for d in noops if d.execution_attempt_id in allowed]
    noops.clear()
    lives = (ExecutionState.INITIALIZING, ExecutionState.RUNNING, ExecutionState.FINISHED)
    events: list[Event] = []
    for deployment in started:
        events += [state_event(deployment, state) for state in lives]
        events.append(final_state_event(deployment, ExecutionState.FINISHED))
    if events:
        kafka.append_events(producer, settings.prefix, events, _serde)
    if failures:  # a report was lost after all: fail the Spark task, the driver reports FAILED
        raise KafkaException(failures[0])
    return [ExecutionState.FINISHED.value] * len(started)


def run_task(
    settings: RunnerSettings,
    deployment: TaskDeploymentRequested,
    producer: Producer,
    failures: list[KafkaError],
) -> str:
    """Run one deployment to its end; returns the final state's name. Never raises for what
    the task does: a bad chain, a raising operator or bad input end as FAILED."""
    io = TaskIO(settings, deployment, producer, failures)
    loader = FunctionLoader(settings.allowed_modules)
    try:
        check_chain(
            deployment.operators, bool(deployment.inputs), loader, settings.prefix,
            settings.data_roots,
        )  # fmt: skip
    except Exception as exc:
        io.report((ExecutionState.INITIALIZING, None), (ExecutionState.FAILED, _error(exc)))
        return ExecutionState.FAILED.value
    started = ((ExecutionState.INITIALIZING, None), (ExecutionState.RUNNING, None))
    io.report(*started, now=bool(deployment.operators))
    try:
        _execute(deployment, settings, loader, io)
        io.finish()
    except Exception as exc:
        io.fail(_error(exc))
        return ExecutionState.FAILED.value
    return ExecutionState.FINISHED.value


def _error(exc: BaseException) -> str:
    """The error and its cause chain as the JobMaster reads them (throwable_classifier.py):
    `Type: message`, then a `Caused by: ` line per cause, so that a user's function raising
    an exception named SuppressRestartsException (or raising from one) fails the job without
    restart (RS-4)."""
    lines: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        prefix = "Caused by: " if lines else ""
        lines.append(f"{prefix}{type(current).__name__}: {current}")
        current = current.__cause__ or current.__context__
    return "\n".join(lines)
