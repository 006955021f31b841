"""The cluster's configuration in Flink's option keys: its defaults are the reducers' own,
every option reaches the reducer it configures, and a bad option is refused naming it."""

from __future__ import annotations

import pytest

from jobledger.cli.main import build_parser
from jobledger.cli.options import configuration_of
from jobledger.schemas.types import RestartStrategy, RestartStrategyKind
from jobledger.services.configuration import OPTIONS, Configuration, ConfigurationError
from jobledger.services.control.driver import ReducerDriver
from jobledger.services.control.slot_placement import SlotPlacement


def test_no_option_builds_the_reducers_defaults():
    assert Configuration().new_driver() == ReducerDriver()


def test_every_option_reaches_its_reducer():
    config = Configuration.parse([
        "jobmanager.execution.failover-strategy=FULL",
        "restart-strategy=fixed-delay",
        "restart-strategy.fixed-delay.attempts=3",
        "restart-strategy.fixed-delay.delay=10 s",
        "slot.request.timeout=2 min",
        "slot.idle.timeout=500ms",
        "taskmanager.slot.timeout=7000",
        "heartbeat.timeout=1 h",
        "cluster.evenly-spread-out-slots=false",
        "task.deployment.timeout=45 s",
        "heartbeat.interval=3 s",
    ])  # fmt: skip
    driver = config.new_driver()

    jm = driver.job_master_config
    assert (jm.failover_strategy, jm.slot_request_timeout_ms, jm.pool.idle_slot_timeout_ms) == (
        "full",
        120_000,
        500,
    )
    assert jm.restart_strategy == RestartStrategy(
        kind=RestartStrategyKind.FIXED_DELAY, restart_attempts=3, delay_ms=10_000
    )
    assert jm.deployment_timeout_ms == 45_000
    assert jm.pool.heartbeat_interval_ms == 3_000
    assert Configuration().job_master().pool.heartbeat_interval_ms == 10_000, "Flink's default"
    assert driver.task_executor_config.slot_timeout_ms == 7_000
    rm = driver.resource_manager.config
    assert (rm.placement, rm.heartbeat_timeout_ms) == (SlotPlacement.PACK, 3_600_000)


def test_failure_rate_takes_flinks_defaults_for_what_is_not_given():
    config = Configuration.parse(
        [
            "restart-strategy=failure-rate",
            "restart-strategy.failure-rate.max-failures-per-interval=2",
        ]
    )
    assert config.restart_strategy() == RestartStrategy(
        kind=RestartStrategyKind.FAILURE_RATE, max_failures_per_interval=2,
        failure_rate_interval_ms=60_000, delay_ms=1_000,
    )  # fmt: skip


def test_the_last_value_of_an_option_wins():
    config = Configuration.parse(["slot.idle.timeout=1", "slot.idle.timeout=2"])
    assert config.job_master().pool.idle_slot_timeout_ms == 2


@pytest.mark.parametrize(
    ("pair", "reason"),
    [
        ("slot.idle.timeout", "is not KEY=VALUE"),
        ("jobmanager.scheduler=adaptive", "unknown option 'jobmanager.scheduler'; jobledger reads"),
        ("jobmanager.execution.failover-strategy=pipelined", "Unknown failover strategy"),
        ("restart-strategy=exponential-delay", "is not a restart strategy"),
        ("restart-strategy.fixed-delay.attempts=-1", "is not a whole number"),
        ("slot.request.timeout=10 days", "is not a duration"),
        ("slot.request.timeout=" + "9" * 40, "is not a duration"),
        ("cluster.evenly-spread-out-slots=yes", "is neither true nor false"),
    ],
)
def test_a_bad_option_is_refused_naming_it(pair, reason):
    with pytest.raises(ConfigurationError, match=reason):
        Configuration.parse([pair])


def test_an_unknown_key_names_the_nearest_and_every_key_with_its_meaning():
    with pytest.raises(ConfigurationError) as refused:
        Configuration.parse(["slot.request.timout=5 s"])
    first, *known = str(refused.value).splitlines()
    assert first == (
        "unknown option 'slot.request.timout'; did you mean 'slot.request.timeout'? jobledger "
        "reads (KEY=DEFAULT: what it sets):"
    )
    assert known == [f"  {key}={default}: {what}" for key, (_, default, what) in OPTIONS.items()]
    assert "  heartbeat.timeout=50000: a TaskExecutor silent this long is lost" in known


def test_the_command_line_takes_flinks_dynamic_properties():
    args = build_parser().parse_args(
        ["services", "run", "-D", "jobmanager.execution.failover-strategy=full",
         "-D", "restart-strategy=fixed-delay"]
    )  # fmt: skip
    config = configuration_of(args).job_master()
    assert config.failover_strategy == "full"
    assert config.restart_strategy.kind is RestartStrategyKind.FIXED_DELAY
