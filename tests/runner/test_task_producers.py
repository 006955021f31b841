"""The Spark tasks' producers (`task_producers.py`): a Python worker keeps its producer across
tasks only under an id the driver leases it, the driver fences the ids of a Spark job that
ended badly (and a retried partition's earlier id), and a fenced producer is never used
again: the worker starts one under a new id."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from jobledger.services.kafka_topics import create_topics
from jobledger.services.runner import task_producers
from jobledger.services.runner.start_gate import StartGate
from jobledger.services.runner.task import task_producer
from jobledger.services.runner.task_producers import ProducerLeases, acquire, lease, release

from ..support.processes import leave_transaction_open


@pytest.fixture
def fenced():
    """The ids the driver fenced, in order, and its gate."""
    ids: list[str] = []
    gate = StartGate("127.0.0.1", ProducerLeases(ids.append))
    yield ids, gate
    gate.close()


def test_a_worker_keeps_its_id_while_the_driver_leases_it(fenced):
    ids, gate = fenced
    gate.leases.begin("job-a/1")
    gate.leases.begin("job-b/2")
    assert lease(gate.lease_url, "job-a/1", 0, "w1") is True
    gate.leases.end("job-a/1", fence=False)
    assert lease(gate.lease_url, "job-b/2", 0, "w1") is True, "a clean end fences nothing"
    assert ids == []


def test_a_job_that_ended_badly_does_not_fence_the_id_its_worker_now_writes_for_another(fenced):
    """The worker's task of job-a ended clean and its worker went on to job-b: job-a's bad
    end (a sibling task failed) fences job-a's other ids, not the one job-b now holds."""
    ids, gate = fenced
    gate.leases.begin("job-a/1")
    gate.leases.begin("job-b/2")
    assert lease(gate.lease_url, "job-a/1", 0, "w1") and lease(gate.lease_url, "job-a/1", 1, "w2")
    assert lease(gate.lease_url, "job-b/2", 0, "w1")
    gate.leases.end("job-a/1", fence=True)
    assert ids == ["w2"]
    assert gate.leases.leased == {"job-b/2": {0: "w1"}}


def test_a_job_not_running_is_leased_nothing(fenced):
    """A cancelled task may still run after its Spark job ended: a lease then would never be
    fenced, so it is refused (as for a job never begun)."""
    ids, gate = fenced
    assert lease(gate.lease_url, "never-begun/1", 0, "w1") is False
    gate.leases.begin("job-a/1")
    gate.leases.end("job-a/1", fence=False)
    assert lease(gate.lease_url, "job-a/1", 0, "w1") is False
    assert gate.leases.leased == {} and ids == []


def test_a_spark_job_that_ended_badly_has_every_id_it_leased_fenced_and_refused(fenced):
    ids, gate = fenced
    gate.leases.begin("job-a/1")
    gate.leases.begin("job-b/2")
    assert lease(gate.lease_url, "job-a/1", 0, "w1") and lease(gate.lease_url, "job-a/1", 1, "w2")
    gate.leases.end("job-a/1", fence=True)
    assert ids == ["w1", "w2"]
    assert lease(gate.lease_url, "job-b/2", 0, "w1") is False
    assert lease(gate.lease_url, "job-b/2", 1, "w3") is True
    assert gate.leases.leased == {"job-b/2": {1: "w3"}}


def test_a_retried_partition_has_the_id_of_the_task_before_fenced(fenced):
    """The first task's executor died: its end is never reported, the retry's lease is."""
    ids, gate = fenced
    gate.leases.begin("job-a/1")
    gate.leases.begin("job-b/2")
    assert lease(gate.lease_url, "job-a/1", 0, "dead-worker")
    assert lease(gate.lease_url, "job-a/1", 0, "other-worker")
    assert ids == ["dead-worker"]
    assert lease(gate.lease_url, "job-b/2", 0, "dead-worker") is False


@pytest.mark.parametrize(
    "body",
    [b"not json", b'{"spark_job": "j", "partition": "0", "transactional_id": "w"}',
     b'{"spark_job": "j"}', b"[]"],
)  # fmt: skip
def test_a_bad_lease_request_is_refused_and_the_gate_goes_on(fenced, body):
    _, gate = fenced
    gate.leases.begin("j")
    request = urllib.request.Request(gate.lease_url, data=body, method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 400
    assert lease(gate.lease_url, "j", 0, "w") is True


@pytest.mark.broker
def test_a_fenced_producer_is_dropped_and_the_next_task_writes_under_a_new_id(
    fenced, kafka_bootstrap
):
    """Two tasks of one worker share its producer; the driver fences it after a Spark job
    ended badly; the worker's next task starts a producer under a new id that commits."""
    ids, gate = fenced

    def fence(tid: str) -> None:
        task_producer(kafka_bootstrap, tid).close()
        ids.append(tid)

    gate.leases.fence = fence
    create_topics(kafka_bootstrap, "leases.", partitions=1)
    made: list[str] = []

    def make(tid, failures):
        made.append(tid)
        return task_producer(kafka_bootstrap, tid, failures)

    def task(spark_job: str, fail: bool = False) -> str:
        gate.leases.begin(spark_job)
        held = acquire(kafka_bootstrap, "runner-task", gate.lease_url, spark_job, 0, make)
        held.producer.begin_transaction()
        held.producer.produce("leases.job", value=json.dumps(spark_job).encode())
        if not fail:
            held.producer.commit_transaction(30)
        release(kafka_bootstrap, "runner-task", held, clean=not fail)
        return held.transactional_id

    try:
        first = task("job-a/1")
        assert task("job-b/2") == first and made == [first], "the worker's producer is kept"
        kept = task_producers._kept[(kafka_bootstrap, "runner-task")].producer
        gate.leases.end("job-b/2", fence=False)
        assert task("job-c/3", fail=False) == first
        gate.leases.end("job-c/3", fence=True)  # as if a sibling task of job-c had failed
        assert ids == [first]
        with pytest.raises(KafkaException):  # really fenced: it must never be used again
            kept.begin_transaction()
            kept.produce("leases.job", value=b"x")
            kept.commit_transaction(30)
        second = task("job-d/4")
        assert second != first and made == [first, second]
        failed = task("job-e/5", fail=True)
        assert failed == second
        assert (kafka_bootstrap, "runner-task") not in task_producers._kept, (
            "a producer whose task did not end clean is closed, not kept"
        )
        assert task("job-f/6") not in (first, second)
    finally:
        for held in task_producers._kept.values():
            held.producer.close()
        task_producers._kept.clear()


def test_the_ids_leased_when_a_driver_dies_are_fenced_by_the_next_run(tmp_path):
    """The journal holds exactly the ids leased now (only those can have a transaction
    open); a driver killed with w3 leased leaves it there, and the next run fences it before
    anything else, then refuses it to any task."""
    journal = tmp_path / "ckpt" / "leased.json"
    first = ProducerLeases(lambda _: None, journal)
    first.begin("job-a/1")
    first.lease("job-a/1", 0, "w1")
    first.lease("job-a/1", 1, "w2")
    assert json.loads(journal.read_text()) == ["w1", "w2"]
    first.end("job-a/1", fence=False)
    assert json.loads(journal.read_text()) == []
    first.begin("job-b/2")
    first.lease("job-b/2", 0, "w3")  # ... and the driver is killed

    ids: list[str] = []
    second = ProducerLeases(ids.append, journal)
    assert second.recover() == ["w3"]
    assert (ids, json.loads(journal.read_text())) == (["w3"], [])
    second.begin("job-c/3")
    assert second.lease("job-c/3", 0, "w3") is False


def test_a_torn_journal_fences_nothing_and_starts_again(tmp_path):
    journal = tmp_path / "leased.json"
    journal.write_text('["w1", "w')
    ids: list[str] = []
    assert ProducerLeases(ids.append, journal).recover() == []
    assert (ids, json.loads(journal.read_text())) == ([], [])


def test_recovery_aborts_what_a_killed_worker_left_open(kafka_bootstrap, tmp_path):
    """On Apache Kafka, fencing the journal's id aborts the killed producer's transaction at
    once: the partition's last stable offset reaches its end, so read_committed readers are
    not held back until the transaction times out."""
    topic = f"dangling-{tmp_path.name}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result()
    transactional_id = f"worker-{tmp_path.name}"
    leave_transaction_open(kafka_bootstrap, topic, transactional_id)
    journal = tmp_path / "leased.json"
    journal.write_text(json.dumps([transactional_id]))

    def stable_and_end() -> tuple[int, int]:
        part = TopicPartition(topic, 0)
        offsets = [admin.list_offsets({part: OffsetSpec.latest()}, isolation_level=level)[part]
                   .result().offset for level in (IsolationLevel.READ_COMMITTED,
                                                  IsolationLevel.READ_UNCOMMITTED)]  # fmt: skip
        return offsets[0], offsets[1]

    stable, end = stable_and_end()
    assert stable < end, "the killed producer's transaction is open"
    ProducerLeases(lambda tid: task_producer(kafka_bootstrap, tid).close(), journal).recover()
    stable, end = stable_and_end()
    assert stable == end
