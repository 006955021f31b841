"""The compose file for a real cluster is well formed (it cannot run here: no Docker engine)."""

from __future__ import annotations

from pathlib import Path

import yaml

COMPOSE = Path(__file__).resolve().parents[1] / "docker" / "compose.yaml"


def test_compose_runs_kraft_kafka_without_auto_create():
    kafka = yaml.safe_load(COMPOSE.read_text())["services"]["kafka"]
    env = kafka["environment"]
    assert kafka["image"].startswith("apache/kafka:")
    assert "controller" in env["KAFKA_PROCESS_ROLES"] and "broker" in env["KAFKA_PROCESS_ROLES"]
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    assert "9092:9092" in kafka["ports"]
