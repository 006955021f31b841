"""Signing cost, each against a baseline measured in the same run, so that what signatures
add to writing, admitting and replaying records is known: a record's signature
(`SigningKey.headers`) and its check (`Keyring.check`) against encoding its event, a
producer's write with a signing key against one without, and a replay of a signed export
against the same log unsigned, plain and `--verify` with and without `--keyring`.

Checkpoints: what the checkpointer spends per record (decoding it, to know
it is an event, and appending its leaf to its partition's tree), against decoding alone, plus
one signed note per `--checkpoint-every` records of a partition; and `jobledger audit` of the
signed export carrying those checkpoints, in seconds per million records, against
`replay --verify --keyring` of the same export (the audit does that, and more).

    python bench/signing.py [--events 50000] [--repeats 3] [--checkpoint-every 1000]

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
from realistic_log import PARTITIONS, Generator

from jobledger.cli.main import main as jobledger
from jobledger.projections.log.checkpoints import (
    CheckpointRecord,
    export_metadata,
    record_leaf,
)
from jobledger.projections.log.log_file import LogRecord, write_export
from jobledger.projections.log.provenance import Provenance
from jobledger.schemas import Event, EventSerde, topic_name
from jobledger.schemas.tasks import TaskDeploymentRequested, TaskExecutionStateChanged
from jobledger.schemas.timers import CLOCK, TimerFired
from jobledger.schemas.topics import DEFAULT_PREFIX, TopicRole
from jobledger.services.control.driver import DECIDING_PRODUCERS
from jobledger.services.control.partitioning import partition_of
from jobledger.services.signing import TYPE_HEADER, Keyring, SigningKey
from jobledger.services.transparency import Checkpoint, CompactRange, origin_of

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
    for generated in events:
        # the generator's ticks as the services' clock writes them (nothing else may)
        event = (generated.model_copy(update={"producer": CLOCK})
                 if isinstance(generated, TimerFired) else generated)  # fmt: skip
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


def by_services(record: LogRecord) -> bool:
    """Whether the services' key signs `record`: the reducers' decisions and the clock's
    ticks (only the services keep time); an admin's signs every other input."""
    return record.event.producer in (*DECIDING_PRODUCERS, CLOCK)


def checkpointed(records: list[LogRecord], key: SigningKey, every: int) -> list[CheckpointRecord]:
    """The checkpoints `jobledger checkpoint --every-records every` writes of `records`: one
    per partition each `every` records, and at the partition's end."""
    by_partition: dict[tuple[TopicRole, int], list[LogRecord]] = {}
    for record in records:
        by_partition.setdefault((record.role, record.partition), []).append(record)
    notes: list[CheckpointRecord] = []
    for (role, partition), found in sorted(by_partition.items()):
        tree = CompactRange()
        for i, record in enumerate(found):
            tree.append(record_leaf(record))
            if (i + 1) % every == 0 or i + 1 == len(found):
                origin = origin_of("bench", topic_name(role, DEFAULT_PREFIX), partition)
                note = Checkpoint(origin, tree.size, tree.root(), record.offset + 1)
                notes.append(CheckpointRecord(len(notes), 0, note.signed(key, "services")))
    return notes


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
    parser.add_argument("--checkpoint-every", type=int, default=1_000,
                        help="records of a partition per checkpoint")  # fmt: skip
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")

    serde = EventSerde()
    services, client = SigningKey.generate(), SigningKey.generate()
    keyring = Keyring({})
    keyring.add(services, "services", "services")
    keyring.add(client, "bench", "admin")
    log = generated_log(args.events)
    log_signed = [signed(r, services if by_services(r) else client, serde)
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

    values = [(r.provenance.record().value, topic_name(r.role, DEFAULT_PREFIX), r)
              for r in log_signed]  # fmt: skip

    def decode() -> None:
        for value, topic, _ in values:
            serde.decode(value, topic)

    def decode_and_hash() -> None:
        trees: dict[tuple[TopicRole, int], CompactRange] = {}
        for value, topic, record in values:
            serde.decode(value, topic)
            tree = trees.setdefault((record.role, record.partition), CompactRange())
            tree.append(record_leaf(record))

    note = Checkpoint("bench/jobledger.job/0", 1, bytes(32), 1)

    def sign_notes() -> None:
        for _ in range(n):
            note.signed(services, "services")

    encode_us = per_record_us(encode, n, args.repeats)
    decode_us = per_record_us(decode, len(values), args.repeats)
    checkpoint_us = per_record_us(decode_and_hash, len(values), args.repeats)
    note_us = per_record_us(sign_notes, n, args.repeats)
    produce_signed_us = per_record_us(encode_and_sign, n, args.repeats)
    sign_us = per_record_us(sign, n, args.repeats)
    verify_us = per_record_us(check, n, args.repeats)

    with tempfile.TemporaryDirectory(prefix="jobledger-bench-signing-") as scratch:
        paths = {
            "unsigned": Path(scratch) / "unsigned.avro",
            "signed": Path(scratch) / "signed.avro",
            "checkpointed": Path(scratch) / "checkpointed.avro",
        }
        for name, records in (("unsigned", log), ("signed", log_signed)):
            with paths[name].open("wb") as out:
                write_export(records, out)
        checkpoints = checkpointed(log_signed, services, args.checkpoint_every)
        with paths["checkpointed"].open("wb") as out:
            write_export(log_signed, out, export_metadata(checkpoints))
        keyring_path = Path(scratch) / "keyring.json"
        keyring.save(keyring_path)
        runs: dict[str, list[str]] = {
            "replay_unsigned": ["replay", "--file", str(paths["unsigned"]), "--jobs", "1"],
            "replay_signed": ["replay", "--file", str(paths["signed"]), "--jobs", "1"],
            "verify_signed": ["replay", "--verify", "--file", str(paths["signed"])],
            "verify_keyring": ["replay", "--verify", "--file", str(paths["signed"]),
                               "--keyring", str(keyring_path)],
            "audit": ["audit", str(paths["checkpointed"]), "--keyring", str(keyring_path)],
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
        "decode_us": round(decode_us, 2),
        "checkpoint_us": round(checkpoint_us, 2),
        "note_us": round(note_us, 2),
        "checkpoint_every": args.checkpoint_every,
        "checkpoints": len(checkpoints),
        "ratio_checkpoint_decode": round(
            (checkpoint_us + note_us / args.checkpoint_every) / decode_us, 3
        ),
        "audit_s": round(seconds["audit"], 2),
        "audit_s_per_million": round(seconds["audit"] / len(log) * 1e6, 1),
        "ratio_audit_verify_keyring": round(seconds["audit"] / seconds["verify_keyring"], 3),
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
    print(f"checkpoints: {checkpoint_us:.1f} us per record (decode {decode_us:.1f} us + leaf) "
          f"and a {note_us:.0f} us note per {args.checkpoint_every} records: "
          f"{result['ratio_checkpoint_decode']} x decoding; audit "
          f"{result['audit_s_per_million']} s per million records, "
          f"{result['ratio_audit_verify_keyring']} x replay --verify --keyring")  # fmt: skip
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
