"""Operator faults under a running `jobledger services run` (hardening issue, item 7): each is
detected and logged at ERROR with what to do, and the service either recovers or exits
non-zero (code 3), never wedged; SIGTERM always ends it within its deadline.

The broker restart and loss run on an Apache Kafka broker of this module's own, which the
tests stop and start again; the rest on the session's broker."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions

from jobledger.projections.log.replay import verify
from jobledger.schemas import topic_name
from jobledger.schemas.cluster import TaskManagerRegistered, TaskManagerRegistrationAccepted
from jobledger.schemas.topics import TopicRole
from jobledger.services.host import transactions
from jobledger.services.host.errors import ServiceHalted
from jobledger.services.local import apache_kafka, broker

from ..conftest import new_cluster
from ..support.events import Clock, profile
from ..support.runtime_harness import (
    RuntimeThread,
    append,
    read,
    service_process,
    wait_until_decided,
    wait_until_owning,
    wait_until_quiet,
)

pytestmark = pytest.mark.broker

HALTED = 3


class RestartableBroker:
    """An Apache Kafka broker on a fixed port and data folder, so it can stop and come back."""

    def __init__(self, workdir: Path) -> None:
        self.port = broker.free_port()
        self.data = workdir / "data"
        self.log = workdir / "kafka.log"
        self.bootstrap = f"{broker.LOOPBACK}:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = apache_kafka.spawn(self.port, self.data, self.log, detach=False)

    def stop(self) -> None:
        if self.proc is not None:
            broker.stop_child(self.proc)
            self.proc = None


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestartableBroker]:
    if not apache_kafka.available():
        pytest.skip("Apache Kafka is not installed (`make kafka`)")
    own = RestartableBroker(tmp_path_factory.mktemp("own-broker"))
    own.start()
    try:
        yield own
    finally:
        own.stop()


def _register(cluster, clock: Clock, resource_id: str) -> TaskManagerRegistered:
    event = clock(TaskManagerRegistered, resource_id=resource_id, address=resource_id,
                  number_of_slots=1, resource_profile=profile(1.0, 100))  # fmt: skip
    append(cluster, [event])
    return event


def _wait_for_answer(cluster, cause: TaskManagerRegistered, limit_s: float = 60.0) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if any(
            isinstance(r.event, TaskManagerRegistrationAccepted)
            and r.event.cause_event_id == cause.event_id
            for r in read(cluster)
        ):
            return
        time.sleep(0.3)
    raise TimeoutError(f"no answer to {cause.resource_id}'s registration in {limit_s:.0f} s")


def _wait_for_log(process: subprocess.Popen, text: str, limit_s: float = 60.0) -> str:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        log = Path(process.log_path).read_text()  # type: ignore[attr-defined]
        if text in log:
            return log
        time.sleep(0.2)
    raise TimeoutError(f"{text!r} never logged")


def _exit_code(process: subprocess.Popen, limit_s: float) -> int:
    try:
        return process.wait(limit_s)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail(f"the service did not exit within {limit_s:.0f} s")


def test_the_service_reports_a_lost_broker_and_goes_on_once_it_is_back(own_broker, tmp_path):
    cluster = new_cluster(own_broker.bootstrap)
    clock = Clock()
    service = service_process(cluster, str(tmp_path))
    try:
        wait_until_owning(service)
        _wait_for_answer(cluster, _register(cluster, clock, "tm-1"))

        own_broker.stop()
        log = _wait_for_log(service, "cannot be reached")
        assert (
            f"ERROR jobledger.runtime the broker at {cluster.bootstrap} cannot be reached: every "
            "connection to it is down. Waiting for it" in log
        )
        assert "brokers are down" not in log, "librdkafka's count reads as nonsense"
        own_broker.start()
        _wait_for_answer(cluster, _register(cluster, clock, "tm-2"), limit_s=90)

        assert "the broker is back" in Path(service.log_path).read_text()  # type: ignore[attr-defined]
        service.send_signal(signal.SIGTERM)
        assert _exit_code(service, 30) == 0
    finally:
        service.kill()
        if own_broker.proc is None:
            own_broker.start()


def test_sigterm_ends_the_service_within_its_deadline_while_the_broker_is_down(
    own_broker, tmp_path
):
    cluster = new_cluster(own_broker.bootstrap)
    service = service_process(cluster, str(tmp_path), "--stop-deadline-s", "5")
    try:
        wait_until_owning(service)
        own_broker.stop()
        _wait_for_log(service, "cannot be reached")
        service.send_signal(signal.SIGTERM)
        started = time.monotonic()
        code = _exit_code(service, 20)
        assert code in (0, HALTED)
        assert time.monotonic() - started <= 5 + 2
    finally:
        service.kill()
        own_broker.start()


def _halted_by(cluster, tmp_path, change) -> str:
    """The log of a service that `change(admin, job_topic)` made exit with HALTED."""
    service = service_process(cluster, str(tmp_path))
    try:
        wait_until_owning(service)
        job_topic = topic_name(TopicRole.JOB, cluster.prefix)
        change(AdminClient({"bootstrap.servers": cluster.bootstrap}), job_topic)
        assert _exit_code(service, 60) == HALTED
        return Path(service.log_path).read_text()  # type: ignore[attr-defined]
    finally:
        service.kill()


def test_a_deleted_input_topic_stops_the_service_with_what_to_do(kafka_bootstrap, tmp_path):
    cluster = new_cluster(kafka_bootstrap)

    log = _halted_by(
        cluster, tmp_path, lambda admin, topic: admin.delete_topics([topic])[topic].result()
    )

    job_topic = topic_name(TopicRole.JOB, cluster.prefix)
    assert (
        f"ERROR jobledger.runtime input topic {job_topic} is gone" in log  # read from it
        or f"ERROR jobledger.runtime an input topic is gone (topic '{job_topic}'" in log
    )  # or counted on the rebalance the deletion causes
    assert "jobledger topics create" in log


def test_partitions_added_under_the_service_stop_it_with_the_reason(kafka_bootstrap, tmp_path):
    cluster = new_cluster(kafka_bootstrap)

    log = _halted_by(
        cluster, tmp_path,
        lambda admin, topic: admin.create_partitions([NewPartitions(topic, 4)])[topic].result(),
    )  # fmt: skip

    job_topic = topic_name(TopicRole.JOB, cluster.prefix)
    assert (
        "ERROR jobledger.runtime partition counts changed under the running service "
        f"({job_topic}: 3 -> 4)" in log
    )


class _StuckOffsets:
    """A partition's producer whose `send_offsets_to_transaction` never returns, as
    librdkafka's does when the group coordinator went away under it (issues #5456, #5511)."""

    def __init__(self, producer) -> None:
        self._producer = producer
        self.release = threading.Event()

    def send_offsets_to_transaction(self, *args) -> None:
        self.release.wait()

    def __getattr__(self, name: str):
        return getattr(self._producer, name)


def test_a_stuck_send_offsets_is_left_behind_and_the_input_decided_once(
    cluster, monkeypatch, caplog
):
    monkeypatch.setattr(transactions, "SEND_OFFSETS_TIMEOUT_S", 1)
    clock = Clock()
    with RuntimeThread(cluster, client_grace_s=0.5) as runtime:
        rm_topic = topic_name(TopicRole.RESOURCE_MANAGER, cluster.prefix)
        worker = runtime.workers[(rm_topic, 0)]
        stuck = worker.producer = _StuckOffsets(worker.producer)
        before = {key: w.producer for key, w in runtime.workers.items()}
        registered = _register(cluster, clock, "tm-1")
        _wait_for_answer(cluster, registered)
        # every partition's producer is new: the others' caches hold the same coordinator
        # (librdkafka #5511), and would wedge one after another
        assert all(runtime.workers[key].producer is not old for key, old in before.items())
        stuck.release.set()
        second = _register(cluster, clock, "tm-2")
        _wait_for_answer(cluster, second)
        # quiet, not decided: it watches for the left-behind producer's late writes, no commit marks
        records = wait_until_quiet(cluster)

    assert "leaving that producer behind and fencing it with a new one" in caplog.text
    assert f"gave the {len(before) - 1} other partitions new producers too" in caplog.text
    answers = [r for r in records if isinstance(r.event, TaskManagerRegistrationAccepted)]
    assert [a.event.cause_event_id for a in answers] == [registered.event_id, second.event_id]
    _, divergence = verify(records)
    assert divergence is None, divergence.describe()


class _LateCommit:
    """A partition's producer whose commit times out while its EndTxn is still on its way: the
    commit is sent a second later (the delayed transaction marker of Jepsen's 2024 Kafka
    analysis, which KIP-890 fences and librdkafka, lacking KIP-890, does not). Every use
    after the timeout is recorded."""

    DELAY_S = 1.0

    def __init__(self, producer) -> None:
        self._producer = producer
        self.timed_out = False
        self.used_after: list[str] = []
        self.late = threading.Event()

    def commit_transaction(self, *args) -> None:
        if not self.timed_out:
            self.timed_out = True
            threading.Thread(target=self._commit_late, daemon=True).start()
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "commit timed out (test)",
                                        retriable=True))  # fmt: skip

    def _commit_late(self) -> None:
        time.sleep(self.DELAY_S)
        with contextlib.suppress(KafkaException):  # fenced, if the runtime did its part
            self._producer.commit_transaction(30)
        self.late.set()

    def purge(self, *args) -> None:
        """Purged under the late commit it would fail at once: the test wants it sent."""

    def close(self, *args) -> None:
        self.late.wait(30)
        self._producer.close()

    def __getattr__(self, name: str):
        if self.timed_out:
            self.used_after.append(name)
        return getattr(self._producer, name)


def test_a_producer_whose_commit_timed_out_is_never_used_again_and_its_late_commit_is_fenced(
    cluster, caplog
):
    clock = Clock()
    with RuntimeThread(cluster) as runtime:
        rm_topic = topic_name(TopicRole.RESOURCE_MANAGER, cluster.prefix)
        late = runtime.workers[(rm_topic, 0)].producer = _LateCommit(
            runtime.workers[(rm_topic, 0)].producer
        )
        registered = _register(cluster, clock, "tm-1")
        _wait_for_answer(cluster, registered)
        assert late.late.wait(30), "the late commit was never sent"
        second = _register(cluster, clock, "tm-2")
        _wait_for_answer(cluster, second)
        replaced = runtime.workers[(rm_topic, 0)].producer
        records = wait_until_decided(cluster)

    assert late.timed_out and late.used_after == [] and replaced is not late
    assert "its producer is replaced" in caplog.text
    answers = [r for r in records if isinstance(r.event, TaskManagerRegistrationAccepted)]
    assert [a.event.cause_event_id for a in answers] == [registered.event_id, second.event_id]
    _, divergence = verify(records)
    assert divergence is None, divergence.describe()


class _CommitWithBrokerGone:
    """A partition's producer whose commit finds the broker gone: `stop` runs, the commit
    times out."""

    def __init__(self, producer, stop) -> None:
        self._producer, self._stop = producer, stop

    def commit_transaction(self, *args) -> None:
        self._stop()
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "commit timed out (test)",
                                        retriable=True))  # fmt: skip

    def __getattr__(self, name: str):
        return getattr(self._producer, name)


def test_a_new_producer_waits_for_a_broker_that_is_gone_and_goes_on_once_it_is_back(
    own_broker, monkeypatch, caplog
):
    """The replacement of a failed producer cannot start its transactions while the broker
    is down: `init_transactions` times out, is said at ERROR and tried again, with no
    traceback, until the broker is back; the input is then decided once."""
    monkeypatch.setattr(transactions, "INIT_TIMEOUT_S", 1)
    cluster = new_cluster(own_broker.bootstrap)
    clock = Clock()
    try:
        with RuntimeThread(cluster) as runtime:
            rm_topic = topic_name(TopicRole.RESOURCE_MANAGER, cluster.prefix)
            worker = runtime.workers[(rm_topic, 0)]
            worker.producer = _CommitWithBrokerGone(worker.producer, own_broker.stop)
            registered = _register(cluster, clock, "tm-1")
            deadline = time.monotonic() + 60
            while "did not start this partition's transactions" not in caplog.text:
                assert time.monotonic() < deadline, "the new producer's wait was never said"
                time.sleep(0.2)
            own_broker.start()
            _wait_for_answer(cluster, registered, limit_s=90)
            records = wait_until_decided(cluster)
            assert runtime.failure is None
    finally:
        if own_broker.proc is None:
            own_broker.start()

    assert "Traceback" not in caplog.text
    answers = [r for r in records if isinstance(r.event, TaskManagerRegistrationAccepted)]
    assert [a.event.cause_event_id for a in answers] == [registered.event_id]
    _, divergence = verify(records)
    assert divergence is None, divergence.describe()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # it stops
def test_a_clock_two_hours_ahead_stops_the_service_naming_the_skew_and_writes_nothing(
    cluster, monkeypatch
):
    """Every record carries its writer's clock; Kafka refuses one more than an hour ahead
    (INVALID_TIMESTAMP). The service's records are stamped two hours ahead, as a machine whose
    clock is off would stamp them."""

    def two_hours_ahead(producer, record, on_delivery) -> None:
        producer.produce(
            record.topic, key=record.key, value=record.value, on_delivery=on_delivery,
            timestamp=int(time.time() * 1000) + 2 * 3600 * 1000,
        )  # fmt: skip

    clock, host = Clock(), RuntimeThread(cluster)
    with host as runtime:
        monkeypatch.setattr(runtime.writer, "produce", two_hours_ahead)
        registered = _register(cluster, clock, "tm-1")
        host.thread.join(60)

    assert isinstance(runtime.failure, ServiceHalted)
    said = str(runtime.failure)
    assert said.startswith("the broker refused a record of resourcemanager/0's transaction for "
                           "its timestamp (")  # fmt: skip
    assert "clock differs from the broker's" in said and "message.timestamp.after.max.ms" in said
    assert [r.event for r in read(cluster)] == [registered]


def test_a_stalled_instance_that_wakes_after_losing_its_partitions_corrupts_nothing(
    cluster, tmp_path
):
    """Two instances on the same partitions: one is stopped (SIGSTOP, a long GC pause, a
    frozen VM) past its session, the other takes everything over; when the first wakes it
    either rejoins the group or, if it was inside a transaction, finds itself fenced and
    exits 3. Either way every input is decided exactly once and replay agrees."""
    clock = Clock()
    first = service_process(cluster, str(tmp_path))
    second = None
    try:
        wait_until_owning(first)
        second = service_process(cluster, str(tmp_path))
        wait_until_owning(second)
        _wait_for_answer(cluster, _register(cluster, clock, "tm-1"))
        first.send_signal(signal.SIGSTOP)
        _wait_for_answer(cluster, _register(cluster, clock, "tm-2"))  # the other took over
        first.send_signal(signal.SIGCONT)
        _wait_for_answer(cluster, _register(cluster, clock, "tm-3"))
        time.sleep(5)  # the woken one rejoins, or stops
        # quiet, not decided: it watches for the woken instance's late writes, which no commit marks
        records = wait_until_quiet(cluster)

        assert first.poll() in (None, HALTED)
        if first.poll() == HALTED:
            assert "fenced" in Path(first.log_path).read_text()  # type: ignore[attr-defined]
        assert second.poll() is None
        answers = [r.event.cause_event_id for r in records
                   if isinstance(r.event, TaskManagerRegistrationAccepted)]  # fmt: skip
        assert sorted(answers) == ["in-1", "in-2", "in-3"]
        _, divergence = verify(records)
        assert divergence is None, divergence.describe()
    finally:
        first.send_signal(signal.SIGCONT)
        first.kill()
        if second is not None:
            second.kill()
