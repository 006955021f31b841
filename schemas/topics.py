"""The topics of a jobledger cluster and the partition key of each.

Topics are inboxes partitioned by owner (design rule D-4): an event is written to the topic
of the reducer that consumes it, keyed by the id of the owner instance, so one partition holds
everything one owner needs. Topic names are `<prefix><role>`; a prefix keeps several clusters
(or tests) apart on one broker.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum


class TopicRole(StrEnum):
    """What a topic holds. The value is the topic's name after the prefix."""

    JOB = "job"
    RESOURCE_MANAGER = "resourcemanager"
    TASK_EXECUTOR = "taskexecutor"
    DEAD_LETTER = "deadletter"
    SNAPSHOT = "snapshot"
    KV_STATE = "kvstate"
    """Keyed state the task runner publishes for queryable-state lookups, keyed by
    `<KvStateID>/<key>`; compacted, so the latest value of every key is kept."""
    CHECKPOINT = "checkpoint"
    """Signed tree heads of every partition of the log (`jobledger checkpoint`), keyed by the
    partition's origin; never compacted, so an auditor sees every checkpoint ever written."""


DEFAULT_PREFIX = "jobledger."

INPUT_ROLES = (TopicRole.JOB, TopicRole.RESOURCE_MANAGER, TopicRole.TASK_EXECUTOR)
"""The reducers' inboxes: the topics the services consume and a replay reads."""


@dataclass(frozen=True)
class TopicSpec:
    """How a topic is created: nothing relies on broker auto-creation."""

    role: TopicRole
    partitions: int
    config: dict[str, str]


def topic_specs(partitions: int) -> list[TopicSpec]:
    """Every topic of a cluster. The ResourceManager is a single owner: one partition."""
    compacted = {"cleanup.policy": "compact"}
    return [
        TopicSpec(TopicRole.JOB, partitions, {}),
        TopicSpec(TopicRole.RESOURCE_MANAGER, 1, {}),
        TopicSpec(TopicRole.TASK_EXECUTOR, partitions, {}),
        TopicSpec(TopicRole.DEAD_LETTER, partitions, {}),
        TopicSpec(TopicRole.SNAPSHOT, partitions, compacted),
        TopicSpec(TopicRole.KV_STATE, partitions, compacted),
        TopicSpec(TopicRole.CHECKPOINT, 1, {}),
    ]


def topic_name(role: TopicRole, prefix: str = DEFAULT_PREFIX) -> str:
    return f"{prefix}{role.value}"


def roles_by_topic(prefix: str, roles: Iterable[TopicRole] = TopicRole) -> dict[str, TopicRole]:
    """The role of each of `roles`' topics under `prefix`, by topic name: what a reader of
    records (which carry their topic's name) needs to tell what a record's topic holds."""
    return {topic_name(role, prefix): role for role in roles}
