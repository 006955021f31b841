"""The log's index (projections/log/log_index.py) changes how fast the debugging commands answer
an export, never what they answer: every command, at many positions, in text and JSON, is
asked of the golden logs and of a generated one, written in three layouts (as exported, in
log order, and with partitions out of offset order), with checkpoints every few records, and
its answer (and exit code and errors) must be byte for byte the one `--no-index` gives by
reading the whole file. A stale or damaged index is rebuilt, said in one line, not trusted."""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from jobledger.cli import log_source as cli_log
from jobledger.cli import main
from jobledger.projections.debugging.history import iso, jobs_in
from jobledger.projections.log import index_build, log_index
from jobledger.projections.log.log_file import LogRecord, read_export, write_export
from jobledger.projections.log.positions import log_order
from jobledger.schemas.deadletters import DeadLettered
from jobledger.schemas.tasks import TaskDeploymentRequested, TaskExecutionStateChanged
from jobledger.schemas.topics import TopicRole

from ..support.golden_logs import LOGS

BENCH = Path(__file__).resolve().parents[2] / "bench"


def ask(capsys: pytest.CaptureFixture[str], args: list[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def _generated(path: Path) -> None:
    """bench/realistic_log.py's log (waves of jobs, failures, restarts), 3,000 records."""
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("bench_debugging", BENCH / "debugging.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.write_log(path, 3_000)
    finally:
        sys.path.remove(str(BENCH))


def _written(records: list[LogRecord], path: Path) -> Path:
    with open(path, "wb") as out:
        write_export(records, out)
    return path


def _dead_lettered(records: list[LogRecord]) -> list[LogRecord]:
    """The log with every fifth task state report of the job topic refused by the services:
    a dead letter naming it, appended at the end (after every checkpoint that holds it);
    every other one keyed as its record was not (by no job), found by what it names."""
    reports = [r for r in records if r.role is TopicRole.JOB
               and isinstance(r.event, TaskExecutionStateChanged)][::5]  # fmt: skip
    last = max(r.timestamp for r in records)
    letters = [
        LogRecord(TopicRole.DEAD_LETTER, 0, i, last + 1 + i, DeadLettered(
            event_id=f"dead-{i}", event_time=last + 1 + i, producer="the service runtime",
            source_topic=f"jobledger.{r.role.value}", source_partition=r.partition,
            source_offset=r.offset, original_key=None if i % 2 else r.event.job_id.encode(),
            reason="refused",
        ))
        for i, r in enumerate(reports)
    ]  # fmt: skip
    return [*records, *letters]


def _clocks_apart(records: list[LogRecord]) -> list[LogRecord]:
    """The log as producers with clocks apart write it: in each partition, every fourth
    record stamped later than the one after it (log order and time cuts then interleave)."""
    out = list(records)
    by_partition: dict[tuple[TopicRole, int], list[int]] = {}
    for i, r in enumerate(out):
        by_partition.setdefault((r.role, r.partition), []).append(i)
    for places in by_partition.values():
        for a, b in list(pairwise(places))[::4]:
            out[a], out[b] = (replace(out[a], timestamp=out[b].timestamp + 5),
                              replace(out[b], timestamp=out[a].timestamp))  # fmt: skip
    return out


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each golden log as checked in, in log order, and with each partition's records
    reversed in the file (log order is the same; the index keeps no state for them)."""
    here = tmp_path_factory.mktemp("logs")
    found = {}
    generated = here / "generated.avro"
    _generated(generated)
    for source in [*sorted(LOGS.glob("*.avro")), generated]:
        records = list(read_export(source))
        found[source.stem] = _written(records, here / f"{source.stem}.avro")
        found[f"{source.stem}.ordered"] = _written(
            log_order(records), here / f"{source.stem}.o.avro"
        )
        found[f"{source.stem}.reversed"] = _written(records[::-1], here / f"{source.stem}.r.avro")
        found[f"{source.stem}.refused"] = _written(
            _dead_lettered(records), here / f"{source.stem}.d.avro"
        )
        found[f"{source.stem}.clocks"] = _written(
            _clocks_apart(records), here / f"{source.stem}.c.avro"
        )
    return found


def _questions(path: Path) -> list[tuple[list[str], bool]]:
    """Every command at positions of every form, with targets of every kind the log has,
    and some that name nothing; each with whether the index must answer it alone (a
    question about the whole log that names something in it)."""
    ordered = log_order(read_export(path))
    n = len(ordered)
    middle = ordered[n // 2]
    unique = next(r for r in ordered[n // 3 :]
                  if sum(o.event.event_id == r.event.event_id for o in ordered) == 1)  # fmt: skip
    at = [
        "end", f"count:{n // 2 + 7}", f"{middle.role.value}/{middle.partition}@{middle.offset}",
        f"id:{unique.event.event_id}", f"s@{middle.timestamp}",
    ]  # fmt: skip
    gap = _first_gap(ordered)
    if gap is not None:
        at.append(gap)  # an offset holding no record (a transaction marker): the next record
    if n < 1000:
        at += [
            "count:0", f"count:{n // 3}", iso(ordered[2 * n // 3].timestamp), f"count:{n + 1}",
            "job/77@0", f"{middle.role.value}/{middle.partition}@999999", "id:nope",
        ]  # fmt: skip
    jobs = jobs_in(ordered)[:1]
    deployments = [r.event for r in ordered if isinstance(r.event, TaskDeploymentRequested)]
    targets = [unique.event.event_id, *(f"{d.job_id}/{d.vertex_id}[{d.subtask_index}]"
                                        for d in deployments[:2])]  # fmt: skip
    if deployments:
        d = deployments[-1]
        targets += [f"{d.job_id}/{d.vertex_id}[{d.subtask_index}]#{d.attempt_number}",
                    d.allocation_id, d.resource_id, f"{d.job_id}/nope[0]"]  # fmt: skip
    questions = []
    for position in at:
        where = ["--at", position]
        whole = position == "end"
        questions += [(["slots", *where], whole), (["slots", *where, "-o", "json"], whole)]
        questions += [(["history", "no-such-job", *where], False)]
        for job in jobs:
            questions += [
                (["history", job, *where], whole),
                (["history", job, *where, "-o", "json"], whole),
                (["history", job, "--timers", *where, "-o", "jsonl"], whole),
                (["timeline", job, *where], whole),
                (["timeline", job, *where, "-o", "json"], whole),
            ]  # fmt: skip
        questions += [
            (["diff", "count:1", position], False),
            (["diff", position, "-o", "json"], False),
        ]
        if position in at[:2]:
            questions += [(["explain", target, *where], whole) for target in targets]
            questions += [(["explain", "nope", *where], False)]
            questions += [(["explain", targets[-1], *where, "-o", "json"], whole)]
    return questions


def _first_gap(ordered: list[LogRecord]) -> str | None:
    """The first offset, in some partition, that holds no record of the log but is followed
    by one (a transaction's marker), as a position."""
    held: dict[str, set[int]] = {}
    for record in ordered:
        held.setdefault(f"{record.role.value}/{record.partition}", set()).add(record.offset)
    for partition, offsets in sorted(held.items()):
        missing = sorted(set(range(max(offsets))) - offsets)
        if missing:
            return f"{partition}@{missing[0]}"
    return None


@pytest.mark.parametrize("log", [
    "wordcount-fail-once", "wordcount.ordered", "stale-leader.reversed", "slot-shortage",
    "generated", "generated.reversed", "wordcount-fail-once.refused", "generated.refused",
    "wordcount-fail-once.clocks",
])  # fmt: skip
def test_every_answer_is_the_one_read_from_the_whole_file(
    log: str, logs: dict[str, Path], capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:  # fmt: skip
    monkeypatch.setattr(index_build, "CHECKPOINT", 37)
    monkeypatch.setenv("JOBLEDGER_HOME", str(tmp_path))
    whole_reads = []
    read_whole = cli_log.log_records
    monkeypatch.setattr(cli_log, "log_records", lambda *a: whole_reads.append(a) or read_whole(*a))
    path = logs[log]
    for question, from_index in _questions(path):
        args = [*question, "--file", str(path)]
        whole_reads.clear()
        indexed = ask(capsys, args)
        assert not (from_index and whole_reads), f"{question} read the whole file"
        assert indexed == ask(capsys, [*args, "--no-index"]), question
    assert Path(f"{path}.index").is_dir()


def test_a_picture_is_drawn_from_the_same_bars(
    logs: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = logs["wordcount-fail-once"]
    job = jobs_in(list(read_export(path)))[0]
    picture = tmp_path / "t.svg"
    args = ["timeline", job, "--file", str(path), "-o", str(picture)]
    assert ask(capsys, args) == ask(capsys, [*args, "--no-index"])
    assert "wrote" in capsys.readouterr().out or picture.stat().st_size > 0


def _index_of(path: Path) -> Path:
    return Path(f"{path}.index")


@pytest.fixture
def log(logs: dict[str, Path], tmp_path: Path) -> Path:
    copy = tmp_path / "log.avro"
    copy.write_bytes(logs["wordcount-fail-once"].read_bytes())
    return copy


def _history(capsys: pytest.CaptureFixture[str], log: Path) -> tuple[int, str, str]:
    job = jobs_in(list(read_export(log)))[0]
    return ask(capsys, ["history", job, "--file", str(log), "-o", "json"])


def test_an_index_is_built_once_and_reused(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _history(capsys, log)
    assert (code, err) == (0, "")
    built = (_index_of(log) / "meta.json").stat().st_mtime_ns
    assert _history(capsys, log) == (0, out, "")
    assert (_index_of(log) / "meta.json").stat().st_mtime_ns == built


def test_an_index_of_a_changed_file_is_rebuilt(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _code, out, _ = _history(capsys, log)
    records = list(read_export(log))
    _written(records[: len(records) // 2], log)  # another file now stands at that path
    answer = ask(capsys, ["history", jobs_in(records)[0], "--file", str(log), "-o", "json"])
    assert answer[2] == f"the index of {log} is stale (the file changed since): rebuilding it\n"
    assert answer[:2] == ask(capsys, ["history", jobs_in(records)[0], "--file", str(log),
                                      "-o", "json", "--no-index"])[:2]  # fmt: skip
    assert json.loads(answer[1])["as_of"]["records"] == len(records) // 2
    assert answer[1] != out


def test_an_index_rewritten_byte_for_byte_is_still_stale(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same records written again are another file (a new sync marker), even at the
    same size and modification time."""
    _history(capsys, log)
    meta = json.loads((_index_of(log) / "meta.json").read_text())
    meta["export"]["sync"] = "00" * 16
    (_index_of(log) / "meta.json").write_text(json.dumps(meta))
    assert "is stale" in _history(capsys, log)[2]


@pytest.mark.parametrize("damage", ["meta", "array", "pickle", "short", "range"])
def test_a_damaged_index_is_rebuilt_not_trusted(
    damage: str, log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _history(capsys, log)
    index = _index_of(log)
    if damage == "meta":
        (index / "meta.json").write_text("{not json")
    elif damage == "array":
        (index / "belongs.npy").write_bytes(b"\x93NUMPY garbage")
    elif damage == "pickle":  # an object array would unpickle (run code) if loaded with pickle
        np.save(index / "job.npy", np.array([object()], dtype=object), allow_pickle=True)
    elif damage == "short":
        np.save(index / "kind.npy", np.zeros(3, np.int16))
    else:  # the right shape, naming a partition the log does not have
        keys = np.load(index / "partition_key.npy")
        np.save(index / "partition_key.npy", keys + 1000)
    again = _history(capsys, log)
    assert again[:2] == (code, out)
    assert again[2].startswith(f"the index of {log} is unreadable (")
    assert again[2].endswith("): rebuilding it\n") and again[2].count("\n") == 1
    assert _history(capsys, log) == (code, out, "")


@pytest.mark.parametrize("damage", ["in_block", "meta"])
def test_a_damaged_index_that_still_loads_is_rebuilt(
    damage: str, log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Damage a load cannot see (an array of the right shape, type and range; meta.json
    that still reads as JSON) is found by the checksums the index keeps of its files."""
    job = jobs_in(list(read_export(log)))[0]
    question = ["history", job] if damage == "in_block" else ["slots"]
    args = [*question, "--file", str(log), "-o", "json"]
    expected = ask(capsys, [*args, "--no-index"])
    assert ask(capsys, args)[:2] == expected[:2]
    index = _index_of(log)
    if damage == "in_block":  # each record read from another row of its block
        in_block = np.load(index / "in_block.npy")
        np.save(index / "in_block.npy", np.zeros_like(in_block))
    else:  # a snapshot's rank no longer a number
        meta = json.loads((index / "meta.json").read_text())
        meta["snapshots"] = {key: ["1"] for key in meta["snapshots"]}
        (index / "meta.json").write_text(json.dumps(meta))
    again = ask(capsys, args)
    assert again[:2] == expected[:2]
    assert again[2].startswith(f"the index of {log} is unreadable (its ")


def test_a_damaged_snapshot_costs_time_not_correctness(
    logs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setattr(index_build, "CHECKPOINT", 20)
    log = tmp_path / "log.avro"
    log.write_bytes(logs["wordcount-fail-once"].read_bytes())
    args = ["diff", "count:50", "--file", str(log), "-o", "json"]
    expected = ask(capsys, [*args, "--no-index"])
    assert ask(capsys, args) == expected
    snapshots = sorted(_index_of(log).glob("snap-*"))
    assert len(snapshots) > 5
    for snapshot in snapshots:
        snapshot.write_bytes(b"JLSNAP\x05 torn")
    assert ask(capsys, args) == expected


def test_with_reducer_options_the_whole_file_is_read(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The index keeps the state the default configuration replays to: `-D` replays."""
    args = ["slots", "--file", str(log), "-D", "slot.request.timeout=1000"]
    assert ask(capsys, args) == ask(capsys, [*args, "--no-index"])
    assert not _index_of(log).exists()


def test_an_index_that_cannot_be_written_leaves_nothing_behind(
    log: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build that runs out of room answers from the whole file and takes back what it
    wrote (a half-built index of a large export would fill the disk further, per question)."""
    expected = ask(capsys, ["slots", "--file", str(log), "--no-index"])

    def no_room(*_: object, **__: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(log_index.np, "save", no_room)
    code, out, err = ask(capsys, ["slots", "--file", str(log)])
    assert (code, out) == expected[:2]
    assert (
        err == f"cannot keep an index of {log} ([Errno 28] No space left on device): "
        "reading the whole file\n"
    )
    assert sorted(p.name for p in log.parent.iterdir()) == ["log.avro"]


def test_a_record_of_no_log_topic_is_one_line_either_way(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An export holding a record of a topic no log holds (a snapshot's, keyed state's) is
    refused in one line, read whole or indexed; read whole, it raised a ValueError."""
    records = list(read_export(log))
    records[3] = replace(records[3], role=TopicRole.KV_STATE)
    _written(records, log)
    for index in ([], ["--no-index"]):
        code, out, err = ask(capsys, ["slots", "--file", str(log), *index])
        assert (code, out) == (1, "")
        assert "a record of topic role 'kvstate', which is no part of a log" in err
        assert err.count("\n") == 1
