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

import contextlib
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

from .home import cache
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


def _classpath() -> str:
    if not installed():
        raise BrokerError(
            f"Apache Kafka {KAFKA_VERSION} is not installed in {libs_dir()}: run "
            "`make kafka` or `jobledger broker --install` (Maven fetches it from "
            "Maven Central)"
        )
    return str(libs_dir() / "*")


def server_properties(port: int, controller_port: int, data: Path) -> str:
    """One node, broker and controller, on loopback; every internal topic with one replica."""
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{LOOPBACK}:{controller_port}",
        "listeners": f"PLAINTEXT://{LOOPBACK}:{port},CONTROLLER://{LOOPBACK}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(data / "log"),
        "auto.create.topics.enable": "false",
        "num.partitions": "1",
        "default.replication.factor": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "8",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "8",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "group.min.session.timeout.ms": "1000",
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


def format_storage(data: Path, config: Path) -> None:
    """Format the log folder once (KRaft refuses to start on unformatted storage)."""
    if (data / "log" / "meta.properties").is_file():
        return
    cluster_id = subprocess.run(
        _java_command(STORAGE_TOOL, "random-uuid", heap="256m"),
        capture_output=True, text=True, check=True,
    ).stdout.strip().splitlines()[-1]  # fmt: skip
    done = subprocess.run(
        _java_command(STORAGE_TOOL, "format", "-t", cluster_id, "-c", str(config), heap="256m"),
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise BrokerError(f"formatting {data} failed:\n{done.stdout}{done.stderr}")


def spawn(port: int, data: Path, log_path: Path, detach: bool) -> subprocess.Popen[bytes]:
    """Start the broker on loopback (formatting `data` on first use) and return once the
    readiness probe passes. The controller listens on a free port of its own, remembered in
    `data` so a restarted broker finds its quorum where it left it."""
    data.mkdir(parents=True, exist_ok=True)
    controller_file = data / "controller.port"
    if controller_file.is_file():
        controller_port = int(controller_file.read_text())
    else:
        controller_port = free_port()
        controller_file.write_text(str(controller_port))
    config = data / "server.properties"
    config.write_text(server_properties(port, controller_port, data))
    format_storage(data, config)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            _java_command(MAIN_CLASS, str(config)),
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=detach,
        )  # fmt: skip
    try:
        wait_until_ready(proc, port, log_path)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc


def wait_until_ready(proc: subprocess.Popen[bytes], port: int, log_path: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not port_answers(port):
        if proc.poll() is not None:
            raise BrokerError(f"Apache Kafka exited with {proc.returncode}; see {log_path}")
        if time.monotonic() > deadline:
            raise BrokerError(f"Apache Kafka did not listen on port {port}; see {log_path}")
        time.sleep(0.1)
    probe(f"{LOOPBACK}:{port}", deadline - time.monotonic())


def probe(bootstrap: str, timeout_s: float) -> None:
    """Create a topic, commit a transactional record and read it back with read_committed."""
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import NewTopic

    from . import kafka

    topic = f"__jobledger_ready_{uuid.uuid4().hex[:8]}"
    timeout = max(5.0, timeout_s)
    admin = kafka.admin_client(bootstrap, quiet=True)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=timeout)[topic].result()
        # log_level 3: librdkafka's retries while the transaction coordinator loads are
        # expected here, not worth a warning on the user's terminal
        producer = kafka.producer(bootstrap, topic, {"log_level": 3}, init_timeout_s=timeout)
        producer.begin_transaction()
        producer.produce(topic, value=b"ready")
        producer.commit_transaction(timeout)
        consumer = kafka.read_committed_consumer(
            bootstrap, topic, extra={"enable.partition.eof": False}
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
