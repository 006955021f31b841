"""Transactional producers of the Spark tasks: one per Python worker, kept across tasks, under
transactional ids the driver leases to each Spark job.

Starting a transactional producer (a connection, the coordinator's lookup, `InitProducerId`)
costs ~65 ms, as much as the rest of a Spark job that runs a no-op deployment. Spark reuses its
Python workers (`spark.python.worker.reuse`), so a worker keeps its producer for the next
task. What a fixed id per Spark task gave must still hold:

- No two writers share an id: a worker mints its id once (the runner's prefix and a random
  part) and runs one task at a time, so no other worker and no concurrent Spark job uses it.
- What a killed or failed Spark task left open is aborted. Before a task writes, it leases
  its worker's id to its Spark job and partition at the driver (`ProducerLeases.lease`, over
  the start gate's HTTP server). When a Spark job ends badly, the driver fences every id
  leased to it (starting a producer under an id aborts its open transaction); a Spark retry
  of a partition, leasing another worker's id, first has the id the partition had fenced (a
  dead executor's task never reports its end). A task that never leased wrote nothing.
- A fenced producer is never used again: the driver refuses a lease of an id it fenced, and
  the worker then closes its producer and mints a new id; a task that raised closes its
  producer too (its transaction may be half done), so the next task starts a new one.
- What a killed driver's tasks left open is aborted when the runner starts again, not a
  transaction timeout later (librdkafka's default: 60 s, while every `read_committed` reader
  of the partitions written, the services' among them, waits): the ids leased at any moment
  are kept in a journal file beside the checkpoint, and the next run fences them first
  (`ProducerLeases.recover`). Only a leased id can have a transaction open: a worker leases
  its id before every task's first write, and its Spark job's end takes the lease back.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import urllib.request
import uuid
import warnings
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException, Producer

REQUEST_TIMEOUT_S = 30.0
MAX_FENCED = 100_000
"""Fenced ids remembered; a worker that still holds one of the oldest asks past this many
fencings, long after it died (only a killed worker keeps a fenced id)."""


class ProducerLeases:
    """The driver's side: which worker ids each running Spark job's partitions write under,
    and which ids were fenced. `fence(id)` starts and closes a producer under the id."""

    def __init__(self, fence: Callable[[str], None], journal: Path | None = None) -> None:
        self.fence = fence
        self.journal = journal
        """Where the ids leased now are kept, for the next run to fence (None: nowhere)."""
        self.lock = threading.Lock()
        self.leased: dict[str, dict[int, str]] = {}
        """Per Spark job (its job group): Spark partition -> the id its task writes under."""
        self.fenced: OrderedDict[str, None] = OrderedDict()

    def recover(self) -> list[str]:
        """Fence the ids an earlier run's journal holds (leased when it died, so possibly
        with a transaction open), then start the journal empty; returns those ids."""
        if self.journal is None:
            return []
        try:
            ids = [str(i) for i in json.loads(self.journal.read_text("utf-8"))]
        except FileNotFoundError:
            ids = []
        except (ValueError, TypeError):
            ids = []  # torn by a crash mid-write: it was written whole or it is not ours
        self._fence(ids)
        with self.lock:
            self._write_journal()
        return ids

    def _write_journal(self) -> None:
        """The ids leased now, written whole (a temporary file renamed over the journal).
        Under the lock."""
        if self.journal is None:
            return
        ids = sorted({tid for leases in self.leased.values() for tid in leases.values()})
        self.journal.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.journal.with_name(f".{self.journal.name}.tmp")
        temporary.write_text(json.dumps(ids), "utf-8")
        os.replace(temporary, self.journal)

    def begin(self, spark_job: str) -> None:
        """`spark_job` starts: its tasks may lease ids until it ends."""
        with self.lock:
            self.leased.setdefault(spark_job, {})

    def lease(self, spark_job: str, partition: int, transactional_id: str) -> bool:
        """May the task of `spark_job`'s `partition` write under `transactional_id`? Not if
        the id was fenced, nor for a Spark job that is not running (a cancelled task still
        running after its job ended: nothing would fence what it leaves open). A partition
        leased before under another id (a retry of a task that died) has that id fenced
        first. The id is taken from any other job it was leased to: a worker leases its id
        again only after its last task ended clean, and that job's bad end must not fence
        the task now writing under it."""
        with self.lock:
            leases = self.leased.get(spark_job)
            if transactional_id in self.fenced or leases is None:
                return False
            for other in self.leased.values():
                for held_by in [p for p, tid in other.items() if tid == transactional_id]:
                    del other[held_by]
            earlier = leases.get(partition)
            leases[partition] = transactional_id
            self._write_journal()
        if earlier is not None and earlier != transactional_id:
            self._fence([earlier])
        return True

    def end(self, spark_job: str, fence: bool) -> None:
        """The Spark job returned; `fence`: it ended badly, so every id leased to it is
        fenced (its tasks may have left transactions open)."""
        with self.lock:
            ids = list(self.leased.pop(spark_job, {}).values())
            self._write_journal()
        if fence:
            self._fence(ids)

    def _fence(self, ids: list[str]) -> None:
        with self.lock:
            for transactional_id in ids:
                self.fenced[transactional_id] = None
            while len(self.fenced) > MAX_FENCED:
                self.fenced.popitem(last=False)
        for transactional_id in ids:
            self.fence(transactional_id)


def lease(url: str, spark_job: str, partition: int, transactional_id: str) -> bool:
    """The task's side of `ProducerLeases.lease`, over HTTP."""
    body = {"spark_job": spark_job, "partition": partition, "transactional_id": transactional_id}
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"},
        method="POST",
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
        return bool(json.loads(response.read())["leased"])


@dataclass
class WorkerProducer:
    """This worker's producer, its id and the delivery failures its records met."""

    transactional_id: str
    producer: Producer | None = None
    failures: list[KafkaError] = field(default_factory=list)


_kept: dict[tuple[str, str], WorkerProducer] = {}
"""This Python worker's producer per (bootstrap, id prefix): at most one task uses it at a
time (a worker runs one task at a time)."""


def acquire(
    bootstrap: str,
    prefix: str,
    lease_url: str,
    spark_job: str,
    partition: int,
    make: Callable[[str, list[KafkaError]], Producer],
) -> WorkerProducer:
    """The worker's producer, leased to the task of `spark_job`'s `partition`: the kept one
    if the driver leases its id, else a new one under a new id (`make(id, failures)`). The
    caller hands it back with `release` (or the worker's next task starts anew)."""
    held = _kept.pop((bootstrap, prefix), None)
    if held is not None and not _leased(held, lease_url, spark_job, partition):
        held = None
    if held is None:
        # started before it is leased: a fence that comes after the lease then always has
        # the later epoch (leased first, a producer starting after a fence would outlive it)
        held = WorkerProducer(f"{prefix}-{uuid.uuid4().hex}")
        held.producer = make(held.transactional_id, held.failures)
        if not _leased(held, lease_url, spark_job, partition):
            raise RuntimeError(
                f"the driver refused transactional id {held.transactional_id} to {spark_job}"
                " (a Spark job that is no longer running)"
            )
    return held


def _leased(held: WorkerProducer, lease_url: str, spark_job: str, partition: int) -> bool:
    """Whether the driver leases `held`'s id to the task; its producer is closed if not, or
    if the driver could not be asked."""
    try:
        leased = lease(lease_url, spark_job, partition, held.transactional_id)
    except BaseException:
        _close(held)
        raise
    if not leased:
        _close(held)
    return leased


def release(bootstrap: str, prefix: str, held: WorkerProducer, clean: bool) -> None:
    """Keep the producer for the worker's next task if its task ended `clean` (every
    transaction committed, no failure seen); otherwise close it."""
    if clean and not held.failures:
        previous = _kept.pop((bootstrap, prefix), None)
        if previous is not None:
            _close(previous)
        _kept[(bootstrap, prefix)] = held
    else:
        _close(held)


def _close(held: WorkerProducer) -> None:
    """Close the producer, aborting its open transaction if it can (a fenced one cannot,
    and says so in a warning: the fencing producer aborted it already)."""
    if held.producer is not None:
        with warnings.catch_warnings(), contextlib.suppress(KafkaException, RuntimeError):
            warnings.simplefilter("ignore", RuntimeWarning)
            held.producer.close()
