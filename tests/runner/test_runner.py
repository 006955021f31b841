"""The Spark runner over the real broker and a real local Spark: the word-count demo end to
end (also with a failure and a restart), and bad deployments ending as FAILED tasks while
the runner goes on."""

from __future__ import annotations

import contextlib
import json
import logging
import random
import re
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import OffsetSpec

from jobledger.schemas import EventSerde, topic_name
from jobledger.schemas.cluster import (
    TaskManagerConnectionClosed,
    TaskManagerRegistered,
    TaskManagerRegistrationAccepted,
)
from jobledger.schemas.tasks import (
    ResultPartitionsReleased,
    TaskCancellationRequested,
    TaskDeploymentRequested,
    TaskExecutionStateChanged,
    TaskSubmissionAccepted,
)
from jobledger.schemas.topics import TopicRole
from jobledger.schemas.types import (
    DistributionPattern,
    ExecutionState,
    InputGateDeploymentDescriptor,
    JobStatus,
    OperatorSpec,
    ResultPartitionType,
)
from jobledger.services.kafka import admin_client, read_committed_consumer, transactional_producer
from jobledger.services.kafka_reads import read_topic
from jobledger.services.kafka_topics import create_topics

from ..support.events import profile

pytest.importorskip(
    "pyspark", reason="the runner needs the `spark` extra: pip install 'jobledger[spark]'"
)

from jobledger.cli import demo
from jobledger.cli.main import main
from jobledger.projections.log.log_file import read_events
from jobledger.services.runner.checkpoint import MARKER, read_log
from jobledger.services.runner.runner import RunnerConfig, TaskRunner

pytestmark = pytest.mark.broker

VOCABULARY = ["flink", "kafka", "spark", "slot", "Slot", "don't", "naïve", "über", "job-master",
              "task_executor", "x", "42", "résumé", "ALLOCATION", "the", "a"]  # fmt: skip


@pytest.fixture(scope="module")
def text(tmp_path_factory) -> Path:
    rng = random.Random(11)
    path = tmp_path_factory.mktemp("text") / "words.txt"
    lines = [" ".join(rng.choices(VOCABULARY, k=rng.randint(0, 12))) + rng.choice(["", ".", ","])
             for _ in range(3_000)]  # fmt: skip
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def plain_count(path: Path) -> Counter[str]:
    return Counter(re.findall(r"[^\W\d_]+(?:'[^\W\d_]+)*", path.read_text("utf-8").lower()))


def counted(work: Path) -> Counter[str]:
    result: Counter[str] = Counter()
    for part in work.glob("**/counts/part-*"):
        for line in part.read_text("utf-8").splitlines():
            word, n = json.loads(line)
            result[word] += n
    return result


@pytest.mark.parametrize(
    ("fail_once", "pipelined"), [(False, False), (True, False), (False, True)],
    ids=["clean", "fail-once", "pipelined"],
)  # fmt: skip
def test_the_wordcount_demo_counts_like_plain_python(spark, kafka_bootstrap, text, tmp_path,
                                                      capsys, fail_once, pipelined):  # fmt: skip
    prefix = f"demo-{uuid.uuid4().hex[:8]}."
    status = demo.run(text, kafka_bootstrap, tmp_path, parallelism=4, fail_once=fail_once,
                      pipelined=pipelined, timeout_s=240, prefix=prefix)  # fmt: skip
    printed = capsys.readouterr().out
    assert status == 0, printed
    # the job ended for good: the JobMaster released its result partitions on each
    # TaskExecutor a producer ran on, and the runner deleted their topics
    released = [r.event for r in read_events(kafka_bootstrap, prefix)
                if isinstance(r.event, ResultPartitionsReleased)]  # fmt: skip
    assert [(e.resource_id, e.job_status) for e in released] == [("runner-0", JobStatus.FINISHED)]
    topics = admin_client(kafka_bootstrap).list_topics(timeout=30).topics
    assert not [t for t in topics if t.startswith(f"{prefix}result.")]
    assert counted(tmp_path) == plain_count(text)
    assert "counts equal a plain Python count" in printed
    written = list(tmp_path.glob("*/checkpoint/**/*"))
    assert any(path.parent.name == "commits" for path in written), written
    assert not [p for p in written if p.suffix == ".crc"], "checksum files beside the checkpoint's"
    lookup = re.search(r"queryable state 'word-counts'\['(.+?)'\]: .* -> (\d+)$", printed, re.M)
    assert lookup and int(lookup[2]) == plain_count(text)[lookup[1]]
    timeline = [line for line in printed.splitlines() if re.match(r"\s+\w+\[\d+\]#\d+ on ", line)]
    if fail_once:
        assert re.search(r"count\[\d\]#0 on .*FAILED", printed)
        assert re.search(r"count\[\d\]#1 on .*FINISHED", printed)
    else:
        assert len(timeline) == 8, timeline
        assert all(
            line.endswith("FINISHED@" + line.rsplit("FINISHED@", 1)[-1]) for line in timeline
        )
        assert "FAILED" not in printed, "a finished task was failed afterwards (slot freed)"


def deployment(cluster, name: str, operators=(), inputs=(), resource_id="bad-0"):
    return TaskDeploymentRequested(
        event_id=uuid.uuid4().hex, event_time=int(time.time() * 1000), producer="jobmaster",
        job_id="bad-job", job_master_id="jm", execution_attempt_id=name, vertex_id=name,
        subtask_index=0, attempt_number=0, number_of_subtasks=1, max_parallelism=128,
        allocation_id=f"alloc-{name}", resource_id=resource_id, slot_index=0,
        invokable_class_name="chain", operators=list(operators), inputs=list(inputs),
    )  # fmt: skip


def accepted(d: TaskDeploymentRequested) -> TaskSubmissionAccepted:
    """What the TaskExecutor reducer answers to a deployment it takes (the tests play it)."""
    return TaskSubmissionAccepted(
        event_id=uuid.uuid4().hex, event_time=int(time.time() * 1000), producer="taskexecutor",
        job_id=d.job_id, resource_id=d.resource_id, execution_attempt_id=d.execution_attempt_id,
        allocation_id=d.allocation_id,
    )  # fmt: skip


def write(cluster, *events, raw: tuple[bytes, bytes] | None = None) -> None:
    """Events (and, if given, one raw key/value record) on the TaskExecutor topic, in one
    transaction, in this order."""
    producer = transactional_producer(cluster.bootstrap, "runner-test")
    serde = EventSerde()
    te_topic = topic_name(TopicRole.TASK_EXECUTOR, cluster.prefix)
    producer.begin_transaction()
    for e in events:
        producer.produce(te_topic, key=e.resource_id.encode(), value=serde.encode(e, te_topic))
    if raw is not None:
        producer.produce(te_topic, key=raw[0], value=raw[1])
    producer.commit_transaction(30)


def cancellation(d: TaskDeploymentRequested) -> TaskCancellationRequested:
    return TaskCancellationRequested(
        event_id=uuid.uuid4().hex, event_time=int(time.time() * 1000), producer="jobmaster",
        job_id=d.job_id, resource_id=d.resource_id, execution_attempt_id=d.execution_attempt_id,
    )  # fmt: skip


def reported_states(cluster) -> dict[str, list[ExecutionState]]:
    """Every state the runner reported, per attempt, in log order."""
    serde, states = EventSerde(), {}
    topic = topic_name(TopicRole.JOB, cluster.prefix)
    consumer = read_committed_consumer(cluster.bootstrap)
    for msg in read_topic(consumer, topic, True, True):
        event = serde.decode(msg.value(), topic)
        if isinstance(event, TaskExecutionStateChanged):
            states.setdefault(event.execution_attempt_id, []).append(event.execution_state)
    consumer.close()
    return states


def final_states(
    cluster, expected: int, timeout_s: float = 120
) -> dict[str, TaskExecutionStateChanged]:
    serde, deadline, ends = EventSerde(), time.monotonic() + timeout_s, {}
    topic = topic_name(TopicRole.JOB, cluster.prefix)
    while time.monotonic() < deadline and len(ends) < expected:
        consumer = read_committed_consumer(cluster.bootstrap)
        for msg in read_topic(consumer, topic, True, True):
            event = serde.decode(msg.value(), topic)
            if isinstance(event, TaskExecutionStateChanged) and event.execution_state in (
                ExecutionState.FINISHED,
                ExecutionState.FAILED,
                ExecutionState.CANCELED,
            ):
                ends[event.execution_attempt_id] = event
        consumer.close()
        time.sleep(0.5)
    return ends


def registrations(cluster, resource_id: str) -> int:
    """How often the TaskExecutor registered at the ResourceManager."""
    consumer = read_committed_consumer(cluster.bootstrap)
    try:
        topic = topic_name(TopicRole.RESOURCE_MANAGER, cluster.prefix)
        return sum(
            isinstance(event := EventSerde().decode(m.value(), topic), TaskManagerRegistered)
            and event.resource_id == resource_id
            for m in read_topic(consumer, topic, True, True)
        )
    finally:
        consumer.close()


@contextmanager
def running(
    spark, cluster, tmp_path, runner_id: str, allowed: str, **config
) -> Iterator[TaskRunner]:
    """A runner of its own (TaskExecutor `<runner_id>-0`) on the shared Spark session."""
    config = RunnerConfig(cluster.bootstrap, cluster.prefix, tmp_path / "ckpt",
                          runner_id=runner_id, allowed_modules=frozenset({allowed}),
                          **config)  # fmt: skip
    runner = TaskRunner(config, spark=spark)
    runner.start()
    try:
        registered(cluster, runner)
        yield runner
    finally:
        runner.stop()


def registered(cluster, runner: TaskRunner, timeout_s: float = 60) -> None:
    """Play the ResourceManager's acceptance of the runner's registrations (no services run
    here) and wait until the runner has read it: it runs only what is accepted for an
    instance of its own that is registered."""
    executors = runner.task_executors
    write(cluster, *[
        TaskManagerRegistrationAccepted(
            event_id=uuid.uuid4().hex, event_time=int(time.time() * 1000),
            producer="resourcemanager", resource_id=rid, resource_manager_id="resourcemanager",
            number_of_slots=executors.slots, resource_profile=profile(1.0, 1024),
            instance_id=instance,
        )
        for rid, instance in executors.current().items()
    ])  # fmt: skip
    deadline = time.monotonic() + timeout_s
    while not executors.all_live():
        assert time.monotonic() < deadline, "the runner never read its acceptance"
        time.sleep(0.05)


def test_bad_deployments_end_as_failed_tasks_and_the_runner_goes_on(spark, cluster, tmp_path):
    with running(spark, cluster, tmp_path, "bad", "json", data_roots=(tmp_path,)):
        lines = tmp_path / "lines.txt"
        lines.write_text('{"a": 1}\nnot json\n')
        bad = [
            deployment(cluster, "unknown-op", [OperatorSpec(name="teleport")]),
            deployment(cluster, "not-allowed", [
                OperatorSpec(name="range", config={"start": "0", "end": "3"}),
                OperatorSpec(name="map", config={"function": "os:system"})]),
            deployment(cluster, "raises", [
                OperatorSpec(name="text_file", config={"path": str(lines)}),
                OperatorSpec(name="map", config={"function": "json:loads"})]),
            deployment(cluster, "no-input", [OperatorSpec(name="count")], inputs=[
                InputGateDeploymentDescriptor(source_vertex_id="ghost",
                                              distribution_pattern=DistributionPattern.ALL_TO_ALL,
                                              result_partition_type=ResultPartitionType.BLOCKING,
                                              consumed_subtask_indexes=[0])]),
            deployment(cluster, "missing-file", [
                OperatorSpec(name="text_file", config={"path": str(tmp_path / "nope")})]),
            deployment(cluster, "outside-roots", [
                OperatorSpec(name="text_file", config={"path": "/etc/passwd"})]),
            deployment(cluster, "dunder", [
                OperatorSpec(name="range", config={"start": "0", "end": "3"}),
                OperatorSpec(name="map", config={"function": "json:__delattr__"})]),
            deployment(cluster, "elsewhere", resource_id="someone-else-0"),
        ]  # fmt: skip
        good = deployment(
            cluster, "good", [OperatorSpec(name="range", config={"start": "0", "end": "10"})]
        )
        unaccepted = deployment(
            cluster, "unaccepted", [OperatorSpec(name="range", config={"start": "0", "end": "1"})]
        )
        write(cluster, *[*bad, good], *map(accepted, [*bad, good]), unaccepted,
              raw=(b"bad-0", b"\x00garbage"))  # fmt: skip
        ends = final_states(cluster, expected=8)
    assert ends["good"].execution_state is ExecutionState.FINISHED
    assert "elsewhere" not in ends, "a deployment for another runner's TaskExecutor ran here"
    assert "unaccepted" not in reported_states(cluster), "ran what no TaskExecutor accepted"
    errors = {name: e.error for name, e in ends.items() if name != "good"}
    assert all(ends[n].execution_state is ExecutionState.FAILED for n in errors)
    assert "unknown operator 'teleport'" in errors["unknown-op"]
    assert "allow-list" in errors["not-allowed"]
    assert "JSONDecodeError" in errors["raises"]
    assert "no finished result of ghost" in errors["no-input"]
    assert "is not a readable file" in errors["missing-file"]
    assert "is not under a data root" in errors["outside-roots"]
    assert "`json:__delattr__` is not an exported function of json" in errors["dunder"]


def test_a_cancellation_stops_a_running_task(spark, cluster, tmp_path):
    with running(spark, cluster, tmp_path, "cancel", "json") as runner:
        slow = deployment(  # a billion json.dumps: minutes of work (builtins are not loadable)
            cluster,
            "slow",
            [
                OperatorSpec(name="range", config={"start": "0", "end": "1000000000"}),
                OperatorSpec(name="map", config={"function": "json:dumps"}),
            ],
            resource_id="cancel-0",
        )
        write(cluster, slow, accepted(slow))
        deadline = time.monotonic() + 60
        while "slow" not in runner.jobs.gate.started and time.monotonic() < deadline:
            time.sleep(0.2)
        started = time.monotonic()
        write(cluster, cancellation(slow))
        ends = final_states(cluster, expected=1, timeout_s=60)
        cancelled_within = time.monotonic() - started
        # the cancelled Spark job's id was fenced; the next task never writes under it
        fenced = set(runner.jobs.gate.leases.fenced)
        after = deployment(cluster, "after", resource_id="cancel-0")
        write(cluster, after, accepted(after))
        ends = final_states(cluster, expected=2, timeout_s=60)
    assert ends["slow"].execution_state is ExecutionState.CANCELED
    assert cancelled_within < 60, "the task ran to its end instead of being cancelled"
    assert len(fenced) == 1, "the cancelled Spark job's transactional id was not fenced"
    assert ends["after"].execution_state is ExecutionState.FINISHED


def test_a_query_that_ends_on_its_own_is_started_again(spark, cluster, tmp_path):
    with running(spark, cluster, tmp_path, "revive", "json", heartbeat_interval_s=0.5) as runner:
        dead = runner.query
        dead.stop()  # as if its stream thread had died
        deadline = time.monotonic() + 60
        while runner.query is dead or not runner.query.isActive:
            assert time.monotonic() < deadline, "the query was not started again"
            time.sleep(0.2)
        good = deployment(cluster, "after-revival", [
            OperatorSpec(name="range", config={"start": "0", "end": "5"})],
            resource_id="revive-0")  # fmt: skip
        write(cluster, good, accepted(good))
        ends = final_states(cluster, expected=1, timeout_s=60)
    assert ends["after-revival"].execution_state is ExecutionState.FINISHED


@pytest.fixture
def tiny_disk(tmp_path) -> Iterator[Path]:
    """A 1 MiB tmpfs for a runner's checkpoint (skipped where this user may not mount)."""
    mount_point = tmp_path / "ckpt"
    mount_point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _fill(disk: Path) -> Path:
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as out, contextlib.suppress(OSError):
        while True:
            out.write(bytes(4096))
    return filler


def test_a_full_checkpoint_disk_is_reported_and_the_runner_goes_on_once_there_is_room(
    spark, cluster, tmp_path, tiny_disk, caplog
):
    """Hardening issue, item 7: the runner's state directory (its Spark checkpoint) full."""
    with running(spark, cluster, tmp_path, "full", "json", heartbeat_interval_s=0.5) as runner:
        filler = _fill(tiny_disk)
        first = deployment(cluster, "while-full", [
            OperatorSpec(name="range", config={"start": "0", "end": "5"})],
            resource_id="full-0")  # fmt: skip
        write(cluster, first, accepted(first))
        deadline = time.monotonic() + 60
        while "the runner's query ended" not in caplog.text:
            assert time.monotonic() < deadline, "a full checkpoint disk went unnoticed"
            time.sleep(0.2)
        assert "No space left on device" in caplog.text
        filler.unlink()
        ends = final_states(cluster, expected=1, timeout_s=90)
        assert runner.query.isActive
    assert ends["while-full"].execution_state is ExecutionState.FINISHED
    assert any(r.levelname == "ERROR" for r in caplog.records)


def test_a_task_executor_whose_connection_the_resource_manager_closed_registers_again(
    spark, cluster, tmp_path
):
    """Else the runner beats for it into rejections for good (Flink's TaskExecutor
    reconnects to the ResourceManager when it is disconnected)."""

    with running(spark, cluster, tmp_path, "again", "json", heartbeat_interval_s=0.5):
        assert registrations(cluster, "again-0") == 1
        write(cluster, TaskManagerConnectionClosed(
            event_id="closed", event_time=int(time.time() * 1000), producer="resourcemanager",
            cause_event_id="lost", resource_id="again-0", resource_manager_id="resourcemanager",
            cause="heartbeat of TaskExecutor again-0 timed out",
        ))  # fmt: skip
        deadline = time.monotonic() + 60
        while registrations(cluster, "again-0") < 2:
            assert time.monotonic() < deadline, "the runner did not register again"
            time.sleep(0.5)


def recreate_topics(cluster) -> None:
    """Delete the cluster's topics and create them again: same names, new topic ids, empty."""
    admin = admin_client(cluster.bootstrap)
    topics = [t for t in admin.list_topics(timeout=10).topics if t.startswith(cluster.prefix)]
    for future in admin.delete_topics(topics, operation_timeout=30).values():
        future.result()
    deadline = time.monotonic() + 60
    while not all(r.created for r in create_topics(cluster.bootstrap, cluster.prefix, 3)):
        assert time.monotonic() < deadline, "the deleted topics could not be created again"
        time.sleep(0.2)  # a topic being deleted "already exists" for a moment


def test_a_checkpoint_of_topics_since_created_again_is_moved_aside_and_the_runner_starts(
    spark, cluster, tmp_path, caplog
):
    """The log changed under the runner's checkpoint, whose
    offsets the new topic never had. The runner says so in one line and starts afresh."""
    with running(spark, cluster, tmp_path, "refit", "json"):
        first = deployment(cluster, "before", [
            OperatorSpec(name="range", config={"start": "0", "end": "3"})],
            resource_id="refit-0")  # fmt: skip
        write(cluster, first, accepted(first))
        before = final_states(cluster, expected=1)["before"]
    assert before.execution_state is ExecutionState.FINISHED
    recreate_topics(cluster)
    caplog.clear()
    with running(spark, cluster, tmp_path, "refit", "json"):
        assert registrations(cluster, "refit-0") == 1, "the runner did not register"
        after = deployment(cluster, "after", [
            OperatorSpec(name="range", config={"start": "0", "end": "3"})],
            resource_id="refit-0")  # fmt: skip
        write(cluster, after, accepted(after))
        ends = final_states(cluster, expected=1)
    assert ends["after"].execution_state is ExecutionState.FINISHED
    said = [r.getMessage() for r in caplog.records if r.name == "jobledger.runner"
            and r.levelno >= logging.WARNING]  # fmt: skip
    (stale,) = tmp_path.glob("ckpt.stale-*")
    topic = topic_name(TopicRole.TASK_EXECUTOR, cluster.prefix)
    old_id = json.loads((stale / MARKER).read_text())["topic_id"]
    new_id = read_log(cluster.bootstrap, topic).topic_id
    assert said == [
        f"checkpoint {tmp_path / 'ckpt'} was written against topic {topic} with id {old_id}, "
        f"the topic now has id {new_id} (created again): moved it to {stale} and starting from "
        "the log's current end"
    ]
    assert (stale / "offsets").is_dir(), "the old checkpoint was not kept"


def test_a_checkpoint_whose_records_were_deleted_is_moved_aside_in_one_line(
    spark, cluster, tmp_path, caplog
):
    """The records after the checkpoint's offsets were deleted (retention) while no runner
    ran: every query started from it would fail ("Offset out of range"). The runner says so
    in one line, moves it aside and starts at the log's end, with no stack trace."""
    with running(spark, cluster, tmp_path, "gone", "json"):
        pass  # its checkpoint starts at each partition's end
    admin = admin_client(cluster.bootstrap)
    topic = topic_name(TopicRole.TASK_EXECUTOR, cluster.prefix)
    ends = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in range(3)})
    write(cluster, *[accepted(deployment(cluster, f"d{i}", resource_id="gone-0"))
                     for i in range(10)])  # fmt: skip
    after = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in range(3)})
    gone = [TopicPartition(topic, tp.partition, f.result().offset) for tp, f in after.items()]
    for future in admin.delete_records(gone).values():
        future.result()
    caplog.clear()
    with running(spark, cluster, tmp_path, "gone", "json"):
        assert registrations(cluster, "gone-0") == 2
    said = [r.getMessage() for r in caplog.records if r.name == "jobledger.runner"
            and r.levelno >= logging.WARNING]  # fmt: skip
    (stale,) = tmp_path.glob("ckpt.stale-*")
    moved = [
        f"[{tp.partition}] at {f.result().offset}, start {g.offset}"
        for (tp, f), g in zip(sorted(ends.items(), key=lambda i: i[0].partition),
                              sorted(gone, key=lambda t: t.partition), strict=True)
        if f.result().offset < g.offset
    ]  # fmt: skip
    assert said == [
        f"checkpoint {tmp_path / 'ckpt'} has offsets before the start of {topic} (records "
        f"deleted since): {'; '.join(moved)}: moved it to {stale} and starting from the log's "
        "current end"
    ]
    assert "Traceback" not in caplog.text


def test_checkpoint_mismatch_fail_exits_1_in_one_line_naming_the_flag(
    spark, cluster, tmp_path, capsys, monkeypatch
):
    """`jobledger runner --checkpoint-mismatch fail` on a checkpoint past the topic's end."""
    topic = topic_name(TopicRole.TASK_EXECUTOR, cluster.prefix)
    ckpt = tmp_path / "ckpt"
    (ckpt / "offsets").mkdir(parents=True)
    (ckpt / "offsets" / "0").write_text(f'v1\n{{}}\n{{"{topic}":{{"0":5,"1":0,"2":0}}}}')
    monkeypatch.setattr(signal, "signal", lambda *_: None)  # pytest's handlers stay
    status = main([
        "runner", "--bootstrap", cluster.bootstrap, "--topic-prefix", cluster.prefix,
        "--checkpoint", str(ckpt), "--checkpoint-mismatch", "fail", "--master", "local[2]",
    ])  # fmt: skip
    assert (status, capsys.readouterr().err) == (1, (
        f"jobledger: checkpoint {ckpt} has offsets past the end of {topic}: [0] at 5, end 0; "
        "--checkpoint-mismatch restart moves it aside and starts from the log's current end\n"
    ))  # fmt: skip
    assert list(tmp_path.iterdir()) == [ckpt], "the checkpoint was moved"
