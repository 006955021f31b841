"""What `schemas/README.md` tells client authors, checked: the worked example's bytes and
fingerprint, the load order, and the partition a key goes to."""

from __future__ import annotations

import json
import re
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from jobledger.schemas import EVENT_TYPES, EventSerde
from jobledger.schemas.catalog import (
    LOAD_ORDER,
    NAMED_TYPES,
    SCHEMA_DIR,
    fingerprint_number,
    load_order,
)
from jobledger.schemas.json_form import event_from_json
from jobledger.services.kafka import PARTITIONER
from jobledger.services.kafka_topics import await_metadata

README = (SCHEMA_DIR / "README.md").read_text()


def _block_after(marker: str) -> str:
    """The fenced block that follows `<!-- marker -->` in the README."""
    _, found, rest = README.partition(f"<!-- {marker} -->")
    assert found, f"the README lost its {marker} block"
    return rest.split("```", 2)[1].split("\n", 1)[1]


def _hex_column(block: str) -> bytes:
    """The bytes of an annotated dump: the hex pairs that start each line."""
    pairs = []
    for line in block.splitlines():
        match = re.match(r"\s*([0-9a-f]{2}(?: [0-9a-f]{2})*)(?:\s{2,}|$)", line)
        assert match, f"no bytes on the line {line!r}"
        pairs.extend(match.group(1).split())
    return bytes.fromhex("".join(pairs))


def test_the_worked_example_is_what_jobledger_writes():
    event = event_from_json(_block_after("worked-example:json"))
    expected = _hex_column(_block_after("worked-example:bytes"))

    encoded = EventSerde().encode(event, "t")

    assert encoded == expected
    assert f"is these {len(encoded)} bytes" in README
    assert f"`0x{fingerprint_number(encoded[2:10]):016x}`" in README


def _references(node) -> set[str]:
    """Full names of the named types a schema refers to without defining them."""
    if isinstance(node, str):
        return {node} if node.startswith("jobledger.") else set()
    if isinstance(node, list):
        return set().union(*(_references(item) for item in node))
    if isinstance(node, dict):
        inner = [node.get(key) for key in ("type", "items", "values") if key in node]
        inner += [field["type"] for field in node.get("fields", [])]
        return set().union(set(), *(_references(item) for item in inner if item is not None))
    return set()


def test_load_order_puts_every_file_after_what_it_references():
    order = [line for line in LOAD_ORDER.read_text().splitlines() if line]
    assert order == load_order()
    assert len(order) == len(set(order)) == len(EVENT_TYPES) + len(NAMED_TYPES)
    defined: set[str] = set()
    for name in order:
        schema = json.loads((SCHEMA_DIR / name).read_text())
        missing = _references(schema) - defined
        assert not missing, f"{name} comes before {sorted(missing)}"
        defined.add(name.removesuffix(".avsc"))


@pytest.mark.broker
def test_a_key_goes_to_the_partition_java_s_client_picks(kafka_bootstrap):
    """The README's example: key `job-7` on three partitions is partition 0 (murmur2, as
    Java's `BuiltInPartitioner` computes it); librdkafka's default would say 1."""
    topic = f"partitioner-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result()
    await_metadata(admin, {topic: 3})
    prose = " ".join(README.split())
    claim = "Key `job-7` on a three-partition topic goes to partition 0 (CRC32 would say 1)."
    assert claim in prose
    placed: dict[str, int] = {}
    for partitioner in (PARTITIONER, "consistent_random"):

        def delivered(error, msg, partitioner=partitioner):
            assert error is None, error
            placed[partitioner] = msg.partition()

        producer = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": partitioner})
        producer.produce(topic, key=b"job-7", value=b"x", on_delivery=delivered)
        producer.flush(30)
    assert placed == {PARTITIONER: 0, "consistent_random": 1}
