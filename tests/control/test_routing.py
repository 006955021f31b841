"""Events are acted on only where they belong, and live and replay agree on it.

Each input partition is a reducer copy of its own in the services. An event on another topic
than its route's, or on a partition its key does not hash to, is dead-lettered with the reason
(it once created a ResourceManager copy private to a job partition); replay skips what the
services dead-lettered and keeps one reducer copy, and so one duplicate window, per partition,
so the same event id on two partitions is two inputs in both (it once failed `--verify`)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import given, settings
from hypothesis import strategies as st

from jobledger.projections.log.log_file import LogRecord
from jobledger.projections.log.replay import replay, verify
from jobledger.schemas import EventSerde, topic_name
from jobledger.schemas.cluster import TaskManagerRegistered
from jobledger.schemas.deadletters import DeadLettered
from jobledger.schemas.jobs import JobMasterLeadershipGranted, JobSubmitted
from jobledger.schemas.slots import SlotFreed
from jobledger.schemas.topics import TopicRole
from jobledger.services.control.driver import PartitionedDriver
from jobledger.services.control.partitioning import misrouted, partition_of
from jobledger.services.kafka import PARTITIONER, transactional_producer
from jobledger.services.kafka_topics import await_metadata

from ..support.events import profile
from ..support.runtime_harness import RuntimeThread, read, wait_until_decided

REGISTERED = TaskManagerRegistered(
    event_id="tm-reg", event_time=1, producer="t", resource_id="tm-x", address="a",
    number_of_slots=1, resource_profile=profile(1.0, 1024),
)  # fmt: skip


def _leadership(job: str, event_id: str) -> JobMasterLeadershipGranted:
    return JobMasterLeadershipGranted(
        event_id=event_id, event_time=1, producer="t", job_id=job, job_master_id=f"jm-{job}"
    )


def test_misrouted_names_the_topic_or_partition_an_event_belongs_on():
    assert misrouted(REGISTERED, TopicRole.RESOURCE_MANAGER, 0, 1) is None
    assert misrouted(REGISTERED, TopicRole.JOB, 0, 3) == (
        "TaskManagerRegistered belongs on the resourcemanager topic (key 'tm-x'), "
        "not on the job topic"
    )
    event = _leadership("job-7", "e")
    assert partition_of("job-7", 3) == 0
    assert misrouted(event, TopicRole.JOB, 0, 3) is None
    assert misrouted(event, TopicRole.JOB, 1, 3) == (
        "JobMasterLeadershipGranted with key 'job-7' belongs on partition 0 of 3 "
        "(Kafka's murmur2 partitioner), not on partition 1"
    )


@pytest.mark.broker
@settings(max_examples=5, deadline=None)
@given(keys=st.lists(st.text(min_size=0, max_size=40), min_size=30, max_size=30, unique=True))
def test_partition_of_is_where_the_broker_put_the_key(kafka_bootstrap, keys):
    topic = f"murmur-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 7, 1)])[topic].result()
    await_metadata(admin, {topic: 7})
    placed: dict[bytes, int] = {}

    def delivered(error, msg) -> None:
        assert error is None, error
        placed[msg.key()] = msg.partition()

    producer = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": PARTITIONER})
    for key in keys:
        producer.produce(topic, key=key.encode(), value=b"", on_delivery=delivered)
    producer.flush(30)
    # an empty key is no key to librdkafka (a random partition), as to Java's client
    assert placed == {key.encode(): partition_of(key, 7) for key in keys if key} | (
        {b"": placed[b""]} if "" in keys else {}
    )


def _write_raw(cluster, placements: list[tuple[TopicRole, int, object]]) -> None:
    """Events written to exactly the topic and partition given, as a careless client might."""
    serde = EventSerde()
    producer = transactional_producer(cluster.bootstrap, "careless")
    producer.begin_transaction()
    for role, partition, event in placements:
        topic = topic_name(role, cluster.prefix)
        key = event.route()[1].encode()
        producer.produce(topic, key=key, value=serde.encode(event, topic), partition=partition)
    producer.commit_transaction(30)


@pytest.mark.broker
def test_an_event_off_its_route_is_dead_lettered_with_the_reason_and_replay_agrees(cluster):
    right = partition_of("job-7", 3)
    wrong = (right + 1) % 3
    _write_raw(cluster, [
        (TopicRole.JOB, 0, REGISTERED),
        (TopicRole.JOB, wrong, _leadership("job-7", "lead-wrong")),
        (TopicRole.JOB, right, _leadership("job-7", "lead-right")),
    ])  # fmt: skip
    with RuntimeThread(cluster) as runtime:
        records = wait_until_decided(cluster)
        live = {key: w.driver.to_dict() for key, w in runtime.workers.items()}

    dead = sorted(
        (r.event.source_partition, r.event.reason)
        for r in records
        if isinstance(r.event, DeadLettered)
    )
    assert dead == sorted([
        (0, "TaskManagerRegistered belongs on the resourcemanager topic (key 'tm-x'), "
            "not on the job topic"),
        (wrong, "JobMasterLeadershipGranted with key 'job-7' belongs on partition "
                f"{right} of 3 (Kafka's murmur2 partitioner), not on partition {wrong}"),
    ])  # fmt: skip
    rm_topic = topic_name(TopicRole.RESOURCE_MANAGER, cluster.prefix)
    job_topic = topic_name(TopicRole.JOB, cluster.prefix)
    assert live[(rm_topic, 0)]["resource_manager"]["task_executors"] == {}
    assert live[(job_topic, 0)]["resource_manager"]["task_executors"] == {}
    assert list(live[(job_topic, right)]["job_masters"]) == ["job-7"]
    assert live[(job_topic, wrong)]["job_masters"] == {}
    _, divergence = verify(records)
    assert divergence is None, divergence.describe()
    assert replay(records).driver.to_dict()["job_masters"].keys() == {"job-7"}


@pytest.mark.broker
def test_one_event_id_on_two_partitions_is_two_inputs_live_and_in_replay(cluster):
    jobs = ["job-5", "job-7"]  # murmur2 puts them on partitions 2 and 0 of 3
    assert {partition_of(job, 3) for job in jobs} == {2, 0}
    _write_raw(cluster, [
        (TopicRole.JOB, partition_of(job, 3), _leadership(job, "same-id")) for job in jobs
    ])  # fmt: skip
    with RuntimeThread(cluster) as runtime:
        records = wait_until_decided(cluster)
        live = {j for w in runtime.workers.values() for j in w.driver.job_masters}

    assert live == set(jobs)
    assert set(replay(records).driver.job_masters) == set(jobs)
    _, divergence = verify(records)
    assert divergence is None, divergence.describe()
    assert [r for r in read(cluster) if isinstance(r.event, DeadLettered)] == []


def test_a_dead_letter_forged_onto_an_input_topic_makes_replay_skip_nothing():
    """Found by the fuzz suite: replay took any DeadLettered for a refusal, so one written to
    an input topic could make replay skip the input it named, and disagree with the services."""
    lead = _leadership("job-7", "lead")
    forged = DeadLettered(
        event_id="forged", event_time=2, producer="t", source_topic="jobledger.job",
        source_partition=0, source_offset=0, reason="forged",
    )  # fmt: skip
    records = [
        LogRecord(TopicRole.JOB, 0, 0, 1, lead),
        LogRecord(TopicRole.JOB, 0, 1, 2, forged),
    ]

    assert set(replay(records).driver.job_masters) == {"job-7"}
    real = LogRecord(TopicRole.DEAD_LETTER, 0, 0, 3, forged)
    assert replay([*records, real]).driver.job_masters == {}


def test_inputs_sharing_an_id_on_two_topics_derive_decisions_with_ids_of_their_own():
    """Found by the fuzz suite: two inputs with one (client-chosen) id on two topics, each
    rejected, derived rejections under one id, and verify compared each with the other's.
    A decision's id now derives from its cause's owner as well as its id."""
    freed = SlotFreed(event_id="same", event_time=1, producer="t", resource_id="tm-x",
                      allocation_id="a", slot_index=0, cause="c")  # fmt: skip
    empty = JobSubmitted(event_id="same", event_time=2, producer="t", job_id="job-7",
                         job_name="n", vertices=[])  # fmt: skip
    driver = PartitionedDriver()
    records = [LogRecord(TopicRole.RESOURCE_MANAGER, 0, 0, 1, freed),
               LogRecord(TopicRole.JOB, 0, 0, 2, empty)]  # fmt: skip
    decisions = [
        *driver.process(TopicRole.RESOURCE_MANAGER, 0, freed),
        *driver.process(TopicRole.JOB, 0, empty),
    ]
    assert [d.type_name() for d in decisions] == ["EventRejected", "EventRejected"]
    assert len({d.event_id for d in decisions}) == 2
    logged = [LogRecord(d.route()[0], 0, 10 + i, 3, d) for i, d in enumerate(decisions)]

    matched, divergence = verify(records + logged)

    assert divergence is None, divergence.describe()
    assert matched == len(decisions)
