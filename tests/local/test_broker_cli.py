"""`jobledger topics / produce / tail / broker` over a real broker."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource

from jobledger.schemas import EventSerde, event_from_json, event_to_json, topic_name
from jobledger.schemas.topics import TopicRole
from jobledger.services.client.produce import produce_lines
from jobledger.services.kafka import read_committed_consumer, transactional_producer
from jobledger.services.kafka_reads import read_topic
from jobledger.services.kafka_topics import create_topics
from jobledger.services.local import apache_kafka, broker
from jobledger.services.local.loopback import pid_alive

pytestmark = pytest.mark.broker

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schemas"

REGISTERED = {
    "type": "TaskManagerRegistered", "event_id": "ev-1", "event_time": 1700000000000,
    "producer": "test", "cause_event_id": None, "resource_id": "tm-1",
    "address": "127.0.0.1:6121", "number_of_slots": 4,
    "resource_profile": {"kind": "SPECIFIED", "cpu_cores": 1.5,
                         "task_heap_memory_mb": 512, "managed_memory_mb": 128},
    "instance_id": "run-1", "slot_report": [],
}  # fmt: skip
OFFERED = {
    "type": "SlotOffered", "event_id": "ev-2", "event_time": 1700000000001,
    "producer": "test", "cause_event_id": None, "job_id": "job-1", "job_master_id": "jm-1",
    "resource_id": "tm-1", "slot_index": 2, "allocation_id": "alloc-1",
    "resource_profile": {"kind": "ANY", "cpu_cores": 0.0,
                         "task_heap_memory_mb": 0, "managed_memory_mb": 0},
}  # fmt: skip
STATE = {
    "type": "TaskExecutionStateChanged", "event_id": "ev-3", "event_time": 1700000000002,
    "producer": "test", "cause_event_id": None, "job_id": "job-1", "job_master_id": None,
    "execution_attempt_id": "att-1", "execution_state": "FAILED",
    "error": "java.lang.RuntimeException: boom", "resource_id": "tm-1",
}  # fmt: skip


def jobledger(cluster, tmp_path, *args, stdin: str | None = None, env=None):
    return subprocess.run(
        [sys.executable, "-m", "jobledger.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env=env or cluster.env(str(tmp_path)),
    )


def tail_all(cluster, tmp_path, role: str) -> list[dict]:
    result = jobledger(
        cluster, tmp_path, "tail", role, "--from-beginning", "--exit-at-end", "--format", "event"
    )
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_produce_then_tail_round_trips_every_event_to_its_topic(cluster, tmp_path):
    lines = "\n".join(json.dumps(e) for e in (REGISTERED, OFFERED, STATE)) + "\n"
    result = jobledger(cluster, tmp_path, "produce", "-", stdin=lines)
    assert result.returncode == 0, result.stderr
    assert "wrote 3 events, rejected 0 lines" in result.stderr

    assert tail_all(cluster, tmp_path, "resourcemanager") == [REGISTERED]
    assert sorted(tail_all(cluster, tmp_path, "job"), key=lambda e: e["event_id"]) == [
        OFFERED,
        STATE,
    ]
    assert tail_all(cluster, tmp_path, "taskexecutor") == []


def test_events_are_keyed_by_their_owner(cluster):
    serde = EventSerde()
    producer = transactional_producer(cluster.bootstrap, "test")
    lines = [
        json.dumps({**OFFERED, "event_id": f"o{i}", "job_id": f"job-{i % 3}"}) for i in range(9)
    ]
    report = produce_lines(lines, producer, serde, cluster.prefix)
    assert report.written == 9
    consumer = read_committed_consumer(cluster.bootstrap)
    topic = topic_name(TopicRole.JOB, cluster.prefix)
    seen: dict[str, set[int]] = {}
    for msg in read_topic(consumer, topic, from_beginning=True, stop_at_end=True):
        event = serde.decode(msg.value(), topic)
        assert msg.key() == event.job_id.encode()
        assert dict(msg.headers())["jobledger.type"] == b"SlotOffered"
        seen.setdefault(event.job_id, set()).add(msg.partition())
    consumer.close()
    assert len(seen) == 3 and all(len(parts) == 1 for parts in seen.values())


BAD_LINES = [
    ("this is not json", "not JSON"),
    ('{"type": "NoSuchEvent", "job_id": "j"}', "unknown event type 'NoSuchEvent'"),
    ('{"job_id": "j"}', "missing string field 'type'"),
    ('[1, 2, 3]', "expected a JSON object"),
    (json.dumps({k: v for k, v in OFFERED.items() if k != "allocation_id"}),
     "allocation_id: Field required"),
    (json.dumps({**OFFERED, "slot_index": "two"}), "slot_index: Input should be a valid integer"),
    (json.dumps({**OFFERED, "resource_profile": {"kind": "HUGE"}}), "resource_profile.kind"),
    (json.dumps({**OFFERED, "slot_indx": 2}), "slot_indx: Extra inputs are not permitted"),
    (json.dumps({**OFFERED, "slot_index": 2**40}), "slot_index: Input should be less than"),
    (json.dumps({**OFFERED, "event_time": 99999999999999999999999}), "not encodable in Avro"),
    (json.dumps({**OFFERED, "event_time": 2**63 - 1}), "ms an event may be"),
    (json.dumps({**OFFERED, "resource_profile": {"kind": "ANY"}}).replace(
        '"ANY"}', '"ANY", "cpu_cores": NaN}'), "NaN is not a JSON number"),
    (json.dumps({**OFFERED, "allocation_id": "a" * 2_000_000}), "more than the 524288"),
    (json.dumps({**OFFERED, "producer": "jobmaster"}), "is the name of a jobledger service"),
    (json.dumps({**OFFERED, "cause_event_id": "x"}), "cause_event_id is for decisions"),
    (json.dumps({"type": "EventRejected", "scope": "JOB", "owner_id": "job-1",
                 "rejected_event_id": "e", "rejected_event_type": "SlotOffered", "reason": "r"}),
     "EventRejected is written by the services only"),
    (json.dumps({"type": "DeadLettered", "source_topic": "t", "source_partition": 0,
                 "source_offset": 1, "reason": "r"}),
     "DeadLettered is written by the services only"),
    (json.dumps({"type": "TimerFired", "scope": "JOB", "owner_id": "job-1",
                 "event_time": 7_200_000}),
     "TimerFired is written by the services only"),
]  # fmt: skip


def _bad_file(tmp_path):
    good = [{**OFFERED, "event_id": f"good-{i}"} for i in range(2)]
    lines = [json.dumps(good[0])] + [line for line, _ in BAD_LINES] + ["", json.dumps(good[1])]
    source = tmp_path / "events.jsonl"
    source.write_text("\n".join(lines) + "\n")
    return source, good


def _assert_every_bad_line_reported(result):
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    for number, (_, reason) in enumerate(BAD_LINES, start=2):
        assert any(
            line.startswith(f"line {number}: ") and reason in line
            for line in result.stderr.splitlines()
        ), (number, reason, result.stderr)


def test_one_bad_line_writes_nothing_and_every_bad_line_is_reported(cluster, tmp_path):
    source, _ = _bad_file(tmp_path)

    result = jobledger(cluster, tmp_path, "produce", str(source))

    _assert_every_bad_line_reported(result)
    assert f"wrote nothing: {len(BAD_LINES)} lines are not valid events" in result.stderr
    assert tail_all(cluster, tmp_path, "job") == []


def test_skip_invalid_writes_the_good_lines_and_reports_the_bad(cluster, tmp_path):
    source, good = _bad_file(tmp_path)

    result = jobledger(cluster, tmp_path, "produce", "--skip-invalid", str(source))

    _assert_every_bad_line_reported(result)
    assert f"wrote 2 events, rejected {len(BAD_LINES)} lines" in result.stderr
    assert tail_all(cluster, tmp_path, "job") == good


def test_header_fields_are_filled_in_when_a_person_leaves_them_out(cluster, tmp_path):
    line = {k: v for k, v in OFFERED.items() if k not in ("event_id", "event_time", "producer")}
    assert jobledger(cluster, tmp_path, "produce", stdin=json.dumps(line)).returncode == 0
    [event] = tail_all(cluster, tmp_path, "job")
    assert event["producer"] == "cli" and event["event_id"] and event["event_time"] > 0
    assert {k: event[k] for k in line} == line


def test_tail_max_stops_after_n_events(cluster, tmp_path):
    lines = "\n".join(json.dumps({**REGISTERED, "event_id": f"r{i}"}) for i in range(5))
    jobledger(cluster, tmp_path, "produce", stdin=lines)
    result = jobledger(
        cluster, tmp_path, "tail", "resourcemanager", "--from-beginning", "--max", "2",
        "--format", "event",
    )  # fmt: skip
    assert [json.loads(x)["event_id"] for x in result.stdout.splitlines()] == ["r0", "r1"]


def test_tail_skips_undecodable_records_with_their_position_and_goes_on(cluster, tmp_path):
    topic = topic_name(TopicRole.RESOURCE_MANAGER, cluster.prefix)
    serde = EventSerde()
    producer = transactional_producer(cluster.bootstrap, "test")
    producer.begin_transaction()
    producer.produce(topic, key=b"tm-1", value=b"\xde\xad\xbe\xef garbage")
    producer.produce(
        topic, key=b"tm-1", value=serde.encode(event_from_json(json.dumps(REGISTERED)), topic)
    )
    producer.commit_transaction(30)

    result = jobledger(cluster, tmp_path, "tail", "resourcemanager", "-o", "beginning", "-e")

    assert result.returncode == 0
    [line] = result.stdout.splitlines()
    assert line.startswith("resourcemanager/0@1 ")
    assert " tm-1 TaskManagerRegistered unsigned {" in line
    assert "resourcemanager/0@0: skipped: not Avro single-object encoded" in result.stderr


def test_confluent_wire_format_over_the_broker(cluster):
    serde = EventSerde(registry_url="mock://broker-test")
    producer = transactional_producer(cluster.bootstrap, "test")
    report = produce_lines([json.dumps(STATE)], producer, serde, cluster.prefix)
    assert report.written == 1

    topic = topic_name(TopicRole.JOB, cluster.prefix)
    raw = next(read_topic(read_committed_consumer(cluster.bootstrap), topic, True, True))
    assert raw.value()[0] == 0, "Confluent magic byte"
    assert json.loads(event_to_json(serde.decode(raw.value(), topic))) == STATE


def test_a_client_with_only_the_avsc_files_and_fastavro_decodes_what_produce_wrote(
    cluster, tmp_path
):
    assert jobledger(cluster, tmp_path, "produce", stdin=json.dumps(OFFERED)).returncode == 0
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    for avsc in SCHEMA_DIR.glob("*.avsc"):
        (schemas / avsc.name).write_text(avsc.read_text())
    client = tmp_path / "foreign_client.py"
    client.write_text(FOREIGN_CLIENT)

    result = subprocess.run(
        [sys.executable, str(client), cluster.bootstrap, topic_name(TopicRole.JOB, cluster.prefix),
         str(schemas)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    name, record = json.loads(result.stdout)
    assert name == "jobledger.SlotOffered"
    assert record == {k: v for k, v in OFFERED.items() if k != "type"}


FOREIGN_CLIENT = r'''
"""A consumer that knows Kafka, Avro and the .avsc files, and nothing of jobledger."""
import io, json, struct, sys
from pathlib import Path

sys.modules["jobledger"] = None  # any attempt to import jobledger now fails
from confluent_kafka import Consumer, KafkaError, TopicPartition
from fastavro import schemaless_reader
from fastavro.schema import fingerprint, load_schema, to_parsing_canonical_form

bootstrap, topic, schema_dir = sys.argv[1:]
schemas = {}
for path in Path(schema_dir).glob("*.avsc"):
    schema = load_schema(str(path))
    if schema.get("type") == "record":
        fp = fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO")
        schemas[bytes.fromhex(fp)] = schema  # the spec: little-endian, as fastavro lists it

consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "foreign",
                     "isolation.level": "read_committed", "enable.partition.eof": True})
parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
consumer.assign([TopicPartition(topic, p, -2) for p in parts])
done = set()
while len(done) < len(parts):
    msg = consumer.poll(1)
    if msg is None:
        continue
    if msg.error():
        if msg.error().code() == KafkaError._PARTITION_EOF:
            done.add(msg.partition())
        continue
    value = msg.value()
    assert value[:2] == b"\xc3\x01", value[:2]
    writer = schemas[value[2:10]]
    record = schemaless_reader(io.BytesIO(value[10:]), writer, None)
    print(json.dumps([writer["name"], record]))
assert "jobledger" not in [m.split(".")[0] for m in sys.modules if sys.modules[m] is not None]
'''


def test_end_of_partition_is_found_without_trusting_watermarks(cluster):
    """The end of a partition is where the broker says it is (`enable.partition.eof`), not
    a high watermark, which a broker may under-report after a plain multi-record batch: every
    record of one is read."""
    topic = topic_name(TopicRole.RESOURCE_MANAGER, cluster.prefix)
    serde = EventSerde()
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 50})
    for i in range(6):
        event = event_from_json(json.dumps({**REGISTERED, "event_id": f"plain-{i}"}))
        producer.produce(topic, key=b"tm-1", value=serde.encode(event, topic), partition=0)
    assert producer.flush(30) == 0

    consumer = read_committed_consumer(cluster.bootstrap)
    ids = [
        serde.decode(m.value(), topic).event_id
        for m in read_topic(consumer, topic, from_beginning=True, stop_at_end=True)
    ]
    consumer.close()
    assert ids == [f"plain-{i}" for i in range(6)]


def test_topics_create_is_explicit_idempotent_and_compacts_snapshots_and_state(cluster, tmp_path):
    result = jobledger(cluster, tmp_path, "topics", "create", "--partitions", "3")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("\texists") == len(TopicRole)
    again = create_topics(cluster.bootstrap, cluster.prefix, partitions=3)
    assert not any(r.created or r.error for r in again)

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    snapshot = ConfigResource("topic", topic_name(TopicRole.SNAPSHOT, cluster.prefix))
    kv_state = ConfigResource("topic", topic_name(TopicRole.KV_STATE, cluster.prefix))
    configs = admin.describe_configs([snapshot, kv_state])
    assert configs[snapshot].result()["cleanup.policy"].value == "compact"
    assert configs[kv_state].result()["cleanup.policy"].value == "compact"

    listed = jobledger(cluster, tmp_path, "topics", "list").stdout
    assert f"{topic_name(TopicRole.RESOURCE_MANAGER, cluster.prefix)}\t1 partitions" in listed
    assert f"{topic_name(TopicRole.JOB, cluster.prefix)}\t3 partitions" in listed


def test_tail_of_a_missing_topic_says_so(cluster, tmp_path):
    result = jobledger(cluster, tmp_path, "tail", "no-such-topic", "--exit-at-end")
    assert result.returncode == 1
    assert "topic 'no-such-topic' not found" in result.stderr


def test_without_bootstrap_commands_use_the_local_broker(broker_kind, tmp_path):
    if not apache_kafka.available():
        reason = "Apache Kafka needs Java and `make kafka`"
        if broker_kind == "kafka":
            pytest.fail(f"the tests run on Apache Kafka, but the CLI cannot start it: {reason}")
        pytest.skip(reason)
    env = {k: v for k, v in os.environ.items() if k != "JOBLEDGER_BOOTSTRAP"}
    env.update(JOBLEDGER_HOME=str(tmp_path), JOBLEDGER_TOPIC_PREFIX="local.")
    port = str(broker.free_port())

    def run(*args, stdin=None):
        return subprocess.run(
            [sys.executable, "-m", "jobledger.cli", *args],
            input=stdin, capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip

    started = run("broker", "--detach", "--port", port)
    name = "Apache Kafka"
    try:
        assert started.returncode == 0, started.stderr
        assert started.stdout.startswith(f"{name} listening on 127.0.0.1:{port}")
        assert started.stderr == "", "a successful start prints no warnings"
        assert run("broker", "--status").stdout.startswith(f"{name} listening on 127.0.0.1:{port}")
        assert run("broker", "--address").stdout == f"127.0.0.1:{port}\n"
        assert run("topics", "create", "--partitions", "1").returncode == 0
        assert run("produce", stdin=json.dumps(REGISTERED)).returncode == 0
        tailed = run("tail", "resourcemanager", "-o", "beginning", "-e", "--format", "event")
        assert [json.loads(x) for x in tailed.stdout.splitlines()] == [REGISTERED]
        again = run("broker")
        assert again.returncode == 1
        assert again.stderr.startswith(f"jobledger: {name} listening on 127.0.0.1:{port} (pid")
        assert "already; one local broker at a time" in again.stderr
    finally:
        stopped = run("broker", "--stop")
    assert stopped.stdout.startswith(f"stopped {name} listening on 127.0.0.1:{port}")
    assert run("broker", "--status").returncode == 1
    gone = run("broker", "--address")
    assert (gone.returncode, gone.stdout) == (1, "")


@pytest.mark.parametrize("detach", [True, False], ids=["detached", "foreground"])
def test_a_broker_on_a_taken_port_says_so_and_records_nothing(detach, broker_kind, tmp_path):
    env = {**os.environ, "JOBLEDGER_HOME": str(tmp_path)}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "jobledger.cli", "broker", "--port", str(port),
             *(["--detach"] if detach else [])],
            capture_output=True, text=True, timeout=60, env=env,
        )  # fmt: skip
    assert result.returncode == 69
    assert result.stderr.splitlines()[-1] == (
        f"jobledger: port {port} on 127.0.0.1 is taken by another process: pick another with "
        "--port, or stop what listens there"
    )
    assert "listening" not in result.stdout
    assert not (tmp_path / "broker.json").exists()


def test_tail_offsets_past_the_end_wait_there_and_e_at_a_past_time_ends_the_tail(cluster, tmp_path):
    lines = "\n".join(json.dumps({**REGISTERED, "event_id": f"e{i}"}) for i in range(3))
    assert jobledger(cluster, tmp_path, "produce", stdin=lines).returncode == 0
    past_end = jobledger(cluster, tmp_path, "tail", "resourcemanager", "-o", "1000", "-e")
    assert (past_end.returncode, past_end.stdout) == (0, ""), "no replay from the beginning"
    # without -e, a stop time that has passed ends the tail once every partition is read
    until_now = jobledger(
        cluster, tmp_path, "tail", "resourcemanager", "-o", "beginning", "-o",
        f"e@{int(time.time() * 1000) + 500}", "--format", "event",
    )  # fmt: skip
    assert until_now.returncode == 0, until_now.stderr
    assert [json.loads(x)["event_id"] for x in until_now.stdout.splitlines()] == ["e0", "e1", "e2"]


def _consecutive_free_ports(n: int) -> int:
    """The first of `n` consecutive free ports on loopback."""
    while True:
        first = broker.free_port()
        if first + n < 65536 and all(broker.port_is_free(first + i) for i in range(n)):
            return first


def test_a_three_node_cluster_keeps_serving_a_node_short_and_stops_whole(broker_kind, tmp_path):
    """`jobledger broker --nodes 3`: three KRaft nodes (each broker and controller), topics
    replicated on all three; with one node killed (SIGKILL) a transactional write and a
    read_committed read still go through; `--stop` ends the other two."""
    if not apache_kafka.available():
        pytest.skip("Apache Kafka needs Java and `make kafka`")
    env = {k: v for k, v in os.environ.items() if k != "JOBLEDGER_BOOTSTRAP"}
    env.update(JOBLEDGER_HOME=str(tmp_path), JOBLEDGER_TOPIC_PREFIX="three.")
    first = _consecutive_free_ports(3)
    bootstrap = ",".join(f"127.0.0.1:{first + i}" for i in range(3))

    def run(*args, stdin=None):
        return subprocess.run(
            [sys.executable, "-m", "jobledger.cli", *args],
            input=stdin, capture_output=True, text=True, timeout=180, env=env,
        )  # fmt: skip

    started = run("broker", "--nodes", "3", "--detach", "--port", str(first))
    assert started.returncode == 0, started.stderr
    assert started.stdout.startswith(f"Apache Kafka, 3 nodes, listening on {bootstrap} (pid ")
    recorded = json.loads((tmp_path / "broker.json").read_text())
    every = [recorded["pid"], *(pid for pid, _ in recorded["others"])]
    assert len(every) == 3 and recorded["port"] == first
    try:
        created = run("topics", "create", "--partitions", "3")  # by default: on all three
        assert created.returncode == 0, created.stderr
        admin = AdminClient({"bootstrap.servers": bootstrap})
        described = admin.list_topics(topic_name(TopicRole.JOB, "three."), timeout=30)
        replicas = [p.replicas for p in described.topics["three.job"].partitions.values()]
        assert all(sorted(r) == [1, 2, 3] for r in replicas), replicas
        job_topic = ConfigResource("topic", "three.job")
        in_sync = admin.describe_configs([job_topic])[job_topic].result()["min.insync.replicas"]
        assert in_sync.value == "2"
        low = run("topics", "create", "--topic-prefix", "low.", "--replication-factor", "1")
        assert low.returncode == 0, low.stderr
        again = run("topics", "create", "--topic-prefix", "low.")
        assert "low.job\t8 partitions\texists with 1 replica(s) where 3 were asked" in again.stdout

        os.kill(every[1], 9)
        wrote = run("produce", stdin=json.dumps(REGISTERED))
        assert wrote.returncode == 0, wrote.stderr
        tailed = run("tail", "resourcemanager", "-o", "beginning", "-e", "--format", "event")
        assert [json.loads(x) for x in tailed.stdout.splitlines()] == [REGISTERED]
    finally:
        stopped = run("broker", "--stop")
    assert stopped.stdout.startswith(f"stopped Apache Kafka, 3 nodes, listening on {bootstrap}")
    assert not any(pid_alive(pid) for pid in every), "a node outlived --stop"


def test_a_port_held_only_by_time_wait_connections_is_free_and_a_listened_one_is_not():
    """`broker --stop` then `broker` again: the old broker's connections linger in TIME_WAIT
    for a minute; Kafka binds through them (SO_REUSEADDR), so the port check must too."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = listener.accept()
    assert not broker.port_is_free(port), "a listening port is taken"
    accepted.close()  # the server side closes first: its end of the port goes to TIME_WAIT
    time.sleep(0.1)
    client.close()
    listener.close()
    assert broker.port_is_free(port)


def test_a_broker_recorded_by_the_version_with_two_kinds_is_still_found(tmp_path, monkeypatch):
    """A broker started before the upgrade (its record names a `kind`) is found, not taken
    for none while it holds the port."""
    monkeypatch.setenv("JOBLEDGER_HOME", str(tmp_path))
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        (tmp_path / "broker.json").write_text(json.dumps(
            {"pid": os.getpid(), "port": port, "log": "kafka.log", "kind": "kafka"}
        ))  # fmt: skip
        record = broker.read_record()
    assert record is not None and record.bootstrap == f"127.0.0.1:{port}"
