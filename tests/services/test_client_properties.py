"""The operator's Kafka client properties (`-F FILE`, `-X key=value`, as kcat takes them):
read, checked in one line, given to every client, and translated for Spark's connector."""

from __future__ import annotations

import pytest

from jobledger.cli import main
from jobledger.services import client_properties, kafka
from jobledger.services.client_properties import ClientPropertiesError, java_properties, load


@pytest.fixture(autouse=True)
def no_properties_left_behind():
    yield
    kafka.use_client_properties({})


def test_a_file_then_pairs_each_later_one_winning(tmp_path, monkeypatch):
    monkeypatch.delenv(client_properties.FILE_ENV, raising=False)
    first, second = tmp_path / "a.properties", tmp_path / "b.properties"
    first.write_text("# librdkafka's form\nclient.id=first\nsocket.timeout.ms=3000\n\n")
    second.write_text("! Java's form\nclient.id: second\n")
    assert load([first, second], ["socket.timeout.ms=4000"]) == {
        "client.id": "second", "socket.timeout.ms": "4000",
    }  # fmt: skip


def test_the_environment_names_the_file_when_no_file_is_given(tmp_path, monkeypatch):
    path = tmp_path / "client.properties"
    path.write_text("client.id=from-env\n")
    monkeypatch.setenv(client_properties.FILE_ENV, str(path))
    assert load([], []) == {"client.id": "from-env"}
    other = tmp_path / "other.properties"
    other.write_text("client.id=given\n")
    assert load([other], []) == {"client.id": "given"}


@pytest.mark.parametrize(("pairs", "said"), [
    (["transactional.id=mine"], "transactional.id is jobledger's to set (every partition's "
                                "producer has its own, which fences the last)"),
    (["isolation.level=read_uncommitted"], "isolation.level is jobledger's to set (every "
                                           "reader reads committed records only)"),
    (["no.such.key=1"], 'client property refused: No such configuration property: "no.such.key"'),
    (["security.protocol=BOGUS"], 'client property refused: Invalid value "BOGUS" for '
                                  'configuration property "security.protocol"'),
    (["nokey"], "-X: 'nokey' is not key=value"),
])  # fmt: skip
def test_what_jobledger_owns_or_librdkafka_refuses_is_one_line(pairs, said, monkeypatch):
    monkeypatch.delenv(client_properties.FILE_ENV, raising=False)
    with pytest.raises(ClientPropertiesError) as refused:
        load([], pairs)
    assert str(refused.value) == said


def test_a_bad_line_of_a_file_is_named_by_its_number(tmp_path):
    path = tmp_path / "client.properties"
    path.write_text("client.id=x\njust words\n")
    with pytest.raises(ClientPropertiesError, match=rf"^{path}:2: 'just words' is not key=value$"):
        load([path], [])


def test_the_command_line_refuses_them_before_it_does_anything(capsys):
    assert main(["topics", "list", "-X", "acks=1", "--bootstrap", "127.0.0.1:1"]) == 1
    assert capsys.readouterr().err == (
        "jobledger: acks is jobledger's to set (transactions need acks=all)\n"
    )


def test_every_client_gets_them_after_jobledgers_own_settings(monkeypatch):
    built = []
    monkeypatch.setattr(kafka, "Consumer", lambda config: built.append(config))
    monkeypatch.setattr(kafka, "AdminClient", lambda config: built.append(config))
    kafka.use_client_properties({"security.protocol": "SASL_SSL", "socket.timeout.ms": "9000"})
    kafka.read_committed_consumer("h:1")
    kafka.admin_client("h:1")
    for config in built:
        assert (config["security.protocol"], config["socket.timeout.ms"]) == ("SASL_SSL", "9000")
    assert built[0]["isolation.level"] == "read_committed"


@pytest.mark.broker
def test_a_property_given_with_x_reaches_the_client(kafka_bootstrap, capsys):
    """TLS asked of a plaintext broker: the command's client speaks TLS, so no broker answers."""
    status = main(["topics", "list", "--bootstrap", kafka_bootstrap, "-X", "security.protocol=SSL"])
    assert status == 69
    assert capsys.readouterr().err.startswith(
        f"jobledger: no Kafka broker answers at {kafka_bootstrap}"
    )


def test_spark_s_connector_gets_the_same_settings_in_java_s_names():
    scram = {
        "security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "runner", "sasl.password": "s3cret", "ssl.ca.location": "/h/ca.pem",
        "socket.timeout.ms": "5000",
    }  # fmt: skip
    assert java_properties(scram) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                            'username="runner" password="s3cret";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/h/ca.pem",
        "socket.timeout.ms": "5000",
    }  # fmt: skip
