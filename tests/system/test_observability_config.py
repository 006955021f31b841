"""docker/'s Prometheus scrape config, alert rules and Grafana dashboard,
checked without Docker: each file parses as what it is, Prometheus scrapes ports the compose
services serve metrics on, and every metric a rule or a panel asks for is one jobledger
exposes (a renamed metric would leave a dashboard blank and an alert silent)."""

from __future__ import annotations

import json
import re
import threading
from functools import cache
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from jobledger.services.control import metrics as flink
from jobledger.services.host.metrics import ServiceMetrics, flink_name, partition_families
from jobledger.services.runner.metrics import RunnerMetrics

from ..support.jobs import JobCluster, vertex

DOCKER = Path(__file__).resolve().parents[2] / "docker"
COMPOSE = yaml.safe_load((DOCKER / "compose.yaml").read_text())
SCRAPE = yaml.safe_load((DOCKER / "prometheus" / "prometheus.yml").read_text())
ALERTS = yaml.safe_load((DOCKER / "prometheus" / "alerts.yml").read_text())
DASHBOARD = json.loads((DOCKER / "grafana" / "dashboards" / "jobledger.json").read_text())
METRIC = re.compile(r"\b((?:flink|jobledger)_[A-Za-z_]+)\b")


def sample_names(registry: CollectorRegistry) -> set[str]:
    return {sample.name for family in registry.collect() for sample in family.samples}


@cache
def exposed() -> frozenset[str]:
    """Every sample name the services and the runner serve, a job and TaskManagers given."""
    cluster = JobCluster()
    cluster.submit([vertex("v", 2)])
    names = {
        flink_name(m) + ("_total" if m.counter else "")
        for m in [
            *flink.resource_manager_metrics(cluster.driver.resource_manager, 0),
            *flink.job_metrics(cluster.jm, 0),
            flink.running_jobs([cluster.jm]),
        ]
    }
    services = ServiceMetrics()
    for counter in (services.decisions.labels("job"), services.dead_letters.labels("signature")):
        counter.inc()
    services.commit_seconds.labels("job").observe(0.01)
    answering = threading.Thread(target=answer_once, args=(services,))
    answering.start()
    names |= sample_names(services.registry)
    answering.join()
    runner = RunnerMetrics()
    runner.micro_batch_seconds.observe(0.2)
    runner.spark_job_seconds.observe(0.2)
    names |= sample_names(runner.registry)
    # per owned partition: a service owning none has the families, without samples
    return frozenset(names) | {family.name for family in partition_families([], None, {})}


def answer_once(services: ServiceMetrics) -> None:
    """The loop's part: answer the scrape the test makes."""
    while not services.wanted():
        threading.Event().wait(0.01)
    services.answer([], None, {}, 0)


def expressions() -> list[str]:
    rules = [rule["expr"] for group in ALERTS["groups"] for rule in group["rules"]]
    panels = [target["expr"] for panel in DASHBOARD["panels"] for target in panel["targets"]]
    return rules + panels


def test_prometheus_scrapes_the_ports_the_services_and_the_runner_serve_metrics_on():
    targets = {
        job["job_name"]: target
        for job in SCRAPE["scrape_configs"]
        for target in job["static_configs"][0]["targets"]
    }
    assert targets == {"jobledger-services": "services:9250", "jobledger-runner": "runner:9251"}
    for target in targets.values():
        service, port = target.split(":")
        command = COMPOSE["services"][service]["command"]
        at = command.index("--metrics-port")
        assert command[at + 1] == f"0.0.0.0:{port}", service
    prometheus = COMPOSE["services"]["prometheus"]
    mounted = {volume.split(":")[1] for volume in prometheus["volumes"]}
    assert set(SCRAPE["rule_files"]) <= mounted


def test_every_alert_says_what_and_how_bad():
    rules = [rule for group in ALERTS["groups"] for rule in group["rules"]]
    assert len(rules) >= 5
    for rule in rules:
        assert set(rule) >= {"alert", "expr", "labels", "annotations"}, rule
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["summary"]
    lag = next(rule for rule in rules if rule["alert"] == "JobledgerServicesLagging")
    assert (lag["expr"], lag["for"]) == (
        "sum by (topic) (jobledger_services_consumer_lag) > 1000", "1m",
    )  # fmt: skip


def test_the_dashboard_shows_job_status_restarts_lag_and_lost_task_managers():
    assert DASHBOARD["uid"] == "jobledger"
    titles = " / ".join(panel["title"] for panel in DASHBOARD["panels"])
    for shown in ("Job status", "Restarts", "lag", "TaskManagers lost"):
        assert shown in titles
    provisioned = yaml.safe_load(
        (DOCKER / "grafana" / "provisioning" / "dashboards" / "jobledger.yml").read_text()
    )
    grafana = COMPOSE["services"]["grafana"]
    assert (
        f"./grafana/dashboards:{provisioned['providers'][0]['options']['path']}:ro"
        in (grafana["volumes"])
    )


@pytest.mark.parametrize("expr", expressions())
def test_every_metric_a_rule_or_panel_asks_for_is_one_jobledger_serves(expr):
    asked = set(METRIC.findall(expr))
    assert asked and asked <= exposed(), sorted(asked - exposed())
