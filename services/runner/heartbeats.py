"""A runner's heartbeats: the beats of all its TaskExecutors in as few records as the bound
per record allows (`TaskManagerHeartbeatsReported`), not one record per TaskExecutor. Every
beat still passes through the ResourceManager's one partition; what it costs there is a
share of one record, so 100,000 TaskExecutors at Flink's 10 s interval are 10,000 beats a
second but only a few records (bench/README.md, "The cluster's throughput")."""

from __future__ import annotations

from collections.abc import Mapping

from jobledger.schemas.cluster import MAX_BEATS_PER_RECORD, TaskManagerHeartbeatsReported
from jobledger.schemas.types import TaskManagerBeat

from ..control.decisions import derived_id


def heartbeats_reported(
    runner_id: str, instances: Mapping[str, str | None], producer: str, now_ms: int,
    per_record: int = MAX_BEATS_PER_RECORD,
) -> list[TaskManagerHeartbeatsReported]:  # fmt: skip
    """A beat of each current instance (`instances`: ResourceID -> InstanceID), at most
    `per_record` to a record; each record's id is derived from the runner, the time and its
    place, so a beat re-sent is a duplicate the services drop."""
    items = list(instances.items())
    return [
        TaskManagerHeartbeatsReported(
            event_id=derived_id(f"{runner_id}@{now_ms}/{start}", "heartbeats"),
            event_time=now_ms,
            producer=producer,
            runner_id=runner_id,
            beats=[
                TaskManagerBeat(resource_id=rid, instance_id=instance)
                for rid, instance in items[start : start + per_record]
            ],
        )
        for start in range(0, len(items), per_record)
    ]
