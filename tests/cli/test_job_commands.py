"""`jobledger job submit | cancel | wait` and `jobledger kvstate lookup`: bad JobGraphs and
builders refused before the broker is touched, then whole jobs over a real broker with the
services running in this process and the test acting as the task runner."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter, defaultdict
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from jobledger.cli import main
from jobledger.cli.job import TIMED_OUT, load_job_graph
from jobledger.projections.debugging.history import history
from jobledger.projections.log.job_results import JobWatcher
from jobledger.projections.log.positions import log_order
from jobledger.schemas import Event, EventSerde, topic_name
from jobledger.schemas.cluster import TaskManagerRegistered
from jobledger.schemas.deadletters import DeadLettered
from jobledger.schemas.jobs import JobStatusChanged, JobSubmitted
from jobledger.schemas.kvstate import KvStateRegistered
from jobledger.schemas.tasks import (
    TaskCancellationRequested,
    TaskDeploymentRequested,
    TaskExecutionStateChanged,
    TaskFinalStateReported,
    TaskSubmissionAccepted,
)
from jobledger.schemas.topics import TopicRole
from jobledger.schemas.types import ExecutionState, JobStatus
from jobledger.services.client import dispatcher
from jobledger.services.client.dispatcher import JobGraphRefused, check_job_graph
from jobledger.services.control.key_groups import (
    assign_to_key_group,
    compute_key_group_range_for_operator_index,
)
from jobledger.services.kafka import append_events, read_committed_consumer, transactional_producer
from jobledger.services.kafka_topics import partitions_of
from jobledger.services.local.loopback import free_port
from jobledger.services.runner import kv_state

from ..support.events import ANY
from ..support.runtime_harness import RuntimeThread, append, read

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "jobgraph.json"
AWAITED_ONLY = {"idle_commit_interval_s": 3600.0}
"""Services that commit past a record deriving nothing only if a client waits on it (a job's
end, a refusal): `job wait` believes those once committed past, so it ends only if that holds."""
GRAPH = json.loads(EXAMPLE.read_text())
RANGE = {"name": "range", "config": {"start": "0", "end": "9"}}
NOPE = "jobledger.services.runner.functions:nope"
"""A built-in function that does not exist."""


def _with(**changes: Any) -> dict[str, Any]:
    """The example JobGraph with `changes` applied to its first vertex (None removes)."""
    graph = json.loads(json.dumps(GRAPH))
    for name, value in changes.items():
        if value is None:
            del graph["vertices"][0][name]
        else:
            graph["vertices"][0][name] = value
    return graph


# -- refused at the edge: no broker is asked (an unreachable one would exit 69) -------------


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("{not json", "not JSON: Expecting property name"),
        ("[1, 2]", "a JobGraph is a JSON object, not list"),
        (json.dumps(_with(parallelism=None)), "vertices.0.parallelism: Field required"),
        (json.dumps(_with(parallelism="2")), "vertices.0.parallelism: Input should be a valid"),
        (json.dumps(_with(colour="red")), "vertices.0.colour: Extra inputs are not permitted"),
        (json.dumps(_with(parallelism=0)), "vertex numbers: parallelism 0 is not in 1..32768"),
        (
            json.dumps(
                _with(inputs=[{"source_vertex_id": "count", "distribution_pattern": "POINTWISE"}])
            ),
            "invalid JobGraph: the JobGraph has a cycle",
        ),
        (json.dumps({**GRAPH, "vertices": []}), "a JobGraph needs at least one vertex"),
        (json.dumps({**GRAPH, "type": "SlotOffered"}), "type is 'SlotOffered'"),
        (
            '{"job_name": "x", "vertices": [], "restart_strategy": {"delay_ms": NaN}}',
            "NaN is not a JSON number",
        ),
        (
            json.dumps(_with(operators=[{"name": "rangee", "config": {"start": "0"}}])),
            "vertex 'numbers': unknown operator 'rangee' (did you mean 'range'?); built-ins: ",
        ),
        (
            json.dumps(_with(operators=[{"name": "range", "config": {"start": "0"}}])),
            "vertex 'numbers': operator 'range' needs config 'end'",
        ),
        (
            json.dumps(_with(operators=[{"name": "range", "config": {"start": "0", "end": "x"}}])),
            "vertex 'numbers': operator 'range': end is not an integer",
        ),
        (
            json.dumps(_with(operators=[{"name": "key_by"}])),
            "vertex 'numbers': a vertex without inputs must start with a source, not 'key_by'",
        ),
        (
            json.dumps(_with(operators=[RANGE, {"name": "map", "config": {"function": NOPE}}])),
            "vertex 'numbers': `jobledger.services.runner.functions:nope` is not an exported",
        ),
    ],
    ids=[
        "not-json",
        "not-object",
        "missing",
        "mistyped",
        "unknown-field",
        "parallelism",
        "cycle",
        "no-vertex",
        "other-event",
        "nan",
        "operator-name",
        "operator-config",
        "operator-config-type",
        "no-source",
        "no-such-builtin-function",
    ],
)
def test_a_bad_jobgraph_file_is_one_line_naming_the_field_and_nothing_is_written(
    document, message, tmp_path, capsys
):
    path = tmp_path / "graph.json"
    path.write_text(document)
    unreachable = f"127.0.0.1:{free_port()}"
    assert main(["job", "submit", str(path), "--bootstrap", unreachable]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"jobledger: {path}: ") and message in line, line


def test_a_function_of_a_users_module_is_a_warning_naming_the_runners_allow_list(tmp_path, capsys):
    """Only the runner knows its allow-list: the submission says what it needs, and goes on."""
    graph = _with(operators=[
        {"name": "range", "config": {"start": "0", "end": "9"}},
        {"name": "map", "config": {"function": "mypkg.ops:double"}},
    ])  # fmt: skip
    path = tmp_path / "graph.json"
    path.write_text(json.dumps(graph))
    unreachable = f"127.0.0.1:{free_port()}"
    assert main(["job", "submit", str(path), "--bootstrap", unreachable]) == 69
    first = capsys.readouterr().err.splitlines()[0]
    assert first == (
        "jobledger: warning: vertex 'numbers' calls mypkg.ops: a runner runs it only with "
        "`--allow-module mypkg.ops`"
    )


def _builder_module(tmp_path: Path, monkeypatch, body: str) -> str:
    name = f"graphs_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(body)
    monkeypatch.chdir(tmp_path)
    return name


@pytest.mark.parametrize(
    ("body", "function", "message"),
    [
        ("def build():\n    return 7\n", "build", "build() returned int, not a JobGraph"),
        ("def build():\n    raise KeyError('x')\n", "build", "build() raised KeyError: 'x'"),
        ("def build():\n    return {}\n", "other", "has no function other"),
        ("import no_such_module_here\n", "build", "ModuleNotFoundError"),
        ("def build():\n    return {'job_name': object()}\n", "build", "not JSON data"),
        (
            "def build():\n    return {'job_name': 'x', 'vertices': [{'parallelism': 1e999}]}\n",
            "build",
            "not JSON data: the JobGraph.vertices[0].parallelism is inf, not a JSON number",
        ),
    ],
    ids=["returns-int", "raises", "no-function", "import-fails", "not-json-data", "infinity"],
)
def test_a_bad_builder_is_one_line(body, function, message, tmp_path, monkeypatch, capsys):
    module = _builder_module(tmp_path, monkeypatch, body)
    unreachable = f"127.0.0.1:{free_port()}"
    assert main(["job", "submit", f"{module}:{function}", "--bootstrap", unreachable]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert message in line, line


def test_neither_a_file_nor_a_builder_is_one_line(capsys):
    assert main(["job", "submit", "no/such/graph.json", "--bootstrap", "127.0.0.1:1"]) == 1
    assert capsys.readouterr().err == (
        "jobledger: no/such/graph.json: no such file, and not a Python builder module:function\n"
    )


def test_a_builder_returns_the_json_form_or_a_jobsubmitted(tmp_path, monkeypatch):
    module = _builder_module(
        tmp_path, monkeypatch,
        "import json\nfrom jobledger.schemas import EventSerde\n"
        "from jobledger.services.client.dispatcher import check_job_graph\n"
        f"GRAPH = json.loads({json.dumps(json.dumps(GRAPH))})\n"
        "def as_dict():\n    return GRAPH\n"
        "def as_event():\n"
        "    return check_job_graph(GRAPH, 'builder', EventSerde(), '', 'fixed-id').event\n",
    )  # fmt: skip
    from_dict, name = load_job_graph(f"{module}:as_dict")
    from_event, _ = load_job_graph(f"{module}:as_event")
    assert name == "as_dict"
    one = _checked(from_dict, "cli", "job-1")
    other = _checked(from_event, "cli", "job-1")
    assert one.model_dump(exclude={"event_id", "event_time"}) == other.model_dump(
        exclude={"event_id", "event_time"}
    )
    assert (one.job_name, one.producer, len(one.vertices)) == ("count numbers", "cli", 2)


def test_submit_names_the_principal_and_refuses_one_the_jobmaster_would_at_once(tmp_path, capsys):
    assert check_job_graph(GRAPH, "cli", EventSerde(), "").event.principal is None
    named = check_job_graph({**GRAPH, "principal": "bob"}, "cli", EventSerde(), "")
    assert named.event.principal == "bob"
    chosen = check_job_graph({**GRAPH, "principal": "bob"}, "cli", EventSerde(), "", None,
                             None, None, "alice")  # fmt: skip
    assert chosen.event.principal == "alice"
    path = tmp_path / "graph.json"
    path.write_text(json.dumps(GRAPH))
    unreachable = f"127.0.0.1:{free_port()}"
    argv = ["job", "submit", str(path), "--bootstrap", unreachable, "--principal", "x" * 257]
    assert main(argv) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line == f"jobledger: {path}: principal is 257 characters, not 1 to 256"


def _checked(graph: Any, producer: str, job_id: str | None = None) -> JobSubmitted:
    """The event of a JobGraph checked for no topic prefix."""
    job = check_job_graph(graph, producer, EventSerde(), "", job_id).event
    assert isinstance(job, JobSubmitted)
    return job


def test_the_submission_header_is_jobledgers_and_the_job_id_is_chosen_in_order():
    old = {**GRAPH, "type": "JobSubmitted", "event_id": "old", "producer": "jobmaster",
           "job_id": "from-file"}  # fmt: skip
    assert _checked(old, "cli").job_id == "from-file"
    assert _checked(old, "cli", "given").job_id == "given"
    fresh = _checked(GRAPH, "cli")
    assert (len(fresh.job_id), fresh.producer) == (32, "cli")
    assert _checked(old, "cli").event_id != "old"
    with pytest.raises(JobGraphRefused, match="job_name: Field required"):
        _checked({"vertices": GRAPH["vertices"]}, "cli")


class _CountingSerde(EventSerde):
    """An EventSerde that counts what it encodes, by event type."""

    def __init__(self) -> None:
        super().__init__()
        self.encoded: Counter[str] = Counter()

    def encode(self, event: Event, topic: str) -> bytes:
        self.encoded[event.type_name()] += 1
        return super().encode(event, topic)


class _RecordingProducer:
    """What `dispatcher.submit` does with its producer, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def begin_transaction(self) -> None:
        self.calls.append(("begin",))

    def produce(
        self, topic: str, key: bytes, value: bytes, headers: dict[str, str], on_delivery=None
    ) -> None:
        self.calls.append(("produce", topic, key, value, headers))

    def commit_transaction(self, timeout: float) -> None:
        self.calls.append(("commit",))


def test_a_jobgraph_is_encoded_once_and_its_checked_bytes_are_what_is_written():
    serde = _CountingSerde()
    checked = check_job_graph(GRAPH, "cli", serde, "p-", "job-1")
    producer = _RecordingProducer()
    events = dispatcher.submit(producer, "p-", checked, serde)  # type: ignore[arg-type]
    assert serde.encoded == Counter(
        JobSubmitted=1, JobMasterLeadershipGranted=1, ResourceManagerConnected=1
    )
    job_topic = topic_name(TopicRole.JOB, "p-")
    assert [c[0] for c in producer.calls] == ["begin", "produce", "produce", "produce", "commit"]
    assert producer.calls[1] == (
        "produce", job_topic, b"job-1", checked.value, {"jobledger.type": "JobSubmitted"}
    )  # fmt: skip
    assert EventSerde().decode(checked.value, job_topic) == events[0] == checked.event
    assert checked.value == EventSerde().encode(checked.event, job_topic)


# -- over a real broker ---------------------------------------------------------------------


def _event(cls: type[Event], **fields: Any) -> Event:
    return cls(event_id=uuid.uuid4().hex, event_time=int(time.time() * 1000),
               producer="test-runner", **fields)  # fmt: skip


class TaskRunnerStandIn:
    """The test as the task runner of TaskExecutor `tm-1`: every deployment its
    TaskExecutor accepted goes INITIALIZING and RUNNING, then FINISHED if `finish` (a `count`
    subtask first registers and publishes its queryable state: every number of its key
    groups counted once); every cancellation is CANCELED."""

    def __init__(self, cluster, finish: bool) -> None:
        self.cluster, self.finish = cluster, finish
        self.serde = EventSerde()
        self.producer = transactional_producer(cluster.bootstrap, "test-runner")
        self.consumer = read_committed_consumer(cluster.bootstrap)
        topic = topic_name(TopicRole.TASK_EXECUTOR, cluster.prefix)
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING)
                              for p in partitions_of(self.consumer, topic)])  # fmt: skip
        self.stopping = threading.Event()
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TaskRunnerStandIn:
        registered = _event(TaskManagerRegistered, resource_id="tm-1", address="test",
                            number_of_slots=4, resource_profile=ANY)  # fmt: skip
        append(self.cluster, [registered])
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self.thread.join(30)
        self.consumer.close()
        assert self.failure is None, self.failure

    def _run(self) -> None:
        deployments: dict[str, TaskDeploymentRequested] = {}
        try:
            while not self.stopping.is_set():
                for msg in self.consumer.consume(100, 0.1):
                    if msg.error() is None:
                        self._on(self.serde.decode(msg.value(), msg.topic()), deployments)
        except BaseException as exc:  # reported by __exit__, in the test's thread
            self.failure = exc

    def _on(self, event: Event, deployments: dict[str, TaskDeploymentRequested]) -> None:
        if isinstance(event, TaskDeploymentRequested):
            deployments[event.execution_attempt_id] = event
        elif isinstance(event, TaskSubmissionAccepted):
            d = deployments[event.execution_attempt_id]
            states = [ExecutionState.INITIALIZING, ExecutionState.RUNNING]
            if self.finish and d.vertex_id == "count":
                self._publish_counts(d)
            self._report(d, [*states, ExecutionState.FINISHED] if self.finish else states)
        elif isinstance(event, TaskCancellationRequested):
            self._report(deployments[event.execution_attempt_id], [ExecutionState.CANCELED])

    def _report(self, d: TaskDeploymentRequested, states: list[ExecutionState]) -> None:
        events: list[Event] = [
            _event(TaskExecutionStateChanged, job_id=d.job_id, job_master_id=d.job_master_id,
                   execution_attempt_id=d.execution_attempt_id, execution_state=state,
                   resource_id=d.resource_id)
            for state in states
        ]  # fmt: skip
        if states[-1] in (ExecutionState.FINISHED, ExecutionState.CANCELED):
            events.append(_event(TaskFinalStateReported, job_id=d.job_id,
                                 resource_id=d.resource_id, execution_state=states[-1],
                                 execution_attempt_id=d.execution_attempt_id))  # fmt: skip
        append_events(self.producer, self.cluster.prefix, events, self.serde)

    def _publish_counts(self, d: TaskDeploymentRequested) -> None:
        groups = compute_key_group_range_for_operator_index(
            d.max_parallelism, d.number_of_subtasks, d.subtask_index
        )
        kv_state_id = f"kv-{d.execution_attempt_id}"
        mine = {n: 1 for n in range(1000)
                if assign_to_key_group(n, d.max_parallelism) in groups}  # fmt: skip
        self.producer.begin_transaction()
        kv_state.publish(self.producer, self.cluster.prefix, kv_state_id, mine)
        self.producer.commit_transaction(30)
        registered = _event(
            KvStateRegistered, job_id=d.job_id, job_master_id=d.job_master_id,
            job_vertex_id="count", key_group_range=groups.to_record(),
            registration_name="counts", kv_state_id=kv_state_id, server_host="127.0.0.1",
            server_port=9069,
        )  # fmt: skip
        append_events(self.producer, self.cluster.prefix, [registered], self.serde)


def jobledger(cluster, capsys, *argv: str) -> tuple[int, str, str]:
    """`jobledger ARGV` in this process against the test's topics: status, stdout, stderr."""
    capsys.readouterr()
    status = main([*argv, "--bootstrap", cluster.bootstrap, "--topic-prefix", cluster.prefix])
    out, err = capsys.readouterr()
    return status, out, err


def wait_for_log(cluster, found, what: str, limit_s: float = 60.0):
    """The first truthy `found(records)` as the log grows; AssertionError after `limit_s`."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        hit = found(log_order(read(cluster)))
        if hit:
            return hit
        time.sleep(0.3)
    raise AssertionError(f"{what} did not happen within {limit_s:.0f} s")


def statuses(records, job_id: str) -> list[str]:
    return [r.event.to_status.value for r in records
            if isinstance(r.event, JobStatusChanged) and r.event.job_id == job_id]  # fmt: skip


@pytest.mark.broker
def test_submit_the_jobmaster_decides_cancel_and_wait_says_canceled(cluster, capsys):
    with RuntimeThread(cluster, **AWAITED_ONLY), TaskRunnerStandIn(cluster, finish=False):
        status, out, err = jobledger(cluster, capsys, "job", "submit", str(EXAMPLE))
        assert status == 0, err
        job_id = out.strip()
        assert len(job_id) == 32 and f"submitted job {job_id} ('count numbers'" in err

        # the JobMaster's decisions: the job runs and both source subtasks are deployed
        records = wait_for_log(cluster, lambda rs: rs if sum(
            isinstance(r.event, TaskExecutionStateChanged) and r.event.job_id == job_id
            and r.event.execution_state is ExecutionState.RUNNING for r in rs) == 2 else None,
            "both sources RUNNING")  # fmt: skip
        story = [e.record.event for e in history(records, job_id, timers=False)]
        submitted = [e for e in story if e.producer == "cli"]
        assert [e.type_name() for e in submitted] == [
            "JobSubmitted", "JobMasterLeadershipGranted", "ResourceManagerConnected"
        ]  # fmt: skip
        assert statuses(records, job_id) == ["CREATED", "RUNNING"]
        deployed = sorted((e.vertex_id, e.subtask_index) for e in story
                          if isinstance(e, TaskDeploymentRequested))  # fmt: skip
        assert deployed == [("numbers", 0), ("numbers", 1)]

        status, out, _ = jobledger(cluster, capsys, "job", "cancel", job_id)
        assert status == 0
        assert out.startswith(f"cancellation of job {job_id} requested (it was RUNNING)")

        status, out, _ = jobledger(cluster, capsys, "job", "wait", job_id, "--timeout", "60")
        assert status == 1
        assert out.startswith(f"job {job_id} CANCELED at ")
    assert statuses(read(cluster), job_id) == ["CREATED", "RUNNING", "CANCELLING", "CANCELED"]

    status, _, err = jobledger(cluster, capsys, "job", "cancel", job_id)
    assert (status, err) == (1, f"jobledger: job {job_id} has already ended: CANCELED\n")


@pytest.mark.broker
def test_submit_tasks_finish_wait_says_finished_and_the_counts_are_queryable(cluster, capsys):
    with RuntimeThread(cluster, **AWAITED_ONLY), TaskRunnerStandIn(cluster, finish=True):
        status, out, err = jobledger(
            cluster, capsys, "job", "submit", str(EXAMPLE), "--job-id", "numbers-1", "-o", "json"
        )
        assert status == 0, err
        answer = json.loads(out)
        assert answer["job_id"] == "numbers-1" and answer["subtasks"] == 4
        status, out, _ = jobledger(
            cluster, capsys, "job", "wait", "numbers-1", "--timeout", "60", "-o", "json"
        )
        assert status == 0
        result = json.loads(out)
        assert (result["status"], result["ended"], result["cause"]) == ("FINISHED", True, None)

        status, out, err = jobledger(
            cluster, capsys, "kvstate", "lookup", "numbers-1", "counts", "7", "--json-key"
        )
        assert status == 0, err
        assert out.splitlines()[0] == "counts[7] = 1"
        assert "-> KvState kv-" in out.splitlines()[1]
        status, out, _ = jobledger(cluster, capsys, "kvstate", "lookup", "numbers-1", "counts",
                                   "999", "--json-key", "-o", "json")  # fmt: skip
        assert (status, json.loads(out)["value"]) == (0, 1)

    status, _, err = jobledger(cluster, capsys, "kvstate", "lookup", "numbers-1", "counts", "7")
    assert status == 1 and err.startswith("jobledger: no value for key '7' in 'counts'")
    status, _, err = jobledger(cluster, capsys, "kvstate", "lookup", "numbers-1", "sums", "7")
    assert (status, err) == (
        1, "jobledger: job numbers-1 has no queryable state 'sums'; registered: counts\n"
    )  # fmt: skip
    status, _, err = jobledger(cluster, capsys, "kvstate", "lookup", "numbers-2", "counts", "7")
    assert (status, err) == (1, "jobledger: no job 'numbers-2' in the log; jobs: numbers-1\n")

    status, _, err = jobledger(
        cluster, capsys, "job", "submit", str(EXAMPLE), "--job-id", "numbers-1"
    )
    assert (status, err) == (1, "jobledger: job numbers-1 was already submitted (it is "
                             "FINISHED); give another --job-id\n")  # fmt: skip


@pytest.mark.broker
def test_wait_past_its_timeout_says_what_the_job_waits_for(cluster, capsys):
    status, out, err = jobledger(cluster, capsys, "job", "submit", str(EXAMPLE), "--job-id", "j1")
    assert status == 0, err

    # no services read the topics: the submission itself waits
    status, out, err = jobledger(cluster, capsys, "job", "wait", "j1", "--timeout", "1")
    assert status == TIMED_OUT
    assert err == "jobledger: job j1 did not end within 1 s (it is not started yet)\n"
    assert out.startswith("job j1 is not started yet after 1 s, waiting for:\n")
    assert "the services to read 3 of the job's records (the first: JobSubmitted at job/" in out
    assert (
        f"no `jobledger services run` is in their group jobledger-services-{cluster.prefix}\n"
        in out
    )

    # services, but no TaskExecutor: each source subtask waits for a slot
    with RuntimeThread(cluster):
        wait_for_log(cluster, lambda rs: "RUNNING" in statuses(rs, "j1"), "the job RUNNING")
        status, out, err = jobledger(
            cluster, capsys, "job", "wait", "j1", "--timeout", "1", "-o", "json"
        )
    assert status == TIMED_OUT
    report = json.loads(out)
    assert (report["status"], report["ended"]) == ("RUNNING", False)
    progress, *waits = report["waiting_for"]
    assert "no `jobledger services run`" not in progress, "one instance runs: it says so"
    assert [w.split(" is ")[0] for w in waits] == [
        "j1/numbers[0] attempt 0", "j1/numbers[1] attempt 0",
        "j1/count[0] attempt 0", "j1/count[1] attempt 0",
    ]  # fmt: skip
    assert "SCHEDULED, waiting for a slot: no TaskExecutor" in waits[0], waits[0]
    assert waits[2].endswith("CREATED, not scheduled yet: waiting for its inputs to be ready")


@pytest.mark.broker
def test_views_show_a_job_no_services_decided_as_submitted_never_running(cluster, capsys):
    """With no services running, the reducers of `job list` and `job show` derive RUNNING
    from the submission alone; the views say what the services decided, and of this job
    nothing yet. Once the services have read it, their RUNNING is shown."""
    assert jobledger(cluster, capsys, "job", "submit", str(EXAMPLE), "--job-id", "j1")[0] == 0

    status, out, _ = jobledger(cluster, capsys, "job", "list")
    assert status == 0
    assert out.splitlines()[1:] == [
        "------------------ Submitted Jobs (no services have decided them yet) ------------------",
        f"{out.splitlines()[2].split(' : ')[0]} : j1 : count numbers (SUBMITTED; 0/4 tasks "
        "finished, 0 restart(s), 0.0 s)",
    ]
    status, out, _ = jobledger(cluster, capsys, "job", "show", "j1")
    assert status == 0 and "RUNNING" not in out and "SCHEDULED" not in out, out
    assert out.splitlines()[1] == (
        "job j1 'count numbers': SUBMITTED (no services have decided it yet), 0 restart(s)"
    )
    assert out.count("  no subtask is scheduled: the services have not read the job yet") == 2
    status, out, _ = jobledger(cluster, capsys, "job", "show", "j1", "-o", "json")
    shown = json.loads(out)
    assert (shown["state"], shown["decided"]) == ("INITIALIZING", False)

    with RuntimeThread(cluster):
        wait_for_log(cluster, lambda rs: "RUNNING" in statuses(rs, "j1"), "the job RUNNING")
    status, out, _ = jobledger(cluster, capsys, "job", "list", "-o", "json")
    [job] = json.loads(out)["jobs"]
    assert (job["state"], job["decided"]) == ("RUNNING", True)
    status, out, _ = jobledger(cluster, capsys, "job", "show", "j1")
    assert out.splitlines()[1] == "job j1 'count numbers': RUNNING, 0 restart(s)"
    assert "[0] #0 SCHEDULED" in out


@pytest.mark.broker
def test_an_unknown_job_is_one_line_naming_the_jobs_that_exist(cluster, capsys):
    assert jobledger(cluster, capsys, "job", "submit", str(EXAMPLE), "--job-id", "known")[0] == 0
    for command in (["job", "wait", "nope", "--timeout", "30"], ["job", "cancel", "nope"]):
        status, out, err = jobledger(cluster, capsys, *command)
        assert (status, out) == (1, "")
        assert err == f"jobledger: no job 'nope' was submitted on {cluster.prefix}*; jobs: known\n"


@pytest.mark.broker
def test_wait_and_cancel_say_at_once_that_the_jobmaster_refused_a_submission(cluster, capsys):
    """A JobGraph written past `job submit`'s checks (any Kafka client can) is refused by the
    JobMaster with a reason; waiting for that job would be waiting forever."""
    cyclic = _with(inputs=[{"source_vertex_id": "count", "distribution_pattern": "POINTWISE"}])
    job = JobSubmitted.model_validate_json(json.dumps({
        **cyclic, "job_id": "cyclic", "event_id": "in-1", "event_time": 1, "producer": "test",
    }))  # fmt: skip
    append(cluster, [job])
    with RuntimeThread(cluster, **AWAITED_ONLY):
        status, out, err = jobledger(cluster, capsys, "job", "wait", "cyclic", "--timeout", "60")
    assert (status, out) == (1, "")
    assert err == ("jobledger: the JobMaster refused job cyclic: invalid JobGraph: the JobGraph "
                   "has a cycle\n")  # fmt: skip
    status, _, err = jobledger(cluster, capsys, "job", "cancel", "cyclic")
    assert (status, err) == (1, "jobledger: the JobMaster refused job cyclic, nothing to cancel: "
                                "invalid JobGraph: the JobGraph has a cycle\n")  # fmt: skip


@pytest.mark.broker
def test_wait_believes_no_end_the_services_dead_lettered(cluster, capsys):
    """Any Kafka client can write a JobStatusChanged in the JobMaster's name. The services
    dead-letter it (the JobMaster derived no such decision), and `job wait` waits for their
    judgement before it believes an end: it goes on waiting and says what it ignored."""
    assert jobledger(cluster, capsys, "job", "submit", str(EXAMPLE), "--job-id", "j2")[0] == 0
    with RuntimeThread(cluster):
        running = wait_for_log(cluster, lambda rs: next(
            (r for r in rs if isinstance(r.event, JobStatusChanged) and r.event.job_id == "j2"
             and r.event.to_status.value == "RUNNING"), None), "the job RUNNING")  # fmt: skip
        forged = running.event.model_copy(update={
            "event_id": "forged-end", "from_status": running.event.to_status,
            "to_status": JobStatus.FINISHED,
        })  # fmt: skip
        append(cluster, [forged])
        dead = wait_for_log(
            cluster,
            lambda rs: next((r for r in rs if isinstance(r.event, DeadLettered)), None),
            "the dead letter",
        )
        status, out, err = jobledger(
            cluster, capsys, "job", "wait", "j2", "--timeout", "2", "-o", "json"
        )
    assert (status, err) == (
        TIMED_OUT,
        "jobledger: job j2 did not end within 2 s (it is RUNNING)\n",
    )
    report = json.loads(out)
    assert (report["status"], report["ended"]) == ("RUNNING", False)
    place = f"job/{dead.event.source_partition}@{dead.event.source_offset}"
    assert report["ignored"] == [f"JobStatusChanged at {place}: {dead.event.reason}"]
    assert dead.event.reason == (
        "JobStatusChanged claims to be a decision of the JobMaster of job 'j2', which derived no "
        "event 'forged-end'"
    )


def _watching_an_end_not_judged(cluster, capsys, job_id: str, end_id: str):
    """A watcher of job `job_id`, run by the services until RUNNING, that has read an end in
    the JobMaster's name appended with the services down (`end_id`, which the JobMaster never
    derived): read, not judged. Returns the watcher (the caller closes it) and the RUNNING
    record."""
    assert jobledger(cluster, capsys, "job", "submit", str(EXAMPLE), "--job-id", job_id)[0] == 0
    with RuntimeThread(cluster):
        running = wait_for_log(cluster, lambda rs: next(
            (r for r in rs if isinstance(r.event, JobStatusChanged) and r.event.job_id == job_id
             and r.event.to_status is JobStatus.RUNNING), None), "the job RUNNING")  # fmt: skip
    watcher = JobWatcher(cluster.bootstrap, cluster.prefix, (job_id,))
    try:
        watcher.catch_up(30)
        append(cluster, [running.event.model_copy(update={
            "event_id": end_id, "from_status": JobStatus.RUNNING,
            "to_status": JobStatus.FINISHED,
        })])  # fmt: skip
        deadline = time.monotonic() + 30
        while watcher.status(job_id) is not JobStatus.FINISHED:
            assert time.monotonic() < deadline, "the watcher did not read the end"
            watcher.poll()
    except BaseException:
        watcher.close()
        raise
    return watcher, running


@pytest.mark.broker
def test_a_watcher_judges_an_end_by_the_dead_letters_written_after_it_read_them(cluster, capsys):
    """The watcher read the forged end, and the dead letters to their end, before the services
    judged it: their commit past the end is the news, so the dead letters are read again up to
    where they end then (the dead letter may have come after the watcher's last poll) before
    the end is believed or not. Here nothing is polled between the services' judgement and
    `judge`, so an end believed on the committed offset alone is believed."""
    watcher, running = _watching_an_end_not_judged(cluster, capsys, "j3", "forged-end")
    try:
        with RuntimeThread(cluster):
            wait_for_log(cluster, lambda rs: any(
                isinstance(r.event, DeadLettered) for r in rs), "the dead letter")  # fmt: skip
            deadline = time.monotonic() + 30
            while "j3" not in watcher.forged and "j3" not in watcher.ended:
                assert time.monotonic() < deadline, "the services' judgement was not seen"
                watcher.judge(30)
    finally:
        watcher.close()
    assert "j3" not in watcher.ended
    [claim] = watcher.forged["j3"]
    assert claim.startswith(f"JobStatusChanged at job/{running.partition}@"), claim
    assert claim.endswith("which derived no event 'forged-end'"), claim


class _Waits:
    """A watcher's consumer that notes how long each of its polls may wait for a record."""

    def __init__(self, consumer) -> None:
        self.consumer, self.waits = consumer, []

    def consume(self, num_messages: int, timeout: float):
        if timeout:  # consume_available's second call takes what already arrived, waiting 0
            self.waits.append(timeout)
        return self.consumer.consume(num_messages, timeout)

    def __getattr__(self, name: str):
        return getattr(self.consumer, name)


class _Enough(Exception):
    """Ends a wait after the polls a test looks at."""


@pytest.mark.broker
def test_a_watcher_looks_for_the_judgement_of_an_end_soon_then_ever_less_often(cluster, capsys):
    """The services' commit past an end wakes no poll (it writes no record), so a watcher
    holding an end they have not judged yet asks again after a brief wait, some times, then
    twice as long each time, up to the usual poll. Here the services are down: nothing judges
    it."""
    watcher, _ = _watching_an_end_not_judged(cluster, capsys, "j4", "unjudged-end")
    try:
        watcher.consumer = consumer = _Waits(watcher.consumer)
        looks = iter(range(26))

        def alive() -> None:
            if next(looks) == 25:
                raise _Enough

        with pytest.raises(_Enough):
            watcher.wait("j4", 60, alive)
    finally:
        watcher.close()
    assert consumer.waits == [0.005] * 20 + [0.01, 0.02, 0.04, 0.05, 0.05]
    assert "j4" not in watcher.ended


class _MovingCoordinator:
    """An admin client whose first answer to each request is a refusal, as a broker gives
    while a leader or coordinator moves elsewhere (a node of the cluster restarting)."""

    def __init__(self, admin) -> None:
        self._admin = admin
        self.refused: list[str] = []

    def _refuse_once(self, name: str, code: int, real, *args, **kwargs):
        if name in self.refused:
            return real(*args, **kwargs)
        self.refused.append(name)
        future: Future = Future()
        future.set_exception(KafkaException(KafkaError(code, "moving (test)")))
        return defaultdict(lambda: future)

    def list_consumer_group_offsets(self, *args, **kwargs):
        real = self._admin.list_consumer_group_offsets
        return self._refuse_once("group offsets", KafkaError.NOT_COORDINATOR, real, *args,
                                 **kwargs)  # fmt: skip

    def list_offsets(self, *args, **kwargs):
        return self._refuse_once("offsets", KafkaError.NOT_LEADER_FOR_PARTITION,
                                 self._admin.list_offsets, *args, **kwargs)  # fmt: skip


@pytest.mark.broker
def test_a_wait_goes_on_while_a_coordinator_or_leader_moves(cluster, capsys):
    """`job wait` on a cluster whose nodes restart one after another: the admin requests
    judging an end are refused while a coordinator or a leader moves, and asked again."""
    with RuntimeThread(cluster, **AWAITED_ONLY), TaskRunnerStandIn(cluster, finish=True):
        assert jobledger(cluster, capsys, "job", "submit", str(EXAMPLE), "--job-id", "m-1")[0] == 0
        watcher = JobWatcher(cluster.bootstrap, cluster.prefix, ("m-1",))
        moving = watcher.admin = _MovingCoordinator(watcher.admin)
        try:
            end = watcher.wait("m-1", 60)
        finally:
            watcher.close()
    assert end.to_status is JobStatus.FINISHED
    assert moving.refused == ["group offsets", "offsets"]
