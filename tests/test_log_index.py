"""The log's index (projections/log_index.py) changes how fast the debugging commands answer
an export, never what they answer: every command, at many positions, in text and JSON, is
asked of the golden logs and of a generated one, written in three layouts (as exported, in
log order, and with partitions out of offset order), with checkpoints every few records, and
its answer (and exit code and errors) must be byte for byte the one `--no-index` gives by
reading the whole file. A stale or damaged index is rebuilt, said in one line, not trusted."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from jobledger.cli import main
from jobledger.projections import log_index
from jobledger.projections.history import iso, jobs_in
from jobledger.projections.log_file import LogRecord, read_export, write_export
from jobledger.projections.positions import log_order
from jobledger.schemas.tasks import TaskDeploymentRequested

from .golden_logs import LOGS

BENCH = Path(__file__).parent.parent / "bench"


def ask(capsys: pytest.CaptureFixture[str], args: list[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def _generated(path: Path) -> None:
    """bench/replay.py's realistic log (waves of jobs, failures, restarts), 3,000 records."""
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
    return found


def _questions(path: Path) -> list[list[str]]:
    """Every command at positions of every form, with targets of every kind the log has,
    and some that name nothing."""
    ordered = log_order(read_export(path))
    n = len(ordered)
    middle = ordered[n // 2]
    unique = next(r for r in ordered[n // 3 :]
                  if sum(o.event.event_id == r.event.event_id for o in ordered) == 1)  # fmt: skip
    at = [
        "end", "count:0", "count:1", f"count:{n // 3}", f"count:{n // 2}", f"count:{n - 1}",
        f"{middle.role.value}/{middle.partition}@{middle.offset}", f"id:{unique.event.event_id}",
        f"s@{middle.timestamp}", iso(ordered[2 * n // 3].timestamp),
        f"count:{n + 1}", "job/77@0", f"{middle.role.value}/{middle.partition}@999999", "id:nope",
    ]  # fmt: skip
    jobs = jobs_in(ordered)[:2]
    deployments = [r.event for r in ordered if isinstance(r.event, TaskDeploymentRequested)]
    targets = ["nope", unique.event.event_id, *(f"{d.job_id}/{d.vertex_id}[{d.subtask_index}]"
                                                 for d in deployments[:2])]  # fmt: skip
    if deployments:
        d = deployments[-1]
        targets += [f"{d.job_id}/{d.vertex_id}[{d.subtask_index}]#{d.attempt_number}",
                    d.allocation_id, d.resource_id, f"{d.job_id}/nope[0]"]  # fmt: skip
    questions = []
    for position in at:
        where = ["--at", position]
        questions += [["slots", *where], ["slots", *where, "-o", "json"]]
        for job in [*jobs, "no-such-job"]:
            questions += [
                ["history", job, *where], ["history", job, *where, "-o", "json"],
                ["history", job, "--timers", *where, "-o", "jsonl"],
                ["timeline", job, *where], ["timeline", job, *where, "-o", "json"],
            ]  # fmt: skip
        questions += [["explain", target, *where] for target in targets]
        questions += [["explain", targets[-1], *where, "-o", "json"]]
        questions += [["diff", "count:1", position], ["diff", position, "-o", "json"]]
    return questions


@pytest.mark.parametrize("log", [
    "wordcount", "wordcount-fail-once.ordered", "wordcount-fail-once.reversed", "slot-shortage",
    "stale-leader", "stale-leader.reversed", "generated", "generated.ordered",
])  # fmt: skip
def test_every_answer_is_the_one_read_from_the_whole_file(
    log: str, logs: dict[str, Path], capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:  # fmt: skip
    monkeypatch.setattr(log_index, "CHECKPOINT", 37)
    monkeypatch.setenv("JOBLEDGER_HOME", str(tmp_path))
    path = logs[log]
    for question in _questions(path):
        args = [*question, "--file", str(path)]
        indexed = ask(capsys, args)
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


@pytest.mark.parametrize("damage", ["meta", "array", "pickle", "short"])
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
    else:
        np.save(index / "kind.npy", np.zeros(3, np.int16))
    again = _history(capsys, log)
    assert again[:2] == (code, out)
    assert again[2].startswith(f"the index of {log} is unreadable (")
    assert again[2].endswith("): rebuilding it\n") and again[2].count("\n") == 1
    assert _history(capsys, log) == (code, out, "")


def test_a_damaged_snapshot_costs_time_not_correctness(
    logs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setattr(log_index, "CHECKPOINT", 20)
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
