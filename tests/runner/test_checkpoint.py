"""Whether a runner's checkpoint fits the log, on checkpoint directories made here as Spark and
the Kafka sources write them (`offsets/N`: a version line, a metadata line, a line of offsets
per source). The runner over a real broker with topics created again under its checkpoint is
in `test_runner.py`."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest

from jobledger.services.runner.checkpoint import (
    MARKER,
    CheckpointMismatch,
    LogState,
    fit,
    latest_offsets,
    misfit,
)

TOPIC = "jobledger.taskexecutor"
LOG = LogState(cluster_id="cluster-a", topic=TOPIC, topic_id="topic-1", ends={0: 8, 1: 12})
AT = datetime(2026, 11, 26, 19, 12, 5, tzinfo=UTC)


def checkpoint(
    tmp_path: Path, *batches: str, marker: LogState | None = None, committed: int = -1
) -> Path:
    """A checkpoint whose batch i's offsets line is `batches[i]`, marked with `marker`, its
    batches up to `committed` committed (`commits/i`, as Spark writes once a batch ran)."""
    directory = tmp_path / "ckpt"
    (directory / "offsets").mkdir(parents=True)
    (directory / "commits").mkdir()
    for i in range(committed + 1):
        (directory / "commits" / str(i)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    (directory / "metadata").write_text('{"id":"0f6c4d1e-query"}')
    for i, offsets in enumerate(batches):
        (directory / "offsets" / str(i)).write_text(
            f'v1\n{{"batchWatermarkMs":0,"batchTimestampMs":{i},"conf":{{}}}}\n{offsets}'
        )
        (directory / "offsets" / f".{i}.crc").write_bytes(b"crc")
    if marker is not None:
        (directory / MARKER).write_text(json.dumps({
            "cluster_id": marker.cluster_id, "topic": marker.topic, "topic_id": marker.topic_id,
        }))  # fmt: skip
    return directory


def native(offsets: dict[str, int]) -> str:
    """As Spark's own Kafka source writes them: no spaces."""
    return json.dumps({TOPIC: offsets}, separators=(",", ":"))


def test_offsets_up_to_each_partitions_end_fit(tmp_path):
    assert misfit(checkpoint(tmp_path, native({"0": 0, "1": 0}), native({"0": 8, "1": 5}),
                             marker=LOG), LOG) is None  # fmt: skip


def test_a_checkpoint_without_batches_fits(tmp_path):
    directory = tmp_path / "ckpt"
    directory.mkdir()
    assert misfit(directory, LOG) is None
    assert latest_offsets(directory) is None


def test_the_latest_batch_counts_by_number_not_by_name(tmp_path):
    batches = [json.dumps({TOPIC: {"0": i, "1": 0}}) for i in range(11)]  # as jobledger-kafka
    assert latest_offsets(checkpoint(tmp_path, *batches)) == {TOPIC: {"0": 10, "1": 0}}


def test_a_source_without_offsets_is_skipped(tmp_path):
    assert latest_offsets(checkpoint(tmp_path, f"-\n{native({'0': 3})}")) == {TOPIC: {"0": 3}}


def test_offsets_retention_has_deleted_since_do_not_fit(tmp_path):
    """Spark cannot read them ("Offset out of range"): every query from there would fail."""
    ckpt = checkpoint(tmp_path, native({"0": 3, "1": 12}), marker=LOG)
    trimmed = LogState("cluster-a", TOPIC, "topic-1", {0: 8, 1: 12}, starts={0: 5, 1: 12})
    assert misfit(ckpt, trimmed) == (
        f"has offsets before the start of {TOPIC} (records deleted since): [0] at 3, start 5"
    )


def test_a_batch_never_committed_whose_start_was_deleted_does_not_fit(tmp_path):
    """The runner was killed while batch 1 ran: Spark runs it again from batch 0's offsets,
    and retention deleted the records from there to 5 ("Offset out of range" at every start)."""
    ckpt = checkpoint(tmp_path, native({"0": 3, "1": 12}), native({"0": 6, "1": 12}),
                      marker=LOG, committed=0)  # fmt: skip
    trimmed = LogState("cluster-a", TOPIC, "topic-1", {0: 8, 1: 12}, starts={0: 5, 1: 12})
    assert misfit(ckpt, trimmed) == (
        f"has offsets before the start of {TOPIC} (records deleted since): [0] at 3, start 5"
    )


def test_a_committed_batch_reads_on_from_its_end(tmp_path):
    ckpt = checkpoint(tmp_path, native({"0": 3, "1": 12}), native({"0": 6, "1": 12}),
                      marker=LOG, committed=1)  # fmt: skip
    trimmed = LogState("cluster-a", TOPIC, "topic-1", {0: 8, 1: 12}, starts={0: 5, 1: 12})
    assert misfit(ckpt, trimmed) is None


def test_another_cluster_does_not_fit(tmp_path):
    ckpt = checkpoint(tmp_path, native({"0": 1}), marker=LOG)
    other = LogState("cluster-b", TOPIC, "topic-9", {0: 1})
    assert misfit(ckpt, other) == (
        "was written against cluster cluster-a, the broker is cluster cluster-b"
    )


def test_a_topic_created_again_does_not_fit_even_where_its_offsets_would(tmp_path):
    ckpt = checkpoint(tmp_path, native({"0": 1}), marker=LOG)
    again = LogState("cluster-a", TOPIC, "topic-2", {0: 100, 1: 100})
    assert misfit(ckpt, again) == (
        f"was written against topic {TOPIC} with id topic-1, the topic now has id topic-2 "
        "(created again)"
    )


def test_offsets_past_a_partitions_end_do_not_fit_without_a_marker(tmp_path):
    """An older runner's checkpoint: judged by its offsets alone."""
    ckpt = checkpoint(tmp_path, native({"0": 9, "1": 12, "2": 1}))
    assert misfit(ckpt, LOG) == (
        f"has offsets past the end of {TOPIC}: [0] at 9, end 8; [2] at 1, no such partition"
    )


def test_offsets_of_another_topic_do_not_fit(tmp_path):
    ckpt = checkpoint(tmp_path, json.dumps({"other.taskexecutor": {"0": 1}}))
    assert misfit(ckpt, LOG) == f"has offsets of other.taskexecutor, the runner reads {TOPIC}"


def test_a_misfit_is_moved_aside_with_one_warning_and_the_log_is_marked(tmp_path, caplog):
    ckpt = checkpoint(tmp_path, native({"0": 9}), marker=LOG)
    again = LogState("cluster-a", TOPIC, "topic-2", {0: 0, 1: 0})
    with caplog.at_level(logging.WARNING, "jobledger.runner"):
        fit(ckpt, again, "restart", AT)
    stale = tmp_path / "ckpt.stale-20261126T191205Z"
    assert [r.getMessage() for r in caplog.records] == [
        f"checkpoint {ckpt} was written against topic {TOPIC} with id topic-1, the topic now has "
        f"id topic-2 (created again): moved it to {stale} and starting from the log's current end"
    ]
    assert (stale / "offsets" / "0").exists(), "the checkpoint was not kept"
    assert sorted(p.name for p in ckpt.iterdir()) == [MARKER]
    assert misfit(ckpt, again) is None


def test_a_second_misfit_in_the_same_second_is_moved_beside_the_first(tmp_path):
    ckpt = checkpoint(tmp_path, native({"0": 9}))
    fit(ckpt, LogState("cluster-a", TOPIC, "topic-1", {0: 0}), "restart", AT)
    fit(ckpt, LogState("cluster-b", TOPIC, "topic-1", {0: 0}), "restart", AT)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ckpt", "ckpt.stale-20261126T191205Z", "ckpt.stale-20261126T191205Z-2",
    ]  # fmt: skip


def test_fail_refuses_a_misfit_and_leaves_it_as_it_was(tmp_path):
    ckpt = checkpoint(tmp_path, native({"0": 9}), marker=LOG)
    before = sorted(p.relative_to(ckpt) for p in ckpt.rglob("*"))
    with pytest.raises(CheckpointMismatch, match=r"^checkpoint .* cluster cluster-b$"):
        fit(ckpt, LogState("cluster-b", TOPIC, "topic-1", {0: 9}), "fail", AT)
    assert sorted(p.relative_to(ckpt) for p in ckpt.rglob("*")) == before
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]


def test_an_older_runners_checkpoint_that_fits_is_kept_and_marked(tmp_path):
    ckpt = checkpoint(tmp_path, native({"0": 8, "1": 12}))
    fit(ckpt, LOG, "fail", AT)
    assert json.loads((ckpt / MARKER).read_text()) == {
        "cluster_id": "cluster-a", "topic": TOPIC, "topic_id": "topic-1",
    }  # fmt: skip
    assert (ckpt / "offsets" / "0").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]


def test_a_new_checkpoint_is_marked_before_spark_writes_it(tmp_path):
    fit(tmp_path / "runner" / "ckpt", LOG, "fail", AT)
    assert (tmp_path / "runner" / "ckpt" / MARKER).exists()
