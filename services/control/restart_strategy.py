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
        """Count a failure at `now`."""
        self.failures = self.after_failure(now).failures

    def after_failure(self, now: int) -> RestartBackoff:
        """This strategy as it would be once it counted a failure at `now`, itself unchanged:
        the ExecutionFailureHandler decides on it before the scheduler applies the count.
        Failure-rate keeps only the times of the last `max` failures."""
        failures = [*self.failures, now]
        if self.strategy.kind is RestartStrategyKind.FAILURE_RATE:
            del failures[: max(0, len(failures) - self.strategy.max_failures_per_interval)]
        return RestartBackoff(self.strategy, failures)

    def can_restart(self, now: int) -> bool:
        """RS-1: fixed-delay allows `restart_attempts` restarts. Failure-rate as Flink 1.12's
        FailureRateRestartBackoffTimeStrategy: while fewer than `max_failures_per_interval`
        failures are counted it may restart; once that many are, only if the oldest of them is
        more than the interval ago, so the max-th failure inside the interval already refuses
        (3 failures with max 3: no restart). None never restarts."""
        kind = self.strategy.kind
        if kind is RestartStrategyKind.FIXED_DELAY:
            return len(self.failures) <= self.strategy.restart_attempts
        if kind is RestartStrategyKind.FAILURE_RATE:
            if len(self.failures) < self.strategy.max_failures_per_interval:
                return True
            oldest = self.failures[0] if self.failures else now
            return now - oldest > self.strategy.failure_rate_interval_ms
        return False

    @property
    def backoff_ms(self) -> int:
        return self.strategy.delay_ms
