"""Kafka client properties from the operator, taken as Kafka's own tools and kcat take them:
a properties file (`-F FILE`, or `$JOBLEDGER_CLIENT_CONFIG`) and `-X key=value` pairs, the
later winning. They reach every client jobledger builds (`kafka.use_client_properties`), so a
cluster with SASL_SSL and SCRAM, or any other librdkafka setting, works from every command,
the services and the runner alike.

jobledger keeps the keys its guarantees rest on (transactions, read_committed, where each
key goes): a file that sets one of them is refused in one line rather than obeyed quietly.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from . import kafka

FILE_ENV = "JOBLEDGER_CLIENT_CONFIG"

OWNED = {
    "bootstrap.servers": "pass --bootstrap instead",
    "metadata.broker.list": "pass --bootstrap instead",
    "transactional.id": "every partition's producer has its own, which fences the last",
    "enable.idempotence": "transactions need it",
    "acks": "transactions need acks=all",
    "isolation.level": "every reader reads committed records only",
    "group.id": "each reader names its own group",
    "enable.auto.commit": "offsets are committed inside transactions",
    "partitioner": "keys are placed as Java's client places them",
}
"""Keys jobledger sets itself, and why an operator's value would break something."""


class ClientPropertiesError(ValueError):
    """A property file or pair jobledger cannot use; the message says which and why."""


def load(files: Iterable[Path], pairs: Iterable[str]) -> dict[str, str]:
    """The properties of `files` (else of `$JOBLEDGER_CLIENT_CONFIG`), then of `pairs`, each
    later one winning; checked (`check`)."""
    files = list(files)
    if not files and os.environ.get(FILE_ENV):
        files = [Path(os.environ[FILE_ENV])]
    properties: dict[str, str] = {}
    for path in files:
        properties.update(read_file(path))
    for pair in pairs:
        key, value = parse_pair(pair, "-X")
        properties[key] = value
    check(properties)
    return properties


def read_file(path: Path) -> dict[str, str]:
    """`key=value` lines (librdkafka's and kcat's format; Java's `key: value` and `#`/`!`
    comments are read too)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ClientPropertiesError(f"{path}: {exc.strerror or exc}") from exc
    properties = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if line and not line.startswith(("#", "!")):
            key, value = parse_pair(line, f"{path}:{number}")
            properties[key] = value
    return properties


def parse_pair(text: str, where: str) -> tuple[str, str]:
    separator = min((i for i in (text.find("="), text.find(":")) if i > 0), default=-1)
    if separator < 0:
        raise ClientPropertiesError(f"{where}: {text!r} is not key=value")
    return text[:separator].strip(), text[separator + 1 :].strip()


def check(properties: Mapping[str, str]) -> None:
    """Refuse what jobledger owns, and what librdkafka does not know or accept (a misspelt
    key would otherwise surface as a client that silently ignores the operator)."""
    for key in properties:
        if key in OWNED:
            raise ClientPropertiesError(f"{key} is jobledger's to set ({OWNED[key]})")
    refusal = kafka.refusal_of(properties)
    if refusal is not None:
        raise ClientPropertiesError(f"client property refused: {refusal}")


def java_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """The same settings for a Java client (Spark's own Kafka connector): the names that
    differ between librdkafka and Java translated, SASL credentials as the JAAS line Java
    expects, a PEM CA file as a PEM trust store."""
    java = {k: v for k, v in properties.items() if k not in _LIBRDKAFKA_ONLY}
    if "sasl.mechanisms" in properties:
        java["sasl.mechanism"] = properties["sasl.mechanisms"]
    if "sasl.username" in properties:
        module = (
            "org.apache.kafka.common.security.scram.ScramLoginModule"
            if properties.get("sasl.mechanisms", "").upper().startswith("SCRAM")
            else "org.apache.kafka.common.security.plain.PlainLoginModule"
        )
        java["sasl.jaas.config"] = (
            f'{module} required username="{properties["sasl.username"]}" '
            f'password="{properties.get("sasl.password", "")}";'
        )
    if "ssl.ca.location" in properties:
        java["ssl.truststore.type"] = "PEM"
        java["ssl.truststore.location"] = properties["ssl.ca.location"]
    return java


_LIBRDKAFKA_ONLY = frozenset({
    "sasl.mechanisms", "sasl.username", "sasl.password", "ssl.ca.location",
    "enable.ssl.certificate.verification",
})  # fmt: skip
"""librdkafka's names that Java spells otherwise (`java_properties` translates them)."""
