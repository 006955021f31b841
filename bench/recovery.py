"""Recovery after kill -9: how long from SIGKILL of the instance owning the ResourceManager's
partition until its new owner processes again.

    python bench/recovery.py [--kills 3] [--bootstrap HOST:PORT]

Two `jobledger services run` instances split the partitions of fresh topics (their own random
prefix) on a broker started here (Apache Kafka, as the tests start it) unless `--bootstrap`
names one. A feeder appends a TaskManagerRegistered every ~50 ms, an input the ResourceManager
(one partition, one owner) answers at once with a TaskManagerRegistrationAccepted naming it as
cause; a reader stamps when each answer first becomes visible to a read_committed consumer.
Per kill: the owner of `<prefix>resourcemanager/0` is read from the instances' logs and killed
with SIGKILL; its recovery is the time from the kill until the first answer to an input
appended after the kill is visible, i.e. until the new owner has noticed the death (session
timeout), rebuilt the partition's state and committed again. The killed instance is then
restarted and the next kill waits until the group has settled and answers flow again.

Prints one line per kill and last one JSON line: kills, recovery_s, recovery_median_s,
recovery_max_s, session_timeout_ms, within_5s (the hardening bar: every recovery <= 5 s). The
timing is never asserted: exit 1 only if something broke (an instance died on its own, no
answer within 120 s), with the logs to read.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from brokers import bench_broker
from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from jobledger.schemas import EventSerde
from jobledger.schemas.cluster import TaskManagerRegistered, TaskManagerRegistrationAccepted
from jobledger.schemas.topics import TopicRole, topic_name
from jobledger.schemas.types import ResourceProfile, ResourceProfileKind
from jobledger.services.kafka import (
    SESSION_TIMEOUT_MS,
    append_events,
    read_committed_consumer,
    transactional_producer,
)
from jobledger.services.kafka_topics import create_topics, partitions_of

OWNS = "jobledger.runtime owns "
GAVE_UP = "jobledger.runtime gave up "
ANSWER_LIMIT_S = 120.0
"""No answer this long after a kill (or a restart) is a failure, not a slow recovery."""
FEED_INTERVAL_S = 0.05


class BenchFailure(Exception):
    """Something broke (not merely slow): the message says what and which logs to read."""


@dataclass
class Instance:
    """One `jobledger services run` subprocess; every (re)start logs to a file of its own so
    the ownership read from its log is that of the running process only. It runs in a session
    of its own: a Ctrl-C reaches the benchmark alone, which stops it (an instance that stopped
    on the terminal's signal would look like one that died)."""

    name: str
    env: dict[str, str]
    work: Path
    starts: int = 0
    process: subprocess.Popen[bytes] | None = None
    log_path: Path = field(default_factory=Path)

    def start(self) -> None:
        self.starts += 1
        self.log_path = self.work / f"service-{self.name}-{self.starts}.log"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "jobledger.cli", "services", "run"],
                env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                start_new_session=True,
            )  # fmt: skip

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def changes(self) -> list[tuple[float | None, bool, set[str]]]:
        """Its ownership lines in order: wall time, `owns` (True) or `gave up`, partitions."""
        found = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            for marker, owns in ((OWNS, True), (GAVE_UP, False)):
                head, hit, listed = line.partition(marker)
                if hit:
                    found.append((_log_time(head), owns, set(ast.literal_eval(listed.strip()))))
        return found

    def ownership(self) -> tuple[set[str], bool]:
        """What it owns now (its latest `owns` minus what it gave up since), and whether its
        latest ownership line is an `owns` (False: mid-rebalance, or nothing yet)."""
        owned: set[str] = set()
        settled = False
        for _, owns, names in self.changes():
            owned = names if owns else owned - names
            settled = owns
        return owned, settled

    def first_after(self, wall: float, owns: bool) -> float | None:
        """Wall time of its first `owns` (or `gave up`) line logged after `wall`."""
        return next((t for t, o, _ in self.changes() if o == owns and t and t > wall), None)

    def stop(self) -> None:
        """SIGTERM (the runtime finishes its transaction), SIGKILL if it takes too long."""
        if not self.alive():
            return
        assert self.process is not None
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _log_time(head: str) -> float | None:
    """The wall time a runtime log line starts with (`%(asctime)s`: local, milliseconds)."""
    try:
        return datetime.strptime(head.strip()[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    except ValueError:
        return None


@dataclass(frozen=True)
class Answer:
    seen: float
    """time.monotonic() when the reader first saw the answer."""
    appended: float
    """time.monotonic() when the feeder began appending its cause."""
    produced_wall: float
    """The answer record's timestamp (the new owner's produce call), wall seconds."""


class Traffic:
    """The feeder and the reader, each in a thread of its own, sharing what they recorded."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        self.bootstrap, self.prefix = bootstrap, prefix
        self.lock = threading.Lock()
        self.appended: dict[str, float] = {}
        self.answers: list[Answer] = []
        self.stopping = threading.Event()
        self.errors: list[BaseException] = []
        self.threads = [
            threading.Thread(target=self._guard, args=(work,), daemon=True)
            for work in (self._feed, self._read)
        ]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            if thread.ident is not None:  # started
                thread.join(40)

    def _guard(self, work: Callable[[], None]) -> None:
        try:
            work()
        except BaseException as exc:
            self.errors.append(exc)

    def _feed(self) -> None:
        """One registration per transaction every FEED_INTERVAL_S; its start time is recorded
        before it is written, so the reader never sees an answer whose cause it cannot date."""
        producer = transactional_producer(self.bootstrap, "bench-recovery")
        serde = EventSerde()
        profile = ResourceProfile(kind=ResourceProfileKind.SPECIFIED, cpu_cores=1.0)
        n = 0
        while not self.stopping.is_set():
            n += 1
            event = TaskManagerRegistered(
                event_id=uuid.uuid4().hex, event_time=int(time.time() * 1000), producer="bench",
                resource_id=f"tm-{n}-{uuid.uuid4().hex[:6]}", address="bench",
                number_of_slots=1, resource_profile=profile,
            )  # fmt: skip
            started = time.monotonic()
            with self.lock:
                self.appended[event.event_id] = started
            append_events(producer, self.prefix, [event], serde)
            self.stopping.wait(max(0.0, FEED_INTERVAL_S - (time.monotonic() - started)))
        producer.flush(10)

    def _read(self) -> None:
        topic = topic_name(TopicRole.TASK_EXECUTOR, self.prefix)
        consumer = read_committed_consumer(self.bootstrap, extra={"fetch.wait.max.ms": 10})
        serde = EventSerde()
        wanted = TaskManagerRegistrationAccepted.type_name().encode()
        try:
            partitions = partitions_of(consumer, topic)
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
            while not self.stopping.is_set():
                msg = consumer.poll(0.05)
                if msg is None:
                    continue
                seen = time.monotonic()
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise RuntimeError(f"reader: {msg.error()}")
                if dict(msg.headers() or []).get("jobledger.type") != wanted:
                    continue
                event = serde.decode(msg.value(), topic)
                with self.lock:
                    appended = self.appended.get(event.cause_event_id or "")
                    if appended is not None:
                        self.answers.append(Answer(seen, appended, msg.timestamp()[1] / 1000))
        finally:
            consumer.close()

    def first_answer_after(self, since: float, instances: list[Instance]) -> Answer:
        """The first answer visible to an input appended at or after `since` (monotonic)."""
        deadline = time.monotonic() + ANSWER_LIMIT_S
        while time.monotonic() < deadline:
            with self.lock:
                found = next((a for a in self.answers if a.appended >= since), None)
            if found is not None:
                return found
            check(self, instances)
            time.sleep(0.01)
        logs = ", ".join(str(i.log_path) for i in instances)
        raise BenchFailure(f"no answer within {ANSWER_LIMIT_S:.0f} s; logs: {logs}")


def check(traffic: Traffic, instances: list[Instance]) -> None:
    """Fail at once if a thread broke or an instance meant to be running has died."""
    if traffic.errors:
        raise BenchFailure(f"feeder/reader failed: {traffic.errors[0]!r}")
    for instance in instances:
        if not instance.alive():
            assert instance.process is not None
            raise BenchFailure(
                f"instance {instance.name} (pid {instance.pid}) exited with "
                f"{instance.process.returncode}; log: {instance.log_path}"
            )


def settled_owner(traffic: Traffic, instances: list[Instance], partition: str) -> Instance:
    """Once every instance's latest ownership line is an `owns`, exactly one owns `partition`
    and an input appended after that is answered: the instance that owns it."""
    deadline = time.monotonic() + ANSWER_LIMIT_S
    while time.monotonic() < deadline:
        check(traffic, instances)
        views = [(i, *i.ownership()) for i in instances]
        owners = [i for i, owned, _ in views if partition in owned]
        if all(settled for _, _, settled in views) and len(owners) == 1:
            traffic.first_answer_after(time.monotonic(), instances)
            owned, settled = owners[0].ownership()
            if settled and partition in owned:  # still: no rebalance while we waited
                return owners[0]
        time.sleep(0.1)
    logs = ", ".join(str(i.log_path) for i in instances)
    raise BenchFailure(f"{partition} never had one settled owner in {ANSWER_LIMIT_S:.0f} s: {logs}")


def _after(wall: float | None, since: float) -> str:
    return "?" if wall is None else f"+{wall - since:.2f} s"


def steps(owner: Instance | None, t_kill_wall: float) -> str:
    """Where the new owner's time went, from its log: the group noticed the death (after the
    session timeout) and assigned it the dead one's partitions, which it rebuilt and owned
    (the services rebalance cooperatively, so it gives nothing up on the way)."""
    if owner is None:
        return ""
    owns = _after(owner.first_after(t_kill_wall, True), t_kill_wall)
    return f"{owner.name}: owns {owns}; "


def wait_until_owning(instance: Instance, others: list[Instance], limit_s: float) -> bool:
    """Until the instance has logged `owns` (True), or `limit_s` passed (False)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if instance.log_path.is_file() and OWNS in instance.log_path.read_text(errors="replace"):
            return True
        for one in [instance, *others]:
            if not one.alive():
                raise BenchFailure(f"instance {one.name} died; log: {one.log_path}")
        time.sleep(0.1)
    return False


def measure(args: argparse.Namespace, bootstrap: str, work: Path, recoveries: list[float]) -> None:
    """Kill the ResourceManager's owner `args.kills` times; each recovery is appended to
    `recoveries` as it is measured, so a failure later still reports the ones before it."""
    prefix = f"bench-recovery-{uuid.uuid4().hex[:8]}."
    results = create_topics(bootstrap, prefix, partitions=3)
    if any(r.error for r in results):
        raise BenchFailure(f"topics not created: {[r for r in results if r.error]}")
    rm_partition = f"{topic_name(TopicRole.RESOURCE_MANAGER, prefix)}/0"
    home = work / "home"
    home.mkdir()
    env = {**os.environ, "JOBLEDGER_BOOTSTRAP": bootstrap, "JOBLEDGER_TOPIC_PREFIX": prefix,
           "JOBLEDGER_HOME": str(home)}  # fmt: skip
    instances = [Instance(name, env, work) for name in ("a", "b")]
    traffic = Traffic(bootstrap, prefix)
    try:
        for instance in instances:
            instance.start()
        for instance in instances:
            if not wait_until_owning(instance, instances, 90):
                raise BenchFailure(f"{instance.name} owned nothing in 90 s: {instance.log_path}")
        traffic.start()
        for k in range(1, args.kills + 1):
            victim = settled_owner(traffic, instances, rm_partition)
            survivors = [i for i in instances if i is not victim]
            t_kill_wall = time.time()
            t_kill = time.monotonic()
            os.kill(victim.pid, signal.SIGKILL)
            answer = traffic.first_answer_after(t_kill, survivors)
            recovery = answer.seen - t_kill
            recoveries.append(recovery)
            assert victim.process is not None
            victim.process.wait(10)
            owner = next((i for i in survivors if rm_partition in i.ownership()[0]), None)
            print(f"kill {k}/{args.kills}: SIGKILL {victim.name} (pid {victim.pid}); "
                  f"{steps(owner, t_kill_wall)}first answer produced "
                  f"{_after(answer.produced_wall, t_kill_wall)}, visible +{recovery:.2f} s",
                  flush=True)  # fmt: skip
            victim.start()
            if not wait_until_owning(victim, survivors, 30):
                print(f"          restarted {victim.name} owns nothing after 30 s", flush=True)
    finally:
        traffic.stop()
        for instance in instances:
            instance.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--bootstrap", help="an already running Kafka (default: start one here)")
    args = parser.parse_args()

    began = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="jobledger-recovery-"))
    failure: str | None = None
    recoveries: list[float] = []
    try:
        with bench_broker(args.bootstrap, work / "broker") as bootstrap:
            measure(args, bootstrap, work, recoveries)
    except BenchFailure as exc:
        failure = str(exc)
        print(f"FAILED: {failure}", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        failure = "interrupted"
    print(f"{len(recoveries)} kills in {time.monotonic() - began:.0f} s; logs under {work}")
    summary: dict[str, object] = {
        "kills": len(recoveries),
        "recovery_s": [round(r, 3) for r in recoveries],
        "recovery_median_s": round(statistics.median(recoveries), 3) if recoveries else None,
        "recovery_max_s": round(max(recoveries), 3) if recoveries else None,
        "session_timeout_ms": SESSION_TIMEOUT_MS,
        "within_5s": bool(recoveries) and max(recoveries) <= 5.0,
    }
    if failure is not None:
        summary["failure"] = failure
    print(json.dumps(summary))
    return 0 if failure is None else 130 if failure == "interrupted" else 1


if __name__ == "__main__":
    sys.exit(main())
