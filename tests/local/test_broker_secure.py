"""`jobledger broker --secure`: started through the CLI, then used with confluent-kafka and
nothing but the property files it wrote. Each refusal is shown next to the principal that is
allowed the same thing, so a test cannot pass because nothing works."""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from jobledger.schemas import EventSerde
from jobledger.schemas.tasks import ResultPartitionsReleased, TaskCancellationRequested
from jobledger.schemas.topics import TopicRole, topic_name
from jobledger.schemas.types import JobStatus
from jobledger.services import client_properties
from jobledger.services.kafka import SERVICES_GROUP_PREFIX
from jobledger.services.local import secure, tls
from jobledger.services.signing import SIGNER_HEADER, TYPE_HEADER, SigningKey

from ..support.secure_cluster import (
    PREFIX,
    cli,
    need_kafka,
    start_secure,
    stop_secure,
)
from .test_broker_cli import REGISTERED

pytestmark = pytest.mark.broker


def _transactional(config: dict[str, str], transactional_id: str) -> Producer:
    return Producer({**config, "transactional.id": transactional_id, "log_level": 0})


def _write(config: dict[str, str], transactional_id: str, topic: str) -> None:
    """One committed record on `topic` under `transactional_id`, or the KafkaException. A
    record refused before it reached the broker (a topic the principal may not even
    describe) fails the commit as `_INCONSISTENT`; its delivery report has the reason."""
    failed: list[KafkaError] = []
    producer = _transactional(config, transactional_id)
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, key=b"k", value=b"v", on_delivery=lambda e, _: e and failed.append(e))
    try:
        producer.commit_transaction(30)
    except KafkaException as exc:
        producer.poll(0)
        if exc.args[0].code() == KafkaError._INCONSISTENT and failed:
            raise KafkaException(failed[0]) from None
        raise


def _refusal(call: Callable[..., object], *args: object) -> str:
    """The name of the error `call(*args)` is refused with."""
    with pytest.raises(KafkaException) as refused:
        call(*args)
    return refused.value.args[0].name()


def test_start_says_secure_and_where_each_principal_s_property_file_is(secured):
    files = f"{secured.home}/secure/{{admin,services,runner,client}}.properties"
    for said in (secured.started.stdout, secured.run("broker", "--status").stdout):
        assert said.splitlines()[0].startswith(
            f"Apache Kafka secure (SASL_SSL, SCRAM-SHA-512, ACLs), listening on {secured.bootstrap}"
        )
        assert said.splitlines()[1] == f"client properties (librdkafka, kcat -F): {files}"


def test_every_secret_is_readable_by_its_owner_only_and_the_files_are_librdkafka_s(secured):
    folder = secured.home / "secure"
    secret = [
        *(folder / f"{p}.properties" for p in secure.PRINCIPALS),
        folder / "credentials.json",
        folder / "broker-keystore.pem",
        *secured.home.glob("broker/*/server.properties"),
    ]
    assert len(secret) == 7
    assert {str(p): stat.S_IMODE(p.stat().st_mode) for p in secret} == {
        str(p): 0o600 for p in secret
    }
    written = client_properties.load([folder / "client.properties"], [])  # as `-F` reads it
    assert written == {
        "security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "client", "sasl.password": written["sasl.password"],
        "ssl.ca.location": str(folder / "ca.pem"),
    }  # fmt: skip
    passwords = {secured.config(p)["sasl.password"] for p in secure.PRINCIPALS}
    assert len(passwords) == 4 and all(len(p) == 48 for p in passwords)


def test_the_client_writes_an_input_topic_and_reads_it_back(secured):
    job = topic_name(TopicRole.JOB, PREFIX)
    _write(secured.config("client"), f"jobledger-cli-{uuid.uuid4()}", job)
    reader = Consumer({
        **secured.config("client"), "group.id": f"jobledger-reader-{uuid.uuid4()}",
        "isolation.level": "read_committed", "enable.auto.commit": False,
    })  # fmt: skip
    try:
        reader.assign([TopicPartition(job, 0, 0)])
        message = reader.poll(30)
        assert message is not None and message.error() is None and message.value() == b"v"
    finally:
        reader.close()


def test_jobledger_s_own_commands_take_the_client_s_file(secured):
    """`-F` with the file `--secure` wrote: `produce` and `tail` as
    `client`."""
    file = str(secured.home / "secure" / "client.properties")
    where = ["--bootstrap", secured.bootstrap, "-F", file]
    event = {**REGISTERED, "event_id": f"ev-{uuid.uuid4()}"}
    produced = cli(secured.home, "produce", *where, stdin=json.dumps(event))
    assert produced.returncode == 0, produced.stderr
    tailed = cli(secured.home, "tail", "resourcemanager", "-o", "beginning", "-e",
                 "--format", "event", *where)  # fmt: skip
    assert tailed.returncode == 0, tailed.stderr
    assert event in [json.loads(line) for line in tailed.stdout.splitlines()]


def test_only_the_services_take_a_service_s_transactional_id(secured):
    """`init_transactions` under a service's id would fence it: refused, so a
    client cannot stop a service (which exits at once when fenced)."""
    service_id = f"jobledger-{topic_name(TopicRole.RESOURCE_MANAGER, PREFIX)}-0"
    for thief in ("client", "runner"):
        producer = _transactional(secured.config(thief), service_id)
        refusal = _refusal(producer.init_transactions, 30)
        assert refusal == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", thief
    _transactional(secured.config("services"), service_id).init_transactions(30)


def test_only_the_services_write_dead_letters_snapshots_and_checkpoints(secured):
    writers = {"client": "jobledger-cli-", "runner": f"jobledger-runner-{PREFIX}"}
    for role in (TopicRole.DEAD_LETTER, TopicRole.SNAPSHOT, TopicRole.CHECKPOINT):
        topic = topic_name(role, PREFIX)
        for writer, ids in writers.items():
            config, transactional_id = secured.config(writer), f"{ids}{uuid.uuid4()}"
            refusal = _refusal(_write, config, transactional_id, topic)
            assert refusal == "TOPIC_AUTHORIZATION_FAILED", (writer, topic)
        _write(secured.config("services"), f"jobledger-{PREFIX}test-{uuid.uuid4()}", topic)


def test_only_the_services_join_their_consumer_group(secured):
    """A member that never processes would hold every partition of the services:
    refused, so only the services join their group."""
    group = f"{SERVICES_GROUP_PREFIX}{PREFIX}"
    job = topic_name(TopicRole.JOB, PREFIX)
    seen = {}
    for principal in ("client", "services"):
        member = Consumer({
            **secured.config(principal), "group.id": group, "log_level": 0,
            "session.timeout.ms": 6000, "auto.offset.reset": "earliest",
        })  # fmt: skip
        try:
            member.subscribe([job])
            for _ in range(30):
                message = member.poll(1)
                if message is not None:
                    seen[principal] = message.error().name() if message.error() else "joined"
                    break
                if member.assignment():
                    seen[principal] = "joined"
                    break
        finally:
            member.close()
    assert seen == {"client": "GROUP_AUTHORIZATION_FAILED", "services": "joined"}


def test_only_runners_make_and_write_result_partitions(secured):
    result = f"{PREFIX}result.job-1.a.b"
    client = AdminClient({**secured.config("client"), "log_level": 0})
    refused = client.create_topics([NewTopic(result, 1, 1)])
    assert _refusal(refused[result].result, 30) == "TOPIC_AUTHORIZATION_FAILED"
    runner = AdminClient({**secured.config("runner"), "log_level": 0})
    runner.create_topics([NewTopic(result, 1, 1)])[result].result(30)
    _write(secured.config("runner"), f"jobledger-runner-{PREFIX}r1-task-0", result)
    client_id = f"jobledger-cli-{uuid.uuid4()}"
    refusal = _refusal(_write, secured.config("client"), client_id, result)
    assert refusal == "TOPIC_AUTHORIZATION_FAILED"


def _connect_error(config: dict[str, str]) -> int:
    """The first error a client with `config` meets when it asks for metadata (its error
    callback runs from `poll`; a loaded machine may take seconds to refuse)."""
    errors: list[KafkaError] = []
    client = Producer({**config, "error_cb": errors.append, "log_level": 0})
    with pytest.raises(KafkaException):
        client.list_topics(timeout=3)
    deadline = time.monotonic() + 20
    while not errors and time.monotonic() < deadline:
        client.poll(0.2)
    assert errors, "the client was refused without saying why"
    return errors[0].code()


def test_a_wrong_password_plaintext_and_another_ca_are_refused(secured, tmp_path):
    client = secured.config("client")
    assert _connect_error({**client, "sasl.password": "not-it"}) == KafkaError._AUTHENTICATION
    plaintext = {"bootstrap.servers": secured.bootstrap}
    assert _connect_error(plaintext) in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)
    tls.make_certificates(tmp_path / "other-ca.pem", tmp_path / "other-keystore.pem")
    trusting_another = {**client, "ssl.ca.location": str(tmp_path / "other-ca.pem")}
    assert _connect_error(trusting_another) == KafkaError._SSL


def test_secure_on_a_broker_started_insecure_says_so_in_one_line(tmp_path):
    """A recorded broker is trusted while its process lives and its port answers: this
    process and a socket of its own stand in for one started without --secure."""
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        record = {"pid": os.getpid(), "port": port, "log": "x.log", "others": []}
        (tmp_path / "broker.json").write_text(json.dumps(record))
        refused = cli(tmp_path, "broker", "--secure", "--detach", timeout=60)
    assert refused.returncode == 1
    assert refused.stderr.splitlines() == [
        f"jobledger: Apache Kafka listening on 127.0.0.1:{port} (pid {os.getpid()}, log x.log) "
        "already, started without --secure: stop it first with `jobledger broker --stop`, then "
        "start it with --secure"
    ]


def test_three_secure_nodes_replicate_and_hold_the_acls(broker_kind, tmp_path):
    """`--nodes 3 --secure`: the brokers replicate over SASL_SSL as `admin`, and the ACLs
    hold on every node."""
    need_kafka(broker_kind)
    running = start_secure(tmp_path, 3)
    try:
        assert running.started.stdout.startswith("Apache Kafka, 3 nodes, secure (")
        admin = AdminClient({**running.config("admin"), "log_level": 0})
        job = topic_name(TopicRole.JOB, PREFIX)
        created = admin.create_topics([NewTopic(job, 3, 3, config={"min.insync.replicas": "2"})])
        created[job].result(30)
        described = admin.list_topics(job, timeout=30).topics[job].partitions.values()
        assert all(sorted(p.replicas) == [1, 2, 3] for p in described)
        _write(running.config("client"), f"jobledger-cli-{uuid.uuid4()}", job)
        producer = _transactional(running.config("client"), f"jobledger-{job}-0")
        refusal = _refusal(producer.init_transactions, 30)
        assert refusal == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
        _write(running.config("services"), f"jobledger-{job}-0", job)
    finally:
        stop_secure(running)


def test_a_running_secure_broker_grants_the_acls_for_another_prefix_on_request(secured):
    other = "other."
    job = topic_name(TopicRole.JOB, other)
    admin = AdminClient({**secured.config("admin"), "log_level": 0})
    admin.create_topics([NewTopic(job, 1, 1)])[job].result(30)
    client, transactional_id = secured.config("client"), f"jobledger-cli-{uuid.uuid4()}"
    assert _refusal(_write, client, transactional_id, job) == "TOPIC_AUTHORIZATION_FAILED"
    granted = secured.run("broker", "--secure", "--detach", "--topic-prefix", other)
    assert granted.returncode == 0, granted.stderr
    count = len(secure.acl_bindings(other))
    assert granted.stderr == f"granted {count} ACLs for topic prefix 'other.'\n"
    _write(client, f"jobledger-cli-{uuid.uuid4()}", job)


def test_a_topic_prefix_without_secure_is_refused_in_one_line(tmp_path):
    refused = cli(tmp_path, "broker", "--topic-prefix", "x.", timeout=60)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr.splitlines() == [
        "jobledger: --topic-prefix names the prefix the ACLs of --secure are for: give --secure too"
    ]


def test_a_secure_storage_whose_passwords_are_gone_is_refused_in_one_line(tmp_path):
    """Its SCRAM users were made from passwords no file holds any more: new ones would never
    authenticate, so nothing starts and the user is told what to delete."""
    data = tmp_path / "broker" / "kafka-data-secure"
    data.mkdir(parents=True)
    refused = cli(tmp_path, "broker", "--secure", "--detach", timeout=60)
    assert (refused.returncode, refused.stdout) == (69, "")
    assert refused.stderr.splitlines() == [
        f"jobledger: {data} holds a secure broker's storage, but the passwords its users were "
        f"made with ({tmp_path}/secure/credentials.json) are gone: delete {data} to start afresh"
    ]
    assert not (tmp_path / "secure").exists()


def test_a_job_runs_with_each_role_on_nothing_but_its_own_property_file(secured, tmp_path):
    """SASL_SSL and signatures end to end: the services, a runner (its Spark Kafka source, its
    tasks' producers, its result partitions) and a client each talk SASL_SSL with SCRAM
    through `-F` alone and sign with their own key; the services check every input against
    the keyring, and a job with a shuffle runs to FINISHED with nothing dead-lettered; the
    history names each event's writer. The runner, given the keyring too, deletes the job's
    result topics on the services' release, a release forged for another job's deletes
    nothing, and the runner's log has no trace and none of Spark's routine warnings from
    its start to its stop."""
    prefix = f"e2e{uuid.uuid4().hex[:6]}."
    granted = secured.run("broker", "--secure", "--detach", "--topic-prefix", prefix)
    assert granted.returncode == 0, granted.stderr

    def as_(principal: str) -> list[str]:
        folder = secured.home / "secure"
        return ["--bootstrap", secured.bootstrap, "--topic-prefix", prefix,
                "-F", str(folder / f"{principal}.properties"),
                "--signing-key", str(folder / f"{principal}.key")]  # fmt: skip

    created = secured.run("topics", "create", *as_("admin"))
    assert created.returncode == 0, created.stderr
    env = {k: v for k, v in os.environ.items() if k != "JOBLEDGER_BOOTSTRAP"}
    env["JOBLEDGER_HOME"] = str(secured.home)
    started = []
    try:
        for name, args in (
            ("services", ["services", "run", *as_("services"),
                          "--keyring", str(secured.home / "secure" / "keyring.json")]),
            ("runner", ["runner", *as_("runner"), "--slots", "2",
                        "--checkpoint", str(tmp_path / "checkpoint"),
                        "--keyring", str(secured.home / "secure" / "keyring.json")]),
        ):  # fmt: skip
            log = open(tmp_path / f"{name}.log", "wb")  # noqa: SIM115 (the child keeps it)
            started.append(subprocess.Popen(
                [sys.executable, "-m", "jobledger.cli", *args], stdout=log, stderr=log, env=env
            ))  # fmt: skip
        jobgraph = Path(__file__).resolve().parents[2] / "examples" / "jobgraph.json"
        submitted = secured.run("job", "submit", str(jobgraph), *as_("client"), "-o", "json")
        assert submitted.returncode == 0, submitted.stderr
        job_id = json.loads(submitted.stdout)["job_id"]
        waited = secured.run("job", "wait", job_id, *as_("client"), "--timeout", "180")
        logs = {p.name: p.read_text()[-2000:] for p in tmp_path.glob("*.log")}
        finished = waited.stdout.startswith(f"job {job_id} FINISHED at ")
        assert (waited.returncode, finished) == (0, True), (
            waited.stdout + waited.stderr + json.dumps(logs, indent=1)
        )
        dead = secured.run("tail", "deadletter", "-o", "beginning", "-e", *as_("client"))
        assert (dead.returncode, dead.stdout) == (0, ""), dead.stdout + dead.stderr
        verified = secured.run("replay", "--verify", *as_("client"))
        assert verified.returncode == 0, verified.stdout + verified.stderr
        # the history names each event's writer (the home's keyring, by default)
        told = secured.run("history", job_id, *as_("client"), "-o", "json")
        assert told.returncode == 0, told.stderr
        writers = {(e["event"]["type"], e["writer"]["principal"])
                   for e in json.loads(told.stdout)["events"]}  # fmt: skip
        assert {("JobSubmitted", "client"), ("JobStatusChanged", "services"),
                ("TaskExecutionStateChanged", "runner")} <= writers, writers  # fmt: skip
        assert {principal for _, principal in writers} == {"client", "services", "runner"}
        runner_log = tmp_path / "runner.log"
        deleted = f"job {job_id} ended: deleted its "
        _wait_for(lambda: deleted in runner_log.read_text(), runner_log)
        assert _result_topics(secured, prefix, job_id) == []
        _forged_releases_delete_nothing(secured, prefix, runner_log)
        runner = started[1]
        runner.terminate()
        assert runner.wait(60) == 0, runner_log.read_text()[-3000:]
        said = runner_log.read_text()
        noise = ("Traceback", "BrokenPipeError", "Exception", "WARN DataSourceManager",
                 "WARN DAGScheduler", "WARN ResolveWriteToStream")  # fmt: skip
        assert [n for n in noise if n in said] == [], said[-3000:]
    finally:
        for process in started:
            process.terminate()
        for process in started:
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()


def _result_topics(secured, prefix: str, job_id: str) -> list[str]:
    admin = AdminClient({**secured.config("admin"), "log_level": 0})
    start = f"{prefix}result.{job_id}."
    return sorted(t for t in admin.list_topics(timeout=30).topics if t.startswith(start))


def _wait_for(condition: Callable[[], bool], log: Path, limit_s: float = 60) -> None:
    """Until `condition` holds; past `limit_s` the test fails with the end of `log`."""
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)


def _forged_releases_delete_nothing(secured, prefix: str, runner_log: Path) -> None:
    """A victim job's result topic, then releases of it the services did not sign, written
    as a client may: unsigned, signed by the client, and naming the services' key over a
    signature of the client's, and a cancellation the client signed. Each is one warning line
    of the runner's; the topic stays."""
    victim = f"{prefix}result.victim.a.b"
    runner = AdminClient({**secured.config("runner"), "log_level": 0})
    runner.create_topics([NewTopic(victim, 1, 1)])[victim].result(30)
    keys = {
        p: SigningKey.load(secured.home / "secure" / f"{p}.key") for p in ("client", "services")
    }
    topic = topic_name(TopicRole.TASK_EXECUTOR, prefix)
    release = ResultPartitionsReleased(
        event_id=uuid.uuid4().hex, event_time=int(time.time() * 1000), producer="mallory",
        job_id="victim", resource_id="runner-0", job_status=JobStatus.FINISHED,
    )  # fmt: skip
    value, kind = EventSerde().encode(release, topic), ResultPartitionsReleased.type_name()
    by_client = keys["client"].headers(topic, b"runner-0", value, kind)
    forged = {
        "unsigned": {},
        "client": by_client,
        "services' id": {**by_client, SIGNER_HEADER: keys["services"].key_id.encode()},
    }
    cancel = TaskCancellationRequested(
        event_id=uuid.uuid4().hex, event_time=int(time.time() * 1000), producer="mallory",
        job_id="victim", resource_id="runner-0", execution_attempt_id="a-victim",
    )  # fmt: skip
    cancel_value, cancel_kind = EventSerde().encode(cancel, topic), cancel.type_name()
    producer = Producer({**secured.config("client"), "log_level": 0})
    for headers in forged.values():
        producer.produce(topic, key=b"runner-0", value=value,
                         headers=[(TYPE_HEADER, kind.encode()), *headers.items()])  # fmt: skip
    signed = keys["client"].headers(topic, b"runner-0", cancel_value, cancel_kind)
    producer.produce(topic, key=b"runner-0", value=cancel_value,
                     headers=[(TYPE_HEADER, cancel_kind.encode()), *signed.items()])  # fmt: skip
    assert producer.flush(30) == 0
    ignored = "jobledger.runner ignored "

    def refusals() -> list[str]:
        lines = runner_log.read_text().splitlines()
        return [line.split(ignored, 1)[1] for line in lines if ignored in line]

    _wait_for(lambda: len(refusals()) >= len(forged) + 1, runner_log)
    services_id = keys["services"].key_id
    release_of = "ResultPartitionsReleased for job victim: "
    assert refusals() == [
        f"{release_of}unsigned record (no jobledger.signer/jobledger.signature header)",
        f"{release_of}written by client (client): only the services decide",
        f"{release_of}bad signature for key {services_id} (services): the record is not what "
        "that key signed",
        "TaskCancellationRequested for attempt a-victim of job victim: written by client "
        "(client): only the services decide",
    ]
    assert _result_topics(secured, prefix, "victim") == [victim]


def test_the_fail_once_demo_runs_secured(secured, tmp_path):
    """`demo wordcount --secure --fail-once` on the home's secure broker (the
    session's, reused, its ACLs granted for the demo's prefix): the services and the runner
    each on their own principal and key, every record signed and checked, none refused, the
    failed attempt restarted, the counts exact."""
    words = Path(__file__).resolve().parents[2] / "examples" / "words.txt"
    done = cli(secured.home, "demo", "wordcount", str(words), "--secure", "--fail-once",
               "--parallelism", "2", "--timeout", "240",
               "--topic-prefix", f"demo{uuid.uuid4().hex[:6]}.", timeout=600)  # fmt: skip
    printed = done.stdout
    assert done.returncode == 0, f"{printed}\n--- stderr (end) ---\n{done.stderr[-4000:]}"
    assert "SASL_SSL, signed records" in printed
    assert re.search(r"^\d+ events in the log, 0 of them dead-lettered$", printed, re.M), printed
    assert re.search(r"count\[\d\]#0 on runner-0/\d: .*FAILED", printed), printed
    assert re.search(r"count\[\d\]#1 on runner-0/\d: .*FINISHED", printed), printed
    assert "counts equal a plain Python count" in printed


@pytest.mark.parametrize(
    ("command", "role"),
    [
        (("job", "list"), "client"),
        (("topics", "create"), "admin"),
        (("services", "run"), "services"),
    ],
)
def test_a_command_without_credentials_on_the_home_s_secure_broker_names_the_files(
    secured, command, role
):
    """Without -F, the home's secure broker refuses the command's clients: it says which
    principal's files to pass at once, not that no broker answers nor to start one."""
    folder = secured.home / "secure"
    for where in ([], ["--bootstrap", secured.bootstrap]):
        result = secured.run(*command, *where)
        assert result.returncode == 1, result.stderr
        assert result.stderr == (
            f"jobledger: the home's broker at {secured.bootstrap} is secure and takes only "
            f"authenticated clients: pass -F {folder}/{role}.properties --signing-key "
            f"{folder}/{role}.key (the {role} principal's; the other principals' files are "
            "beside them)\n"
        )
