"""Signing cost, each against a baseline measured in the same run, so that what signatures
add to writing, admitting and replaying records is known: a record's signature
(`SigningKey.headers`) and its check (`Keyring.check`) against encoding its event, a
producer's write with a signing key against one without, and a replay of a signed export
against the same log unsigned, plain and `--verify` with and without `--keyring`.

    python bench/signing.py [--events 50000] [--repeats 3]

The log is bench/replay.py's (1,000 TaskExecutors, jobs through slots, deployments, every task
state, some failures and restarts), in whole waves of jobs so that `replay --verify` finds
every decision; signed as jobledger's writers sign it (the reducers' decisions with the
services' key, every other input with a client's), topics of the default prefix. The
per-record figures are over its TaskExecutionStateChanged and TaskDeploymentRequested events
(the records a task's life writes most, and the largest), encoded by `EventSerde`. Replays
are `jobledger replay` on export files, each round in a forked child, rounds interleaved;
every figure is the median of `--repeats`. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from forked import in_fork
from replay import PARTITIONS, Generator

from jobledger.cli.main import main as jobledger
from jobledger.projections.log.log_file import LogRecord, write_export
from jobledger.projections.log.provenance import Provenance
from jobledger.schemas import Event, EventSerde, topic_name
from jobledger.schemas.tasks import TaskDeploymentRequested, TaskExecutionStateChanged
from jobledger.schemas.topics import DEFAULT_PREFIX, TopicRole
from jobledger.services.control.driver import DECIDING_PRODUCERS
from jobledger.services.control.partitioning import partition_of
from jobledger.services.signing import TYPE_HEADER, Keyring, SigningKey

WAVE_JOBS = 5
"""Jobs per wave: a wave is ~8,000 records, so the log overshoots `--events` by less."""


def generated_log(target: int) -> list[LogRecord]:
    """Whole waves of jobs until the log holds `target` records, each in its owner's
    partition at the next offset (as the broker holds it), stamped with its event time."""
    events: list[Event] = []
    generator = Generator(events.extend)
    generator.start()
    while len(events) < target:
        generator.wave(WAVE_JOBS)
    offsets: dict[tuple[TopicRole, int], int] = {}
    records = []
    for event in events:
        role, key = event.route()
        partition = partition_of(key, PARTITIONS if role is not TopicRole.RESOURCE_MANAGER else 1)
        offset = offsets[role, partition] = offsets.get((role, partition), -1) + 1
        records.append(LogRecord(role, partition, offset, event.event_time, event))
    return records


def signed(record: LogRecord, key: SigningKey, serde: EventSerde) -> LogRecord:
    """`record` as a producer signing with `key` writes it (`kafka.produce_event`)."""
    topic = topic_name(record.role, DEFAULT_PREFIX)
    owner, value = record.event.route()[1].encode(), serde.encode(record.event, topic)
    name = record.event.type_name()
    headers = [(TYPE_HEADER, name.encode()), *key.headers(topic, owner, value, name).items()]
    return replace(record, provenance=Provenance.of(topic, owner, value, headers))


def per_record_us(fn: Callable[[], object], count: int, repeats: int) -> float:
    """Microseconds per record of `fn` (which handles `count` records), median of rounds."""
    rounds = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        rounds.append((time.perf_counter() - start) / count * 1e6)
    return statistics.median(rounds)


def replay_s(argv: list[str]) -> dict[str, float]:
    """`jobledger` with `argv` in this (forked) process, checked to exit 0; its seconds."""
    start = time.perf_counter()
    with (
        contextlib.redirect_stdout(io.StringIO()) as out,
        contextlib.redirect_stderr(io.StringIO()),
    ):
        code = jobledger(argv)
    if code != 0:
        raise RuntimeError(f"jobledger {' '.join(argv)}: exit {code}: {out.getvalue()[-300:]}")
    return {"s": time.perf_counter() - start}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=50_000, help="records in the log")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of each timing")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")

    serde = EventSerde()
    services, client = SigningKey.generate(), SigningKey.generate()
    keyring = Keyring({})
    keyring.add(services, "services", "services")
    keyring.add(client, "bench", "client")
    log = generated_log(args.events)
    log_signed = [signed(r, services if r.event.producer in DECIDING_PRODUCERS else client, serde)
                  for r in log]  # fmt: skip

    # per record: the two task events, written as `kafka.produce_event` writes them
    kinds = (TaskExecutionStateChanged, TaskDeploymentRequested)
    samples = [r for r in log_signed if isinstance(r.event, kinds)]
    events = [(r.event, topic_name(r.role, DEFAULT_PREFIX)) for r in samples]
    parts = [r.provenance.record() for r in samples]
    written = [(p.topic, p.key, p.value, r.event.type_name(), r.timestamp, p.headers)
               for p, r in zip(parts, samples, strict=True)]  # fmt: skip
    n = len(samples)

    def encode() -> None:
        for event, topic in events:
            serde.encode(event, topic)

    def encode_and_sign() -> None:
        for event, topic in events:
            services.headers(topic, event.route()[1].encode(), serde.encode(event, topic),
                             event.type_name())  # fmt: skip

    def sign() -> None:
        for topic, key, value, name, _, _ in written:
            services.headers(topic, key, value, name)

    def check() -> None:
        for topic, key, value, _, timestamp, headers in written:
            keyring.check(topic, key, value, headers, timestamp)

    encode_us = per_record_us(encode, n, args.repeats)
    produce_signed_us = per_record_us(encode_and_sign, n, args.repeats)
    sign_us = per_record_us(sign, n, args.repeats)
    verify_us = per_record_us(check, n, args.repeats)

    with tempfile.TemporaryDirectory(prefix="jobledger-bench-signing-") as scratch:
        paths = {
            "unsigned": Path(scratch) / "unsigned.avro",
            "signed": Path(scratch) / "signed.avro",
        }
        for name, records in (("unsigned", log), ("signed", log_signed)):
            with paths[name].open("wb") as out:
                write_export(records, out)
        keyring_path = Path(scratch) / "keyring.json"
        keyring.save(keyring_path)
        runs: dict[str, list[str]] = {
            "replay_unsigned": ["replay", "--file", str(paths["unsigned"]), "--jobs", "1"],
            "replay_signed": ["replay", "--file", str(paths["signed"]), "--jobs", "1"],
            "verify_signed": ["replay", "--verify", "--file", str(paths["signed"])],
            "verify_keyring": ["replay", "--verify", "--file", str(paths["signed"]),
                               "--keyring", str(keyring_path)],
        }  # fmt: skip
        rounds: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.repeats):  # interleaved, so a slow spell of the machine hits all
            for name, argv in runs.items():
                rounds[name].append(in_fork(lambda argv=argv: replay_s(argv))["s"])
        sizes = {name: path.stat().st_size / 2**20 for name, path in paths.items()}
    seconds = {name: statistics.median(values) for name, values in rounds.items()}

    result = {
        "events": len(log),
        "sampled_records": n,
        "encode_us": round(encode_us, 2),
        "sign_us": round(sign_us, 2),
        "verify_us": round(verify_us, 2),
        "ratio_sign_encode": round(sign_us / encode_us, 2),
        "ratio_verify_encode": round(verify_us / encode_us, 2),
        "ratio_produce_signed_unsigned": round(produce_signed_us / encode_us, 2),
        "replay_unsigned_s": round(seconds["replay_unsigned"], 2),
        "replay_signed_s": round(seconds["replay_signed"], 2),
        "ratio_replay_signed_unsigned": round(
            seconds["replay_signed"] / seconds["replay_unsigned"], 3
        ),
        "verify_s": round(seconds["verify_signed"], 2),
        "verify_keyring_s": round(seconds["verify_keyring"], 2),
        "ratio_verify_keyring": round(seconds["verify_keyring"] / seconds["verify_signed"], 3),
        "export_unsigned_mb": round(sizes["unsigned"], 2),
        "export_signed_mb": round(sizes["signed"], 2),
        "repeats": args.repeats,
    }
    print(f"per record: encode {encode_us:.1f} us, sign {sign_us:.1f} us, check "
          f"{verify_us:.1f} us; encode + sign / encode = "
          f"{result['ratio_produce_signed_unsigned']}")  # fmt: skip
    print(f"replay of {len(log):,} records: signed {seconds['replay_signed']:.2f} s / unsigned "
          f"{seconds['replay_unsigned']:.2f} s = {result['ratio_replay_signed_unsigned']}; "
          f"--verify --keyring {seconds['verify_keyring']:.2f} s / --verify "
          f"{seconds['verify_signed']:.2f} s = {result['ratio_verify_keyring']}")  # fmt: skip
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
