"""`jobledger broker` started where it cannot run: Apache Kafka not installed yet, a node that
exits while starting. Each says what happened and leaves the home as it found it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from jobledger.services.local import apache_kafka
from jobledger.services.local.loopback import BrokerError

pytestmark = pytest.mark.broker

FAKE_MAVEN = """#!{python}
# Maven as `apache_kafka.install` calls it, copying jars that are not Kafka's: the broker
# installs on first use, then cannot run.
import pathlib, sys
[out] = [a.split("=", 1)[1] for a in sys.argv if a.startswith("-DoutputDirectory=")]
pathlib.Path(out).mkdir(parents=True)
for jar in ("kafka_2.13-{kafka}.jar", "log4j-slf4j2-impl-2.24.3.jar"):
    (pathlib.Path(out) / jar).write_bytes(b"not a jar")
pathlib.Path(sys.argv[0]).with_name("called").touch()
"""


def _bin_with(tmp_path, **tools: str) -> str:
    """A PATH of one folder holding Java and the given scripts (no real Maven)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    java = subprocess.run(["which", "java"], capture_output=True, text=True).stdout.strip()
    if java:
        (folder / "java").symlink_to(java)
    for name, text in tools.items():
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    return str(folder)


def _broker(tmp_path, path: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("JOBLEDGER_BOOTSTRAP", "JOBLEDGER_KAFKA_LIBS")
    }
    env.update(
        JOBLEDGER_HOME=str(tmp_path / "home"), JOBLEDGER_CACHE=str(tmp_path / "cache"), PATH=path
    )
    return subprocess.run(
        [sys.executable, "-m", "jobledger.cli", "broker", "--detach", "--port", "1"],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip


def test_a_first_start_installs_kafka_and_a_start_that_fails_leaves_nothing(tmp_path):
    path = _bin_with(
        tmp_path,
        mvn=FAKE_MAVEN.format(python=sys.executable, kafka=apache_kafka.KAFKA_VERSION),
    )
    result = _broker(tmp_path, path)

    assert result.returncode == 69, result.stderr
    assert (tmp_path / "bin" / "called").exists(), "the first start ran the installation"
    assert "Apache Kafka 4.1.1 is not installed yet: fetching it from Maven Central" in (
        result.stderr
    )
    assert f"jobledger: formatting {tmp_path}/home/broker/kafka-data failed:" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "home").exists(), list((tmp_path / "home").rglob("*"))


def test_without_maven_the_error_names_the_one_command_and_nothing_is_written(tmp_path):
    result = _broker(tmp_path, _bin_with(tmp_path))

    assert result.returncode == 69
    assert result.stderr.splitlines()[-1].startswith("jobledger: Apache Kafka's jars are not in ")
    assert "then run `jobledger broker --install`" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "home").exists()


def test_a_node_that_exits_while_starting_is_reported_with_its_log(tmp_path):
    """Its port answered by another process (taken between the check and the start), the
    node exits at once: the start says so and names the log, instead of probing someone
    else's port until the readiness timeout."""
    if not apache_kafka.available():
        pytest.skip("Apache Kafka needs Java and `jobledger broker --install`")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        log = tmp_path / "kafka.log"
        with pytest.raises(BrokerError) as failed:
            apache_kafka.spawn(port, tmp_path / "data", log, detach=False)
    assert str(failed.value) == f"Apache Kafka exited with 1; see {log}"
    assert "Address already in use" in log.read_text()
