"""What a `jobledger-kafka` query's options say, checked on the driver before any task runs
(kafka_source.py documents each option), and the offsets the readers plan with: a bad option
fails the query at its start with the option named, not in a task.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

EARLIEST = -2  # native JSON (and librdkafka's OFFSET_BEGINNING)
LATEST = -1  # native JSON (and librdkafka's OFFSET_END)

Offsets = dict[str, dict[str, int]]
"""{topic: {partition: offset}}; partitions are strings because offsets round-trip via JSON."""

Watermarks = dict[str, dict[str, tuple[int, int]]]
"""{topic: {partition: (low, high)}}, high being the last stable offset under read_committed."""


def bool_option(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = options.get(name)
    if value is None:
        return default
    if value.strip().lower() not in ("true", "false"):
        raise ValueError(f"option {name} must be true or false, not {value!r}")
    return value.strip().lower() == "true"


def _client_config(options: Mapping[str, str]) -> dict[str, str]:
    """`kafka.*` options without their prefix; Spark lower-cases option names, as does Kafka."""
    config = {k[len("kafka.") :]: v for k, v in options.items() if k.lower().startswith("kafka.")}
    if not config.get("bootstrap.servers"):
        raise ValueError("option kafka.bootstrap.servers is required")
    return config


def canonical(offsets: Offsets) -> Offsets:
    """Topics and partitions in a fixed order: Spark keeps offsets as JSON text, so equal
    offsets must serialize alike."""
    return {
        topic: {p: offsets[topic][p] for p in sorted(offsets[topic], key=int)}
        for topic in sorted(offsets)
    }


@dataclass(frozen=True)
class ReaderOptions:
    """The reader's options, checked on the driver before any task runs."""

    topics: tuple[str, ...]
    starting: str | Offsets
    max_offsets_per_trigger: int | None
    include_headers: bool
    timeout_s: float
    client: dict[str, str]
    batch_on: tuple[str, frozenset[bytes]] | None = None
    """`batchOnHeader`: the header and the values that start a micro-batch."""
    batch_on_max_wait_s: float = 5.0
    read_on_driver: bool = False

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReaderOptions:
        for unsupported in ("assign", "subscribePattern"):
            if unsupported in options:
                raise ValueError(f"option {unsupported} is not supported; use subscribe")
        topics = tuple(t.strip() for t in options.get("subscribe", "").split(",") if t.strip())
        if not topics:
            raise ValueError("option subscribe (comma-separated topics) is required")
        limit = options.get("maxOffsetsPerTrigger")
        if limit is not None and int(limit) < 1:
            raise ValueError(f"maxOffsetsPerTrigger must be positive, not {limit}")
        read_on_driver = bool_option(options, "readOnDriver", False)
        if read_on_driver and limit is not None:
            raise ValueError("readOnDriver reads all that is available: no maxOffsetsPerTrigger")
        return cls(
            topics=topics,
            starting=_parse_starting(options.get("startingOffsets", "latest"), topics),
            max_offsets_per_trigger=None if limit is None else int(limit),
            include_headers=bool_option(options, "includeHeaders", False),
            timeout_s=int(options.get("kafkaConsumer.pollTimeoutMs", "120000")) / 1000,
            client=_client_config(options),
            batch_on=_parse_batch_on(options.get("batchOnHeader")),
            batch_on_max_wait_s=int(options.get("batchOnHeaderMaxWaitMs", "5000")) / 1000,
            read_on_driver=read_on_driver,
        )

    def consumer_config(self) -> dict[str, Any]:
        """Consumer settings: the user's, then what reading exact offset ranges requires."""
        return {
            "group.id": f"jobledger-spark-{uuid.uuid4()}",
            "isolation.level": "read_committed",
            # A task reads a known range and ends at its last offsets, often a transaction
            # marker it only passes by fetching on: librdkafka's 500 ms wait would add to each.
            "fetch.wait.max.ms": 50,
            **self.client,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
        }


def _parse_batch_on(value: str | None) -> tuple[str, frozenset[bytes]] | None:
    if value is None:
        return None
    header, _, wanted = value.partition("=")
    values = frozenset(v.strip().encode() for v in wanted.split(",") if v.strip())
    if not header.strip() or not values:
        raise ValueError(f"batchOnHeader must be like 'header=value1,value2', not {value!r}")
    return header.strip(), values


def _parse_starting(value: str, topics: tuple[str, ...]) -> str | Offsets:
    if value.strip().lower() in ("earliest", "latest"):
        return value.strip().lower()
    try:
        parsed = json.loads(value)
        offsets = {
            t: {str(int(p)): int(o) for p, o in parts.items()} for t, parts in parsed.items()
        }
    except (ValueError, AttributeError, TypeError) as exc:
        raise ValueError(
            f"startingOffsets must be earliest, latest or JSON like "
            f'{{"topic": {{"0": 23}}}}, not {value!r}'
        ) from exc
    if set(offsets) != set(topics):
        raise ValueError(f"startingOffsets names topics {sorted(offsets)}, subscribed {topics}")
    return offsets
