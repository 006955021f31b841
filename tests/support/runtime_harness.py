"""Running the service runtime in tests: in a thread, or as a `jobledger services run`
subprocess, and waiting until the services have decided every input on the log (or, where
no services group commits, until the log stops growing)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from jobledger.projections.log.log_file import LogRecord, processed_by_services, read_events
from jobledger.schemas import Event, EventSerde
from jobledger.schemas.topics import INPUT_ROLES
from jobledger.services.host.transaction_loop import RuntimeConfig, ServiceRuntime
from jobledger.services.kafka import append_events, transactional_producer


def append(cluster, events: list[Event]) -> None:
    """Write input events transactionally, as any client would."""
    producer = transactional_producer(cluster.bootstrap, "test-client")
    append_events(producer, cluster.prefix, events, EventSerde())


def read(cluster) -> list[LogRecord]:
    return read_events(cluster.bootstrap, cluster.prefix)


def wait_until_quiet(cluster, settle_s: float = 3.0, limit_s: float = 120.0) -> list[LogRecord]:
    """The log once it has not grown for `settle_s`."""
    deadline = time.monotonic() + limit_s
    records, since = read(cluster), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        again = read(cluster)
        if len(again) != len(records):
            records, since = again, time.monotonic()
        elif time.monotonic() - since >= settle_s:
            return records
    raise TimeoutError(f"the log kept growing for {limit_s} s ({len(records)} records)")


def wait_until_decided(cluster, limit_s: float = 120.0) -> list[LogRecord]:
    """The log once the services have committed past every input on it and it holds nothing
    newer. A decision is written in the transaction that commits its input's offset, so when
    every input read lies below the services' committed offsets and a second read finds no
    record more, nothing is left for them to decide: no quiet period to guess at, which a
    loaded machine outlasts."""
    deadline = time.monotonic() + limit_s
    while True:
        records = read(cluster)
        decided = processed_by_services(cluster.bootstrap, cluster.prefix)
        inputs = (r for r in records if r.role in INPUT_ROLES)
        if all(decided(r) for r in inputs) and len(read(cluster)) == len(records):
            return records
        if time.monotonic() > deadline:
            raise TimeoutError(f"the services did not decide every input within {limit_s:.0f} s")
        time.sleep(0.2)


def until(holds: Callable[[], bool], what: str, limit_s: float = 120.0) -> None:
    """Until `holds()`; a TimeoutError naming `what` after `limit_s`."""
    deadline = time.monotonic() + limit_s
    while not holds():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {limit_s:.0f} s: {what}")
        time.sleep(0.2)


def wait_until_owning(process: subprocess.Popen, limit_s: float = 90.0) -> None:
    """Until the service process says it owns its partitions (it rebuilt their state)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if "jobledger.runtime owns" in Path(process.log_path).read_text():  # type: ignore[attr-defined]
            return
        if process.poll() is not None:
            raise RuntimeError(f"the service exited with {process.returncode}")
        time.sleep(0.2)
    raise TimeoutError("the service never took its partitions")


def duplicates(records: list[LogRecord]) -> list[str]:
    return [i for i, n in Counter(r.event.event_id for r in records).items() if n > 1]


class RuntimeThread:
    """A ServiceRuntime stepping in a background thread."""

    def __init__(self, cluster, registry_url: str | None = None, **config) -> None:
        self.runtime = ServiceRuntime(
            cluster.bootstrap,
            cluster.prefix,
            RuntimeConfig(**{"timer_interval_ms": 0, **config}),
            registry_url=registry_url,
        )
        self.thread = threading.Thread(target=self.runtime.run, args=(False,), daemon=True)

    @classmethod
    def sharing(cls, cluster, **config) -> RuntimeThread:
        """A second instance in the same group: it waits for no particular share."""
        instance = cls(cluster, **config)
        instance.expected = 0
        return instance

    expected = 7
    """Input partitions to own before `with` hands the runtime over (3 job, 1 RM, 3 TE)."""

    def __enter__(self) -> ServiceRuntime:
        self.thread.start()
        deadline = time.monotonic() + 90
        while len(self.runtime.workers) < self.expected:
            if time.monotonic() > deadline:
                raise TimeoutError(f"owns only {sorted(self.runtime.workers)}")
            time.sleep(0.1)
        return self.runtime

    def __exit__(self, *exc) -> None:
        self.runtime.stop()
        self.thread.join(30)


def service_process(cluster, home: str, *args: str) -> subprocess.Popen:
    """`jobledger services run` in a subprocess, logging to `<home>/service-<n>.log`."""
    log_path = f"{home}/service-{time.monotonic_ns()}.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "jobledger.cli", "services", "run",
         "--timer-interval-ms", "0", *args],
        env=cluster.env(home), stdout=subprocess.DEVNULL, stderr=open(log_path, "w"),  # noqa: SIM115
    )  # fmt: skip
    process.log_path = log_path  # type: ignore[attr-defined]
    return process
