"""The cluster's configuration, in Flink's option keys (`-D KEY=VALUE` on the command line).

The services and every command that replays the log build their reducers from it, so a
replay decides what the services decided only under the same options: pass the same `-D`s
to both (the defaults are Flink's, region failover included).

Durations take Flink's forms: a number of milliseconds, or a number with a unit (`ms`, `s`,
`min`, `h`), as in `restart-strategy.fixed-delay.delay: 10 s`.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from jobledger.schemas.types import RestartStrategy, RestartStrategyKind

from .control.driver import DEDUP_WINDOW, ReducerDriver
from .control.execution_graph import MAX_SUBTASKS_PER_JOB, JobLimits
from .control.failover_strategy import FailoverStrategyName
from .control.job_master import JobMasterConfig
from .control.resource_manager import ResourceManager, ResourceManagerConfig
from .control.slot_placement import SlotPlacement
from .control.slot_pool import SlotPoolConfig
from .control.task_executor import TaskExecutorConfig
from .control.tenants import TenantLimits

_UNITS_MS = {"ms": 1, "s": 1_000, "min": 60_000, "h": 3_600_000}
_DURATION = re.compile(r"(\d{1,15})\s*(ms|s|min|h)?")
_RESTART_KINDS = {
    "none": RestartStrategyKind.NONE, "off": RestartStrategyKind.NONE,
    "disable": RestartStrategyKind.NONE, "fixed-delay": RestartStrategyKind.FIXED_DELAY,
    "fixeddelay": RestartStrategyKind.FIXED_DELAY,
    "failure-rate": RestartStrategyKind.FAILURE_RATE,
    "failurerate": RestartStrategyKind.FAILURE_RATE,
}  # fmt: skip


class ConfigurationError(ValueError):
    """An option jobledger does not know, or a value it cannot take; says which."""


def duration_ms(key: str, value: str) -> int:
    match = _DURATION.fullmatch(value.strip().lower())
    if match is None:
        raise ConfigurationError(
            f"{key}: {value!r} is not a duration (milliseconds, or a number with ms, s, min, h)"
        )
    return int(match.group(1)) * _UNITS_MS[match.group(2) or "ms"]


def _count(key: str, value: str) -> int:
    if not re.fullmatch(r"\d{1,9}", value.strip()):
        raise ConfigurationError(f"{key}: {value!r} is not a whole number >= 0")
    return int(value)


def _boolean(key: str, value: str) -> bool:
    if value.strip().lower() not in ("true", "false"):
        raise ConfigurationError(f"{key}: {value!r} is neither true nor false")
    return value.strip().lower() == "true"


def _restart_kind(key: str, value: str) -> RestartStrategyKind:
    kind = _RESTART_KINDS.get(value.strip().lower())
    if kind is None:
        raise ConfigurationError(
            f"{key}: {value!r} is not a restart strategy (none, fixed-delay, failure-rate)"
        )
    return kind


def _failover(key: str, value: str) -> str:
    try:
        return FailoverStrategyName.from_option(value).value
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from None


OPTIONS: dict[str, tuple[Callable[[str, str], Any], Any, str]] = {
    "jobmanager.execution.failover-strategy": (
        _failover, "region", "region (a failure restarts its pipelined region) or full"),
    "restart-strategy": (
        _restart_kind, "none", "for jobs that configure none: none, fixed-delay, failure-rate"),
    "restart-strategy.fixed-delay.attempts": (_count, "1", "restarts allowed"),
    "restart-strategy.fixed-delay.delay": (duration_ms, "1 s", "delay before each restart"),
    "restart-strategy.failure-rate.max-failures-per-interval": (
        _count, "1", "failures allowed per interval"),
    "restart-strategy.failure-rate.failure-rate-interval": (
        duration_ms, "1 min", "the interval failures are counted in"),
    "restart-strategy.failure-rate.delay": (duration_ms, "1 s", "delay before each restart"),
    "slot.request.timeout": (duration_ms, "300000", "how long a slot request may wait"),
    "slot.idle.timeout": (duration_ms, "50000", "how long the pool keeps an unused slot"),
    "jobledger.slot-pool.max-pending-requests": (
        _count, str(SlotPoolConfig.max_pending_requests), "slot requests one job keeps at the "
        "ResourceManager at once (0: no bound); the rest wait in its pool and go as these are "
        "answered, so one giant job queues no more than this ahead of other jobs' requests"),
    "jobledger.scheduler.max-pending-deployments": (
        _count, str(JobMasterConfig.max_pending_deployments), "deployments one job has "
        "unreported at once (0: no bound); the rest wait and go as these report, so one giant "
        "job queues no more than this ahead of other jobs' records at the TaskExecutors; a "
        "log written with another window (0 before it was the default) replays with it"),
    "task.deployment.timeout": (
        duration_ms, "2 min", "how long a deployed task may take to report INITIALIZING before "
        "it fails and runs elsewhere (Flink's submitTask RPC timeout plays this part)"),
    "taskmanager.slot.timeout": (
        duration_ms, "10 s", "how long a TaskExecutor keeps an allocated slot unused"),
    "heartbeat.timeout": (duration_ms, "50000", "a TaskExecutor silent this long is lost"),
    "heartbeat.interval": (
        duration_ms, str(SlotPoolConfig.heartbeat_interval_ms), "how often a JobMaster "
        "heartbeats its TaskManagers (0: on every tick of the services' clock, as logs written "
        "before this option were, and replay with it)"),
    "jobledger.dedup-window": (
        _count, str(DEDUP_WINDOW), "input ids each partition remembers to drop a record "
        "delivered twice (an old record re-sent later is the reducers' to refuse)"),
    "jobledger.job.max-subtasks": (
        _count, str(JobLimits.max_subtasks), "the most subtasks one JobGraph may have (at most "
        f"{MAX_SUBTASKS_PER_JOB}); job submit and the JobMaster refuse one beyond"),
    "jobledger.job.max-deployment-bytes": (
        _count, str(JobLimits.max_deployment_bytes), "the most bytes one run of a JobGraph's "
        "deployments may put on the log (per subtask: its operators, inputs and outputs); "
        "job submit and the JobMaster refuse one beyond"),
    "jobledger.principal.max-jobs-in-flight": (
        _count, str(TenantLimits.max_jobs_in_flight), "the most jobs one principal may have "
        "holding or awaiting slots (0: no limit); the ResourceManager refuses the slot requests "
        "of one more, which fails with the reason"),
    "jobledger.principal.max-submissions-per-second": (
        _count, str(TenantLimits.max_submissions_per_second), "how many jobs one principal may "
        "start a second, on event time, a second's worth at once (0: no limit); the "
        "ResourceManager refuses the slot requests of one beyond, which fails with the reason"),
    "jobledger.principal.max-slots": (
        _count, str(TenantLimits.max_slots), "the most slots one principal may hold (0: no "
        "limit); its requests beyond wait while other principals' are served"),
    "cluster.evenly-spread-out-slots": (
        _boolean, "true", "spread slots over TaskExecutors, false: fill one first (jobledger "
        "spreads unless told; Flink's default is false)"),
}  # fmt: skip
"""Every option jobledger reads: (parser, default, what it sets). The defaults are Flink's,
but for where slots go."""


def known_options(near: str = "") -> str:
    """What to say of an unknown key: the nearest known one, then every key jobledger reads
    with its default and what it sets, a line each."""
    close = difflib.get_close_matches(near, OPTIONS, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    lines = (f"  {key}={default}: {meaning}" for key, (_, default, meaning) in OPTIONS.items())
    return f"{hint}jobledger reads (KEY=DEFAULT: what it sets):\n" + "\n".join(lines)


@dataclass(frozen=True)
class Configuration:
    """Options by key, each checked when given; `new_driver` builds reducers under them."""

    values: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, pairs: Iterable[str]) -> Configuration:
        """From `KEY=VALUE` strings (later ones win, as Flink's dynamic properties)."""
        values: dict[str, Any] = {}
        for pair in pairs:
            key, sep, value = pair.partition("=")
            key = key.strip()
            if not sep:
                raise ConfigurationError(f"{pair!r} is not KEY=VALUE")
            if key not in OPTIONS:
                raise ConfigurationError(f"unknown option {key!r}; {known_options(key)}")
            values[key] = OPTIONS[key][0](key, value)
        return cls(values)

    def get(self, key: str) -> Any:
        if key in self.values:
            return self.values[key]
        parse, default, _ = OPTIONS[key]
        return parse(key, default)

    def restart_strategy(self) -> RestartStrategy:
        """The cluster's default restart strategy (RS-10): for jobs that configure none."""
        kind = self.get("restart-strategy")
        if kind is RestartStrategyKind.FIXED_DELAY:
            return RestartStrategy(
                kind=kind,
                restart_attempts=self.get("restart-strategy.fixed-delay.attempts"),
                delay_ms=self.get("restart-strategy.fixed-delay.delay"),
            )
        if kind is RestartStrategyKind.FAILURE_RATE:
            prefix = "restart-strategy.failure-rate."
            return RestartStrategy(
                kind=kind,
                max_failures_per_interval=self.get(prefix + "max-failures-per-interval"),
                failure_rate_interval_ms=self.get(prefix + "failure-rate-interval"),
                delay_ms=self.get(prefix + "delay"),
            )
        return RestartStrategy(kind=RestartStrategyKind.NONE)

    def job_master(self) -> JobMasterConfig:
        return JobMasterConfig(
            slot_request_timeout_ms=self.get("slot.request.timeout"),
            pool=dataclasses.replace(
                SlotPoolConfig(),
                idle_slot_timeout_ms=self.get("slot.idle.timeout"),
                max_pending_requests=self.get("jobledger.slot-pool.max-pending-requests"),
                heartbeat_interval_ms=self.get("heartbeat.interval"),
            ),
            failover_strategy=self.get("jobmanager.execution.failover-strategy"),
            restart_strategy=self.restart_strategy(),
            deployment_timeout_ms=self.get("task.deployment.timeout"),
            max_pending_deployments=self.get("jobledger.scheduler.max-pending-deployments"),
            limits=self.job_limits(),
        )

    def job_limits(self) -> JobLimits:
        return JobLimits(
            max_subtasks=self.get("jobledger.job.max-subtasks"),
            max_deployment_bytes=self.get("jobledger.job.max-deployment-bytes"),
        )

    def resource_manager(self) -> ResourceManagerConfig:
        spread = self.get("cluster.evenly-spread-out-slots")
        return ResourceManagerConfig(
            placement=SlotPlacement.SPREAD if spread else SlotPlacement.PACK,
            heartbeat_timeout_ms=self.get("heartbeat.timeout"),
            tenants=self.tenant_limits(),
        )

    def tenant_limits(self) -> TenantLimits:
        return TenantLimits(
            max_jobs_in_flight=self.get("jobledger.principal.max-jobs-in-flight"),
            max_submissions_per_second=self.get("jobledger.principal.max-submissions-per-second"),
            max_slots=self.get("jobledger.principal.max-slots"),
        )

    def new_driver(self) -> ReducerDriver:
        """Fresh reducers under these options (a method, so it travels to worker processes)."""
        return ReducerDriver(
            job_master_config=self.job_master(),
            task_executor_config=TaskExecutorConfig(
                slot_timeout_ms=self.get("taskmanager.slot.timeout")
            ),
            resource_manager=ResourceManager(self.resource_manager()),
            dedup_window=self.get("jobledger.dedup-window"),
        )
