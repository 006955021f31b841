"""Apache Kafka as a single-node KRaft broker on loopback, run from Maven Central's jars.

The broker (`kafka.Kafka`) and its storage formatter (`kafka.tools.StorageTool`) live in
`org.apache.kafka:kafka_2.13`; `install()` resolves it with Maven into a cache folder, adding
the log4j2 binding that the release tarball ships but the published dependencies do not (Kafka
4 logs through SLF4J 2 and log4j2). One node is broker and controller at once, so every
internal topic (consumer offsets, transaction state, share-group state) gets replication
factor 1, and consumer groups start without the three-second initial rebalance delay.

The broker is ready when it has done what every jobledger process needs: a topic is created,
a transactional record is committed and read back with `read_committed` (the approach of
Kafka Streams' own `EmbeddedKafkaCluster`: wait for the real thing, not for an open port).
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import subprocess
import threading
import time
import uuid
from pathlib import Path

from ..home import cache
from . import secure, tls
from .loopback import LOOPBACK, BrokerError, free_port, port_answers

KAFKA_VERSION = "4.1.1"
LOG4J_VERSION = "2.24.3"
SLF4J_VERSION = "2.0.17"
LIBS_ENV = "JOBLEDGER_KAFKA_LIBS"
MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"
READY_TIMEOUT_S = 90.0

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>jobledger</groupId>
  <artifactId>apache-kafka-broker</artifactId>
  <version>{kafka}</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
      <version>{kafka}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j2-impl</artifactId>
      <version>{log4j}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId>
      <version>{log4j}</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId><version>{slf4j}</version>
    </dependency>
  </dependencies>
</project>
"""

_LOG4J2 = """status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
logger.kafka.name = kafka
logger.kafka.level = warn
logger.apache.name = org.apache.kafka
logger.apache.level = warn
logger.started.name = kafka.server.KafkaRaftServer
logger.started.level = info
"""


def libs_dir() -> Path:
    """Where the broker's jars are: `$JOBLEDGER_KAFKA_LIBS`, else a per-version cache folder
    in jobledger's download cache (`home.cache()`)."""
    if os.environ.get(LIBS_ENV):
        return Path(os.environ[LIBS_ENV])
    return cache() / f"apache-kafka-{KAFKA_VERSION}" / "libs"


def java() -> str:
    found = shutil.which("java")
    if found is None:
        raise BrokerError(
            "Apache Kafka needs Java 17 or newer: install a JDK (Debian: apt-get install "
            "openjdk-17-jre-headless), or give --bootstrap / JOBLEDGER_BOOTSTRAP of any Kafka"
        )
    return found


def installed() -> bool:
    libs = libs_dir()
    return (libs / f"kafka_2.13-{KAFKA_VERSION}.jar").is_file() and any(
        libs.glob("log4j-slf4j2-impl-*.jar")
    )


def available() -> bool:
    """Java and the jars are both here, so `spawn` can run without downloading anything."""
    return shutil.which("java") is not None and installed()


def install(quiet: bool = True) -> Path:
    """Resolve Apache Kafka and the log4j2 binding from Maven Central into `libs_dir()`."""
    if installed():
        return libs_dir()
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerError(
            f"Apache Kafka's jars are not in {libs_dir()} and Maven is missing: install Maven "
            "(Debian: apt-get install maven), then run `jobledger broker --install` "
            f"(or point ${LIBS_ENV} at a folder holding kafka_2.13-{KAFKA_VERSION}.jar and its "
            "dependencies)"
        )
    libs = libs_dir()
    work = libs.parent
    work.mkdir(parents=True, exist_ok=True)
    pom = work / "pom.xml"
    pom.write_text(_POM.format(kafka=KAFKA_VERSION, log4j=LOG4J_VERSION, slf4j=SLF4J_VERSION))
    staging = work / f"libs-{uuid.uuid4().hex[:8]}"
    command = [mvn, "-B", "-f", str(pom), "dependency:copy-dependencies",
               f"-DoutputDirectory={staging}", "-DincludeScope=runtime"]  # fmt: skip
    if quiet:
        command.insert(1, "-q")
    done = subprocess.run(command, capture_output=quiet, text=True, check=False)
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise BrokerError(
            f"Maven could not resolve org.apache.kafka:kafka_2.13:{KAFKA_VERSION}:\n"
            + (done.stdout or "")[-2000:]
        )
    shutil.rmtree(libs, ignore_errors=True)
    staging.rename(libs)  # all or nothing: a half-copied folder never looks installed
    return libs


def require_installed() -> None:
    """Stop before anything is written (a node's configuration, its storage) when the jars
    are missing, naming the one command that installs them."""
    if not installed():
        raise BrokerError(
            f"Apache Kafka {KAFKA_VERSION} is not installed in {libs_dir()}: run "
            "`jobledger broker --install` (Maven fetches it from Maven Central; `make kafka` "
            "does the same)"
        )


def _classpath() -> str:
    require_installed()
    return str(libs_dir() / "*")


def server_properties(
    port: int, controller_port: int, data: Path, node: int = 1, voters: str | None = None,
    replicas: int = 1, secrets: secure.Secrets | None = None,
    settings: dict[str, str] | None = None,
) -> str:  # fmt: skip
    """Node `node`, broker and controller, on loopback. Alone (no `voters`), every internal
    topic has one replica; in a cluster of `voters` (`id@host:port,...`), `replicas` of
    them, and a write (a transaction's state, a group's offsets) is committed once all but one
    are in sync. With `secrets`, secured as `secure.server_settings` says; `settings` last
    (a test's broker that runs its retention every second, say)."""
    in_sync = str(max(1, replicas - 1))
    listener = secure.LISTENER if secrets else "PLAINTEXT"
    given = settings or {}
    settings = {
        "process.roles": "broker,controller",
        "node.id": str(node),
        "controller.quorum.voters": voters or f"{node}@{LOOPBACK}:{controller_port}",
        "listeners": f"{listener}://{LOOPBACK}:{port},CONTROLLER://{LOOPBACK}:{controller_port}",
        "advertised.listeners": f"{listener}://{LOOPBACK}:{port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(data / "log"),
        "auto.create.topics.enable": "false",
        "num.partitions": "1",
        "default.replication.factor": str(replicas),
        "offsets.topic.replication.factor": str(replicas),
        "min.insync.replicas": in_sync,  # the offsets topic's, and any topic's not set
        "offsets.topic.num.partitions": "8",
        "transaction.state.log.replication.factor": str(replicas),
        "transaction.state.log.min.isr": in_sync,
        "transaction.state.log.num.partitions": "8",
        "share.coordinator.state.topic.replication.factor": str(replicas),
        "share.coordinator.state.topic.min.isr": in_sync,
        "group.initial.rebalance.delay.ms": "0",
        "group.min.session.timeout.ms": "1000",
        **(secure.server_settings(secrets) if secrets else {}),
        **given,
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def _java_command(main: str, *args: str, heap: str = "1g") -> list[str]:
    return [
        java(), f"-Xmx{heap}", "-XX:+UseG1GC", "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={_log4j2_file()}",
        "-cp", _classpath(), main, *args,
    ]  # fmt: skip


def _log4j2_file() -> Path:
    path = libs_dir().parent / "log4j2.properties"
    if not path.is_file() or path.read_text() != _LOG4J2:
        path.write_text(_LOG4J2)
    return path


def random_cluster_id() -> str:
    """A cluster id as `kafka-storage random-uuid` prints one (a random UUID in URL-safe
    base64 without padding, never starting with a dash), made here rather than in a JVM
    that takes a second to start."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def format_storage(
    data: Path, config: Path, cluster_id: str | None = None,
    secrets: secure.Secrets | None = None,
) -> None:  # fmt: skip
    """Format the log folder once (KRaft refuses to start on unformatted storage); the nodes
    of one cluster share its `cluster_id`. With `secrets`, every principal's SCRAM credential
    is written into the storage too: the brokers authenticate with them before any
    controller could take a new one."""
    if (data / "log" / "meta.properties").is_file():
        return
    cluster_id = cluster_id or random_cluster_id()
    scram = secure.format_arguments(secrets) if secrets else []
    done = subprocess.run(
        _java_command(
            STORAGE_TOOL, "format", "-t", cluster_id, "-c", str(config), *scram, heap="256m"
        ),
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise BrokerError(f"formatting {data} failed:\n{done.stdout}{done.stderr}")


def spawn(
    port: int, data: Path, log_path: Path, detach: bool, secrets: secure.Secrets | None = None,
    settings: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:  # fmt: skip
    """Start the broker on loopback (formatting `data` on first use) and return once the
    readiness probe passes. The controller listens on a free port of its own, remembered in
    `data` so a restarted broker finds its quorum where it left it. With `secrets`, secured
    (`secure.py`), and the probe runs as `admin`."""
    require_installed()
    data.mkdir(parents=True, exist_ok=True)
    controller_file = data / "controller.port"
    if controller_file.is_file():
        controller_port = int(controller_file.read_text())
    else:
        controller_port = free_port()
        controller_file.write_text(str(controller_port))
    config = data / "server.properties"
    write_config(
        config, server_properties(port, controller_port, data, secrets=secrets, settings=settings)
    )
    format_storage(data, config, secrets=secrets)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            _java_command(MAIN_CLASS, str(config)),
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=detach,
        )  # fmt: skip
    try:
        wait_until_ready(proc, port, log_path, secrets=secrets)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc


def write_config(path: Path, text: str) -> None:
    """A node's server.properties, readable by its owner only: a secure node's holds the
    passwords of `admin` and `controller`."""
    tls.write_private(path, text.encode())


def wait_until_ready(
    proc: subprocess.Popen[bytes], port: int, log_path: Path, replicas: int = 1,
    others: tuple[tuple[subprocess.Popen[bytes], int, Path], ...] = (),
    secrets: secure.Secrets | None = None,
) -> None:  # fmt: skip
    """Every node listening (`proc` on `port`, and `others`), then the probe passing."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    for node, node_port, node_log in ((proc, port, log_path), *others):
        while not port_answers(node_port):
            if node.poll() is not None:
                raise BrokerError(f"Apache Kafka exited with {node.returncode}; see {node_log}")
            if time.monotonic() > deadline:
                raise BrokerError(
                    f"Apache Kafka did not listen on port {node_port}; see {node_log}"
                )
            time.sleep(0.1)
    bootstrap = ",".join(f"{LOOPBACK}:{p}" for p in (port, *(o[1] for o in others)))
    client = secure.client_config(secrets, "admin") if secrets else {}
    nodes = ((proc, log_path), *((node, node_log) for node, _, node_log in others))
    _probe_while_alive(nodes, bootstrap, deadline - time.monotonic(), replicas, client)


def _probe_while_alive(
    nodes: tuple[tuple[subprocess.Popen[bytes], Path], ...], bootstrap: str, timeout_s: float,
    replicas: int, client: dict[str, str],
) -> None:  # fmt: skip
    """`probe` in a thread of its own while this one watches the nodes: a node that exits
    (it could not bind a port, its storage is another cluster's) is reported at once with its
    log, instead of after the probe's timeout, which a port answered by some other process
    would otherwise run out."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            probe(bootstrap, timeout_s, replicas, client)
        except BaseException as exc:
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=run, name="kafka-ready-probe", daemon=True)
    thread.start()
    while thread.is_alive():
        for node, node_log in nodes:
            if node.poll() is not None:
                raise BrokerError(f"Apache Kafka exited with {node.returncode}; see {node_log}")
        thread.join(0.1)
    if outcome and outcome[0] is not None:
        raise outcome[0]


def spawn_cluster(
    ports: list[int], data: Path, log_paths: list[Path], detach: bool,
    secrets: secure.Secrets | None = None,
) -> list[subprocess.Popen[bytes]]:  # fmt: skip
    """A KRaft cluster of `len(ports)` nodes on loopback, each broker and controller (a
    quorum of all of them), internal topics replicated on three: started together (the
    controllers elect a leader among themselves), ready once a topic with a replica on every
    node takes and returns a committed record. The controllers' ports and the cluster id are
    kept in `data`, so a node restarted alone finds its quorum."""
    require_installed()
    data.mkdir(parents=True, exist_ok=True)
    kept = data / "controller.ports"
    if kept.is_file() and len(kept.read_text().split()) == len(ports):
        controllers = [int(p) for p in kept.read_text().split()]
    else:
        controllers = []
        while len(controllers) < len(ports):
            port = free_port()
            if port not in controllers and port not in ports:
                controllers.append(port)
        kept.write_text(" ".join(map(str, controllers)))
    id_file = data / "cluster.id"
    if not id_file.is_file():
        id_file.write_text(random_cluster_id())
    cluster_id = id_file.read_text().strip()
    voters = ",".join(f"{n}@{LOOPBACK}:{c}" for n, c in enumerate(controllers, start=1))
    replicas = min(3, len(ports))
    procs = []
    try:
        for n, (port, controller, log_path) in enumerate(
            zip(ports, controllers, log_paths, strict=True), start=1
        ):
            node = data / f"node-{n}"
            node.mkdir(exist_ok=True)
            config = node / "server.properties"
            settings = server_properties(port, controller, node, n, voters, replicas, secrets)
            write_config(config, settings)
            format_storage(node, config, cluster_id, secrets)
            procs.append(start_node(data, n, log_path, detach))
        others = tuple(zip(procs[1:], ports[1:], log_paths[1:], strict=True))
        wait_until_ready(procs[0], ports[0], log_paths[0], replicas, others, secrets)
    except BaseException:
        for proc in procs:
            proc.kill()
            proc.wait()
        raise
    return procs


def start_node(data: Path, node: int, log_path: Path, detach: bool) -> subprocess.Popen[bytes]:
    """Start node `node` of the cluster kept in `data` (formatted and configured by
    `spawn_cluster`) without waiting for it: alone, or again after it stopped."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    config = data / f"node-{node}" / "server.properties"
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            _java_command(MAIN_CLASS, str(config), heap="512m"),
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=detach,
        )  # fmt: skip


def probe(
    bootstrap: str, timeout_s: float, replicas: int = 1, client: dict[str, str] | None = None
) -> None:
    """Create a topic, commit a transactional record and read it back with read_committed,
    with the librdkafka settings `client` (a secure broker's `admin`)."""
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from .. import kafka

    topic = f"__jobledger_ready_{uuid.uuid4().hex[:8]}"
    timeout = max(5.0, timeout_s)
    client = {**(client or {}), "bootstrap.servers": bootstrap}
    admin = AdminClient({**client, "log_level": 0})
    try:
        created = admin.create_topics([NewTopic(topic, 1, replicas)], operation_timeout=timeout)
        created[topic].result()
        # log_level 3: librdkafka's retries while the transaction coordinator loads are
        # expected here, not worth a warning on the user's terminal
        producer = kafka.producer(
            bootstrap, topic, {**client, "log_level": 3}, init_timeout_s=timeout
        )
        producer.begin_transaction()
        producer.produce(topic, value=b"ready")
        producer.commit_transaction(timeout)
        consumer = kafka.read_committed_consumer(
            bootstrap, topic, extra={**client, "enable.partition.eof": False}
        )
        try:
            consumer.assign([TopicPartition(topic, 0, 0)])
            msg = consumer.poll(timeout)
            if msg is None or msg.error() or msg.value() != b"ready":
                raise BrokerError(f"Apache Kafka on {bootstrap} did not return a committed record")
        finally:
            consumer.close()
    except KafkaException as exc:
        raise BrokerError(f"Apache Kafka on {bootstrap} is not ready: {exc.args[0]}") from exc
    finally:
        with contextlib.suppress(KafkaException):
            admin.delete_topics([topic])[topic].result(timeout)
