"""Spark's Kafka connector for a standalone master, resolved once (services/runner/connector.py):
remembered jars are used while they are all there, a listing naming a jar that went is
resolved again, and a package Ivy cannot resolve is one line saying what it did not find."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from jobledger.services.runner import connector

PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"


@pytest.fixture
def jars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setenv("JOBLEDGER_CACHE", str(tmp_path / "cache"))
    made = [tmp_path / "a.jar", tmp_path / "b.jar"]
    for jar in made:
        jar.write_bytes(b"PK")
    return [str(jar) for jar in made]


def test_the_jars_resolved_once_are_used_while_all_of_them_are_there(jars, monkeypatch):
    resolutions = []
    monkeypatch.setattr(connector, "resolve", lambda p: resolutions.append(p) or list(jars))
    assert connector.connector_jars(PACKAGE) == jars
    assert connector.connector_jars(PACKAGE) == jars
    assert resolutions == [PACKAGE]

    Path(jars[1]).unlink()  # Ivy's cache cleaned: resolved again, not started without it
    assert connector.connector_jars(PACKAGE) == jars
    assert resolutions == [PACKAGE, PACKAGE]


@pytest.mark.skipif(shutil.which("java") is None, reason="spark-submit needs Java")
def test_a_package_ivy_cannot_resolve_is_said_in_one_line(jars):
    with pytest.raises(connector.ConnectorUnresolved) as refused:
        connector.connector_jars("org.apache.spark:spark-sql-kafka-0-10_2.13:0.0.0")
    said = str(refused.value)
    assert said.startswith(
        "Spark did not start: Ivy could not resolve "
        "spark.jars.packages=org.apache.spark:spark-sql-kafka-0-10_2.13:0.0.0 ("
    ), said
    assert "\n" not in said
