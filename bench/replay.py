"""Replay benchmark: a realistic log (bench/realistic_log.py: 1,000 TaskExecutors x 8 slots,
waves of 500 jobs of parallelism 4 to 32 going through slots, deployments, every task state,
KvState registrations, some failures and restarts) written to a real broker, to an export
file and to the peer's store (`eventsourcing`, bench/eventsourcing_peer.py), then, in one
run: raw consume rate, decode-only rate, replay on one core and on all cores (partitions side
by side, as `jobledger replay --jobs`; each in a forked child, from the same heap), replay
from the export file (no broker), the peer's replay of the same events, peak memory, and
restart from a snapshot vs full replay.

    python bench/replay.py --events 1000000 [--bootstrap HOST:PORT] [--jobs N] [--repeats 3]

Without --bootstrap it starts Apache Kafka. The one-core, all-core and peer replays run
`--repeats` rounds, interleaved, and so does the restart; each figure is the median of its
rounds (`spread_*`: the slowest and the fastest), as a CPU-bound replay on a shared machine
varies by a third from one run to the next. The last line is one JSON object; rates are
events per wall-clock second, and the one-core replay and the peer's also per second of this
process's CPU time (`*_cpu_events_per_s`; for the all-core replay, the CPU time of its
busiest process, and the ratio to the peer from those), and restart's CPU seconds, which a
machine shared with other work disturbs less. Peak memory is the largest of this process's
and its children's (`peak_rss_worker_mb`: the largest child's, a measured replay or one of its
workers). Memory stays bounded: the log is written as it is generated, and no step keeps the
decoded events (only the raw records read back, grouped by partition).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import BinaryIO

import fastavro.write
from brokers import bench_broker
from confluent_kafka import Consumer, KafkaError, TopicPartition
from eventsourcing_peer import Peer
from fastavro import parse_schema
from forked import in_fork
from realistic_log import PARTITIONS, Appender, generate

from jobledger.projections.log.log_file import export_schema, read_export
from jobledger.schemas import Event, EventSerde, roles_by_topic, topic_name
from jobledger.schemas.topics import INPUT_ROLES, TopicRole
from jobledger.services.control.driver import PartitionedDriver, ReducerDriver
from jobledger.services.control.partitioning import partition_of
from jobledger.services.host.gc_policy import bulk_replay, settled
from jobledger.services.host.parallel import default_jobs, run_groups
from jobledger.services.host.snapshot import Snapshot, decode, encode
from jobledger.services.kafka_topics import create_topics, partitions_of


class Writer:
    """Where the generated log goes: the broker (`Appender`), an export file (as `jobledger
    export` writes it, offsets counted per partition) and the peer."""

    def __init__(self, bootstrap: str, prefix: str, export: BinaryIO, peer: Peer) -> None:
        self.broker = Appender(bootstrap, prefix)
        self.export = fastavro.write.Writer(export, parse_schema(export_schema()), codec="deflate")
        self.offsets: dict[tuple[TopicRole, int], int] = {}
        self.peer = peer

    def __call__(self, batch: list[Event]) -> None:
        self.broker(batch)
        for event in batch:
            role, key = event.route()
            partition = partition_of(
                key, PARTITIONS if role is not TopicRole.RESOURCE_MANAGER else 1
            )
            offset = self.offsets.get((role, partition), 0)
            self.offsets[(role, partition)] = offset + 1
            self.export.write({
                "role": role.value, "partition": partition, "offset": offset,
                "timestamp": event.event_time, "event": (event.full_name(), event.model_dump()),
            })  # fmt: skip
        self.peer.append(batch)

    def close(self) -> None:
        self.broker.close()
        self.export.flush()


def consume_all(bootstrap: str, prefix: str) -> dict[tuple[str, int], list[bytes]]:
    """Every input record's value, by (topic, partition), in offset order."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4()}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True, "fetch.max.bytes": 52_428_800})  # fmt: skip
    topics = [topic_name(r, prefix) for r in INPUT_ROLES]
    assignment = [TopicPartition(t, p, -2) for t in topics for p in partitions_of(consumer, t)]
    consumer.assign(assignment)
    values: dict[tuple[str, int], list[bytes]] = {(tp.topic, tp.partition): [] for tp in assignment}
    at_end = 0
    while at_end < len(assignment):
        for msg in consumer.consume(10_000, 1.0):
            if msg.error():
                at_end += msg.error().code() == KafkaError._PARTITION_EOF
                continue
            values[(msg.topic(), msg.partition())].append(msg.value())
    consumer.close()
    return values


def _children_cpu() -> float:
    """CPU seconds of this process's finished children (the replay's workers)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def clocked(fn) -> tuple[object, dict[str, float]]:
    """`fn()`, and its wall and this process's CPU seconds (`wall_s`, `cpu_s`)."""
    cpu = time.process_time()
    result, wall_s = timed(fn)
    return result, {"wall_s": wall_s, "cpu_s": time.process_time() - cpu}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--bootstrap", help="a running Kafka (default: start one)")
    parser.add_argument("--jobs", type=int, default=default_jobs(), help="replay processes")
    parser.add_argument(
        "--repeats", type=int, default=3, help="rounds of the timed replays and restarts"
    )
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")

    workdir = Path(tempfile.mkdtemp(prefix="jobledger-bench-broker-"))
    with bench_broker(args.bootstrap, workdir) as bootstrap:
        return run(args.events, bootstrap, args.jobs, args.repeats)


def replay_partitions(
    raw: dict[tuple[str, int], list[bytes]], serde: EventSerde, jobs: int
) -> dict[tuple[str, int], ReducerDriver]:
    """Decode and reduce every partition with a driver of its own, `jobs` processes side by
    side (`run_groups`, as `jobledger replay --jobs`)."""

    def work(keys: list[tuple[str, int]]) -> dict[tuple[str, int], ReducerDriver]:
        drivers = {}
        for topic, partition in keys:
            driver = drivers[(topic, partition)] = ReducerDriver()
            decode, process = serde.decode, driver.process
            for value in raw[(topic, partition)]:
                process(decode(value, topic))
        return drivers

    return run_groups({key: len(values) for key, values in raw.items()}, work, jobs)


def merged(drivers: dict[tuple[str, int], ReducerDriver], prefix: str) -> ReducerDriver:
    roles = roles_by_topic(prefix, INPUT_ROLES)
    return PartitionedDriver(
        drivers={(roles[topic], p): driver for (topic, p), driver in drivers.items()}
    ).merged()


def state_digest(driver: ReducerDriver) -> str:
    """A digest of every reducer's state (`to_dict`, plain data): equal states, equal digests."""
    return hashlib.sha256(json.dumps(driver.to_dict(), sort_keys=True).encode()).hexdigest()


def measured_replay(
    raw: dict[tuple[str, int], list[bytes]], serde: EventSerde, prefix: str, jobs: int
) -> dict[str, object]:
    """One replay on `jobs` processes: its wall seconds, the CPU seconds of its busiest
    process (the wall time of a replay on a quiet machine), the digest of the state it
    reached and how many jobs that state holds."""
    cpu, children = time.process_time(), _children_cpu()
    drivers, wall_s = timed(lambda: replay_partitions(raw, serde, jobs))
    cpu_s = max(time.process_time() - cpu, (_children_cpu() - children) / max(1, jobs - 1))
    driver = merged(drivers, prefix)
    return {"wall_s": wall_s, "cpu_s": cpu_s, "state": state_digest(driver),
            "jobs": len(driver.job_masters)}  # fmt: skip


def file_replay(path: Path) -> int:
    """The export file replayed record by record on one core, as it is read (no broker)."""
    partitioned = PartitionedDriver()
    count = 0
    with bulk_replay():
        for record in read_export(path):
            partitioned.process(record.role, record.partition, record.event)
            count += 1
    return count


def median_of(runs: list[dict[str, object]], key: str) -> float:
    """The median of one figure over the rounds: one slow or fast spell of a shared machine
    (CPU-bound replays here vary by a third between runs) does not decide a ratio."""
    return statistics.median(float(run[key]) for run in runs)  # type: ignore[arg-type]


def spread(count: int, runs: list[dict[str, object]]) -> list[int]:
    """The slowest and the fastest round's rate, beside the median the keys above give."""
    rates = [count / float(run["wall_s"]) for run in runs]  # type: ignore[arg-type]
    return [round(min(rates)), round(max(rates))]


def run(target: int, bootstrap: str, jobs: int, repeats: int = 3) -> int:
    serde = EventSerde()
    prefix = f"bench-{uuid.uuid4().hex[:8]}."
    create_topics(bootstrap, prefix, PARTITIONS)
    workdir = Path(tempfile.mkdtemp(prefix="jobledger-bench-replay-"))
    export = workdir / "log.avro"
    peer = Peer(workdir / "eventsourcing.sqlite")
    with export.open("wb") as out:
        writer = Writer(bootstrap, prefix, out, peer)
        n, gen_s = timed(lambda: generate(target, writer))
        writer.close()
    print(f"generated {n:,} events to the broker, {export} and the peer in {gen_s:.1f} s",
          file=sys.stderr)  # fmt: skip

    raw, raw_s = timed(lambda: consume_all(bootstrap, prefix))
    count = sum(len(values) for values in raw.values())

    def decode_only() -> None:
        for (topic, _), values in raw.items():
            for value in values:
                serde.decode(value, topic)

    _, decode_s = timed(decode_only)
    file_count, file_s = timed(lambda: file_replay(export))
    assert file_count == n, f"the export holds {file_count} records, not {n}"
    one_cores, all_cores, peer_runs = [], [], []
    for _ in range(repeats):  # interleaved, so a slow spell of the machine hits every kind
        one_cores.append(in_fork(lambda: measured_replay(raw, serde, prefix, 1)))
        all_cores.append(in_fork(lambda: measured_replay(raw, serde, prefix, jobs)))
        peer_count, peer_clock = clocked(peer.replay)
        peer_runs.append(peer_clock)
    states = {replay["state"] for replay in one_cores + all_cores}
    assert len(states) == 1, "replays on one core and on all cores reached different states"
    one_core_s, one_core_cpu_s = median_of(one_cores, "wall_s"), median_of(one_cores, "cpu_s")
    replay_s, replay_cpu_s = median_of(all_cores, "wall_s"), median_of(all_cores, "cpu_s")
    peer_s, peer_cpu_s = median_of(peer_runs, "wall_s"), median_of(peer_runs, "cpu_s")
    print(f"the peer replayed {peer_count:,} stored events ({repeats} times)", file=sys.stderr)

    in_order = [(topic, value) for (topic, _), values in raw.items() for value in values]
    tail = max(1, count // 100)
    head = ReducerDriver()
    with bulk_replay():
        for topic, value in in_order[:-tail]:
            head.process(serde.decode(value, topic))
    snapshot_bytes = encode(Snapshot(head, count - tail))
    del head

    def restart() -> ReducerDriver:
        """As a service's rebuild does it (`rebuild.Rebuilder.rebuild`): the snapshot, then the
        tail, under the bulk collection policy (this process holds the whole log and a full state
        besides: collecting them over and over tripled the time)."""
        with bulk_replay():
            restored = decode(snapshot_bytes).driver
            settled()
            for topic, value in in_order[-tail:]:
                restored.process(serde.decode(value, topic))
        return restored

    def measured_restart() -> dict[str, object]:
        """One restart, timed, and the digest of the state it reached."""
        restored, clock = clocked(restart)
        return {**clock, "state": state_digest(restored)}

    # each in a forked child as the replays: a round's state, freed, would linger (its cycles
    # wait for a full collection) and swell the next round's heap and the peak measured
    restarts = [in_fork(measured_restart) for _ in range(repeats)]
    restart_s, restart_cpu_s = median_of(restarts, "wall_s"), median_of(restarts, "cpu_s")
    state = states.pop()
    assert all(r["state"] == state for r in restarts), "snapshot + tail differs from full replay"
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    children_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024

    result = {
        "events": count,
        "raw_consume_events_per_s": round(count / raw_s),
        "decode_only_events_per_s": round(count / decode_s),
        "replay_events_per_s": round(count / replay_s),
        "replay_one_core_events_per_s": round(count / one_core_s),
        "file_replay_events_per_s": round(file_count / file_s),
        "eventsourcing_replay_events_per_s": round(peer_count / peer_s),
        "ratio_replay_eventsourcing": round((count / replay_s) / (peer_count / peer_s), 3),
        "ratio_replay_decode": round(decode_s / replay_s, 3),
        "ratio_replay_raw": round(raw_s / replay_s, 3),
        "replay_one_core_cpu_events_per_s": round(count / one_core_cpu_s),
        "replay_cpu_events_per_s": round(count / replay_cpu_s),
        "ratio_replay_eventsourcing_cpu": round(
            (count / replay_cpu_s) / (peer_count / peer_cpu_s), 3
        ),
        "eventsourcing_replay_cpu_events_per_s": round(peer_count / peer_cpu_s),
        "peak_rss_mb": round(max(peak_mb, children_mb)),
        "peak_rss_worker_mb": round(children_mb),
        "snapshot_mb": round(len(snapshot_bytes) / 2**20, 1),
        "restart_from_snapshot_s": round(restart_s, 3),
        "restart_from_snapshot_cpu_s": round(restart_cpu_s, 3),
        "full_replay_s": round(replay_s, 3),
        "jobs": one_cores[0]["jobs"],
        "replay_processes": jobs,
        "repeats": repeats,
        "spread_events_per_s": {
            "replay": spread(count, all_cores),
            "replay_one_core": spread(count, one_cores),
            "eventsourcing_replay": spread(peer_count, peer_runs),
        },
        "spread_restart_from_snapshot_s": [
            round(min(r["wall_s"] for r in restarts), 3),
            round(max(r["wall_s"] for r in restarts), 3),
        ],
    }
    print(f"raw consume {result['raw_consume_events_per_s']:,}/s, decode-only "
          f"{result['decode_only_events_per_s']:,}/s, replay {result['replay_events_per_s']:,}/s "
          f"({jobs} processes), {result['replay_one_core_events_per_s']:,}/s (one), from the "
          f"file {result['file_replay_events_per_s']:,}/s; eventsourcing "
          f"{result['eventsourcing_replay_events_per_s']:,}/s")  # fmt: skip
    print(f"replay / decode-only = {result['ratio_replay_decode']}, "
          f"replay / raw consume = {result['ratio_replay_raw']}, "
          f"replay / eventsourcing = {result['ratio_replay_eventsourcing']}")  # fmt: skip
    print(f"restart from snapshot {restart_s:.2f} s vs full replay {replay_s:.2f} s; "
          f"peak RSS {result['peak_rss_mb']} MB")  # fmt: skip
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
