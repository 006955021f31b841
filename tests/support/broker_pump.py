"""Rounds of inputs decided by the real service runtime over a real broker: the test appends
inputs, and the runtime, stepped in the test's own thread, consumes, decides and commits
until every input partition is read past its last record. The state is the runtime's own
(its partitions' reducers, merged into the cluster-wide view replay gives)."""

from __future__ import annotations

import time
from collections.abc import Callable

from jobledger.projections.log.log_file import LogRecord, read_events
from jobledger.projections.log.positions import log_order
from jobledger.schemas import Event, EventSerde, topic_name
from jobledger.schemas.topics import INPUT_ROLES
from jobledger.services.control.driver import PartitionedDriver, ReducerDriver
from jobledger.services.host.transaction_loop import RuntimeConfig, ServiceRuntime
from jobledger.services.kafka import append_events, transactional_producer
from jobledger.services.kafka_topics import partitions_of


class BrokerPump:
    def __init__(
        self, bootstrap: str, prefix: str, driver_factory: Callable[[], ReducerDriver]
    ) -> None:
        self.bootstrap, self.prefix = bootstrap, prefix
        self.runtime = ServiceRuntime(
            bootstrap, prefix, RuntimeConfig(timer_interval_ms=0, idle_commit_interval_s=0),
            driver_factory=driver_factory,
        )  # fmt: skip
        self.producer = transactional_producer(bootstrap, f"pump-{prefix}")
        self.partitions = sum(
            len(partitions_of(self.runtime.consumer, topic_name(role, prefix)))
            for role in INPUT_ROLES
        )
        self.runtime.start()
        self._step_until(lambda: len(self.runtime.workers) == self.partitions, "owning")
        self.records: list[LogRecord] = []
        self.written: list[Event] = []

    @property
    def log(self) -> list[Event]:
        """Every event read back so far: each round's new records in log order, after the
        rounds before."""
        return [r.event for r in self.records]

    @property
    def driver(self) -> ReducerDriver:
        """The live state: the runtime's own reducers, merged into one cluster-wide view."""
        drivers = {(w.role, w.partition): w.driver for w in self.runtime.workers.values()}
        return PartitionedDriver(drivers=drivers).merged()

    def append(self, events: list[Event]) -> None:
        """Write events in one transaction, as a client would."""
        append_events(self.producer, self.prefix, events, EventSerde())
        self.written.extend(events)

    def run_until_quiet(self, limit_s: float = 90) -> None:
        """Step the runtime until it has committed past the last record of every input
        partition, and the log it reads back holds nothing it has not seen."""
        self._step_until(self._caught_up, "quiet", limit_s)
        seen = {(r.role, r.partition, r.offset) for r in self.records}
        self.records += [
            r for r in log_order(read_events(self.bootstrap, self.prefix))
            if (r.role, r.partition, r.offset) not in seen
        ]  # fmt: skip

    def _caught_up(self) -> bool:
        last: dict[tuple[str, int], int] = {}
        for r in read_events(self.bootstrap, self.prefix):
            if r.role in INPUT_ROLES:
                last[(topic_name(r.role, self.prefix), r.partition)] = r.offset
        workers = self.runtime.workers
        return all(
            key in workers and workers[key].next_offset > offset
            and workers[key].uncommitted_since is None
            for key, offset in last.items()
        )  # fmt: skip

    def _step_until(self, done: Callable[[], bool], what: str, limit_s: float = 90) -> None:
        deadline = time.monotonic() + limit_s
        while not (self.runtime.step() == 0 and done()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"not {what} after {limit_s} s: {len(self.records)} events")

    def close(self) -> None:
        self.runtime.consumer.close()
        self.runtime.rebuilder.close()
