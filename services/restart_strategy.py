"""Restart strategies (FLIP-1 RestartBackoffTimeStrategy): whether a failed job may restart
and after which delay. Time is the failure's event time."""

from __future__ import annotations

from dataclasses import dataclass, field

from jobledger.schemas.types import RestartStrategy, RestartStrategyKind


@dataclass
class RestartBackoff:
    """State of a job's restart strategy: the failures it has counted."""

    strategy: RestartStrategy
    failures: list[int] = field(default_factory=list)

    def notify_failure(self, now: int) -> None:
        self.failures.append(now)

    def can_restart(self, now: int) -> bool:
        """RS-1: fixed-delay allows `restart_attempts` restarts; failure-rate allows at most
        `max_failures_per_interval` failures inside the interval; none never restarts."""
        kind = self.strategy.kind
        if kind is RestartStrategyKind.FIXED_DELAY:
            return len(self.failures) <= self.strategy.restart_attempts
        if kind is RestartStrategyKind.FAILURE_RATE:
            window = self.strategy.failure_rate_interval_ms
            recent = [t for t in self.failures if now - t <= window]
            return len(recent) <= self.strategy.max_failures_per_interval
        return False

    @property
    def backoff_ms(self) -> int:
        return self.strategy.delay_ms
