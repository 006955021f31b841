"""Whether the runner's Spark checkpoint fits the log it is about to read.

The checkpoint holds the next offset of each partition of the TaskExecutor topic, and nothing
about which log they were offsets of. Pointed at another broker under the same topic prefix,
or at topics deleted and created again, Spark resumes from offsets the log never had (or had
for other records): the query then fails at every start, and the runner, which revives its
query, printed the failure every few seconds for good. So before its query starts, the runner
compares the checkpoint with the log: a small file beside Spark's (`MARKER`) records the
broker's cluster id and the topic's id as they were when the checkpoint was used, and the
offsets of the checkpoint's latest micro-batch must lie within each partition's log: not past
its end, and, from where the restarted query reads first, not before its start (records
retention deleted, which Spark cannot read). Where it reads first is the latest batch's end,
unless Spark planned that batch and never committed it (the runner was killed while it ran):
Spark runs it again, from the end of the batch before. A checkpoint that does not fit is moved
aside, never deleted (it is the only record of where the runner was), and the runner starts
from the log's current end, as a new one does; or, as the operator chooses, the runner refuses
to start.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from confluent_kafka import IsolationLevel, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import OffsetSpec

from ..kafka import admin_client
from ..kafka_topics import TopicNotFound

log = logging.getLogger("jobledger.runner")

MARKER = "jobledger-log.json"
"""The file, inside the checkpoint directory, that names the log the checkpoint was used with.
Spark ignores files it does not know at the checkpoint's top level."""

OnMismatch = Literal["restart", "fail"]
"""`restart`: move the checkpoint aside and start from the log's current end; `fail`: refuse
to start (`CheckpointMismatch`)."""

ADMIN_TIMEOUT_S = 30.0

Offsets = dict[str, dict[str, int]]
"""{topic: {partition: next offset}}, as both Kafka sources write them into the checkpoint."""


class CheckpointMismatch(Exception):
    """The checkpoint does not fit the log and the runner was told not to start then: the
    message is one line saying what differs."""


@dataclass(frozen=True)
class LogState:
    """What the checkpoint is compared with: the broker and the TaskExecutor topic now."""

    cluster_id: str | None
    topic: str
    topic_id: str
    """Kafka's id of the topic, new whenever a topic of that name is created again."""
    ends: dict[int, int]
    """Each partition's high watermark: a checkpoint's offset may reach it, never pass it."""
    starts: dict[int, int] = field(default_factory=dict)
    """Each partition's first offset still in the log: a checkpoint's offset may not be less."""


def read_log(bootstrap: str, topic: str, timeout_s: float = ADMIN_TIMEOUT_S) -> LogState:
    admin = admin_client(bootstrap)
    cluster_id = admin.list_topics(timeout=timeout_s).cluster_id
    try:
        described = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout_s)
        description = described[topic].result()
    except KafkaException as exc:
        raise TopicNotFound(
            f"topic {topic!r} cannot be described ({exc.args[0].str()}); "
            "run `jobledger topics create`"
        ) from exc
    ends, starts = (
        {tp.partition: future.result().offset for tp, future in admin.list_offsets(
            {TopicPartition(topic, p.id): spec for p in description.partitions},
            isolation_level=IsolationLevel.READ_UNCOMMITTED, request_timeout=timeout_s,
        ).items()}
        for spec in (OffsetSpec.latest(), OffsetSpec.earliest())
    )  # fmt: skip
    return LogState(cluster_id, topic, str(description.topic_id), ends, starts)


def misfit(checkpoint: Path, now: LogState) -> str | None:
    """Why `checkpoint` does not fit the log `now` (the end of a sentence beginning "checkpoint
    DIR"), or None if it does. A checkpoint without a marker (an older runner's) is judged by
    its offsets alone."""
    marker = _read_marker(checkpoint)
    if marker is not None:
        if marker.cluster_id != now.cluster_id:
            return (
                f"was written against cluster {marker.cluster_id}, the broker is cluster "
                f"{now.cluster_id}"
            )
        if marker.topic != now.topic:
            return f"was written for topic {marker.topic}, the runner reads {now.topic}"
        if marker.topic_id != now.topic_id:
            return (
                f"was written against topic {now.topic} with id {marker.topic_id}, the topic "
                f"now has id {now.topic_id} (created again)"
            )
    offsets = latest_offsets(checkpoint)
    if offsets is None:
        return None
    if now.topic not in offsets:
        return f"has offsets of {', '.join(sorted(offsets))}, the runner reads {now.topic}"
    beyond = [
        f"[{p}] at {offset}, "
        + ("no such partition" if int(p) not in now.ends else f"end {now.ends[int(p)]}")
        for p, offset in sorted(offsets[now.topic].items(), key=lambda item: int(item[0]))
        if offset > now.ends.get(int(p), -1)
    ]
    if beyond:
        return f"has offsets past the end of {now.topic}: {'; '.join(beyond)}"
    first = resume_offsets(checkpoint) or offsets
    deleted = [
        f"[{p}] at {offset}, start {now.starts[int(p)]}"
        for p, offset in sorted(first.get(now.topic, {}).items(), key=lambda item: int(item[0]))
        if offset < now.starts.get(int(p), 0)
    ]
    if deleted:
        return (
            f"has offsets before the start of {now.topic} (records deleted since): "
            f"{'; '.join(deleted)}"
        )
    return None


def latest_offsets(checkpoint: Path) -> Offsets | None:
    """The offsets of the checkpoint's latest micro-batch (`offsets/N`), None if it has none.

    Spark writes each `offsets/N` as a version line, a line of batch metadata, then one line
    per source: that source's offsets as it serialized them (here `{topic: {partition:
    offset}}`), or `-` if it had none. The runner's query has one source."""
    batches = _batches(checkpoint)
    return _offsets(checkpoint, batches[-1]) if batches else None


def resume_offsets(checkpoint: Path) -> Offsets | None:
    """Where a query started from the checkpoint reads first: the latest micro-batch's end
    once Spark committed it (`commits/N`); else its start, the offsets of the batch before it,
    since Spark runs a batch it planned but never committed again (`None` for a first batch
    never committed: it starts from the source's initial offsets, which `offsets/` lacks)."""
    batches = _batches(checkpoint)
    if not batches:
        return None
    if (checkpoint / "commits" / str(batches[-1])).exists():
        return _offsets(checkpoint, batches[-1])
    return _offsets(checkpoint, batches[-2]) if len(batches) > 1 else None


def _batches(checkpoint: Path) -> list[int]:
    """The numbers of the checkpoint's micro-batches (`offsets/N`), in order."""
    return sorted(int(f.name) for f in (checkpoint / "offsets").glob("*") if f.name.isdigit())


def _offsets(checkpoint: Path, batch: int) -> Offsets | None:
    offsets: Offsets = {}
    for line in (checkpoint / "offsets" / str(batch)).read_text("utf-8").splitlines()[2:]:
        if line.strip() != "-":
            offsets.update(json.loads(line))
    return offsets or None


def fit(
    checkpoint: Path, now: LogState, on_mismatch: OnMismatch, at: datetime | None = None
) -> Path | None:
    """Make `checkpoint` fit the log `now` before a query starts from it: a checkpoint that
    does not fit is moved aside (one warning line; returns where to) or refused
    (`CheckpointMismatch`); then the marker names the log, so the next start can tell."""
    stale = None
    reason = misfit(checkpoint, now) if checkpoint.exists() else None
    if reason is not None:
        if on_mismatch == "fail":
            raise CheckpointMismatch(f"checkpoint {checkpoint} {reason}")
        stale = move_aside(checkpoint, at or datetime.now(UTC))
        log.warning("checkpoint %s %s: moved it to %s and starting from the log's current end",
                    checkpoint, reason, stale)  # fmt: skip
    _write_marker(checkpoint, now)
    return stale


def move_aside(checkpoint: Path, at: datetime) -> Path:
    """Rename the checkpoint to `DIR.stale-<UTC time>` beside it (`-2`, `-3`... if taken)."""
    base = f"{checkpoint.name}.stale-{at.astimezone(UTC):%Y%m%dT%H%M%SZ}"
    stale, n = checkpoint.with_name(base), 1
    while stale.exists():
        n += 1
        stale = checkpoint.with_name(f"{base}-{n}")
    checkpoint.rename(stale)
    return stale


@dataclass(frozen=True)
class _Marker:
    cluster_id: str | None
    topic: str
    topic_id: str


def _read_marker(checkpoint: Path) -> _Marker | None:
    try:
        data = json.loads((checkpoint / MARKER).read_text("utf-8"))
    except FileNotFoundError:
        return None
    return _Marker(data["cluster_id"], data["topic"], data["topic_id"])


def _write_marker(checkpoint: Path, now: LogState) -> None:
    """Written whole or not at all (a temporary file renamed over it)."""
    checkpoint.mkdir(parents=True, exist_ok=True)
    marker = {"cluster_id": now.cluster_id, "topic": now.topic, "topic_id": now.topic_id}
    temporary = checkpoint / f".{MARKER}.tmp"
    temporary.write_text(json.dumps(marker) + "\n", "utf-8")
    temporary.replace(checkpoint / MARKER)
