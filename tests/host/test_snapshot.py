"""Snapshots: a real one round-trips; anything else is refused with a reason, and reading a
crafted one runs no code (issue: a pickle on the snapshot topic executed its `__reduce__`)."""

from __future__ import annotations

import contextlib
import copy
import io
import itertools
import json
import os
import pickle
from collections import OrderedDict

import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from hypothesis import given, settings
from hypothesis import strategies as st

from jobledger.schemas import EventSerde, topic_name
from jobledger.schemas.catalog import EVENT_TYPES, SchemaCatalog, schema_fingerprint
from jobledger.schemas.jobs import JobSubmitted
from jobledger.schemas.kvstate import KvStateRegistered
from jobledger.schemas.topics import TopicRole
from jobledger.schemas.types import KeyGroupRange
from jobledger.services.control.partitioning import partition_of
from jobledger.services.host import snapshot
from jobledger.services.host.snapshot import (
    CHUNK_BYTES,
    MAGIC,
    SCHEMA_FILE,
    VERSION,
    Snapshot,
    SnapshotAssembler,
    SnapshotRefused,
    chunk_records,
    current_schema,
    decode,
    encode,
)
from jobledger.services.kafka import SERVICES_GROUP_PREFIX, transactional_producer
from jobledger.services.kafka_topics import committed_offsets

from ..support.jobs import JM, JOB, JobCluster, fails_first_attempt_of, fixed_delay, vertex
from ..support.runtime_harness import RuntimeThread, wait_until_decided


class _Marker:
    """Unpickling this creates a file: the proof that code ran."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def _header(fingerprint: bytes | None = None) -> bytes:
    current = schema_fingerprint(parse_schema(current_schema()))
    return MAGIC + bytes([VERSION]) + (current if fingerprint is None else fingerprint)


def _cluster_mid_job() -> JobCluster:
    """A job deployed on two TaskExecutors, its slots requested, allocated and offered, some
    KvState registered, nothing reported yet."""
    cluster = JobCluster(task_executors=2, slots=4)
    cluster.submit([vertex("a", 2), vertex("b", 2, ("a", "ALL_TO_ALL", "BLOCKING"))],
                   restart=fixed_delay(2, 10))  # fmt: skip
    cluster.run([
        cluster.clock(KvStateRegistered, job_id=JOB, job_master_id=JM, job_vertex_id="b",
                      key_group_range=KeyGroupRange(start_key_group=start, end_key_group=end),
                      registration_name="counts", kv_state_id=f"kv-{start}", server_host="h",
                      server_port=9069)
        for start, end in [(0, 63), (64, 127)]
    ])  # fmt: skip
    return cluster


def test_a_real_snapshot_round_trips():
    cluster = _cluster_mid_job()
    cluster.play(fails_first_attempt_of("b"))

    restored = decode(encode(Snapshot(cluster.driver, 42)))

    assert restored.next_offset == 42
    assert restored.driver == cluster.driver
    assert restored.driver.to_dict() == cluster.driver.to_dict()


def test_a_restored_driver_decides_what_the_original_decides():
    """The indexes a snapshot leaves out (the pool's listener, the ResourceManager's free
    slots, the ExecutionGraph's attempts, the slot tables' task index) are rebuilt: the rest
    of the job, failure and restart included, derives the same decisions from either."""
    original = _cluster_mid_job()
    restored = copy.deepcopy(original)
    restored.driver = decode(encode(Snapshot(original.driver, 0))).driver

    for cluster in (original, restored):
        cluster.play(fails_first_attempt_of("b"))

    assert len(original.log) > 40
    assert restored.log == original.log
    assert restored.driver == original.driver


def test_the_checked_in_schema_is_the_one_the_state_declares():
    assert json.loads(SCHEMA_FILE.read_text()) == current_schema(), (
        "the state's types changed: run `jobledger schemas write` (it keeps the old schema in "
        "services/host/snapshot-history/ so that snapshots written with it are upcast)"
    )


def test_a_pickled_snapshot_of_an_older_version_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "pwned"
    payload = MAGIC + bytes([4]) + pickle.dumps(_Marker(str(marker)))

    with pytest.raises(SnapshotRefused, match=f"version 4, this reads version {VERSION}"):
        decode(payload)
    assert not marker.exists()


def test_a_pickle_behind_a_current_header_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "pwned"
    with pytest.raises(SnapshotRefused, match="its body is corrupt"):
        decode(_header() + pickle.dumps(_Marker(str(marker))))
    assert not marker.exists()


def _with_garbage_event(data: bytes) -> bytes:
    """`data`'s snapshot with one awaited decision replaced by bytes that are no event."""
    schema = parse_schema(current_schema())
    datum = schemaless_reader(io.BytesIO(data[len(_header()) :]), schema, None)
    datum["driver"]["awaiting"] = {"forged": b"\xc3\x01not an event"}
    out = io.BytesIO()
    schemaless_writer(out, schema, datum)
    return _header() + out.getvalue()


def test_anything_but_a_snapshot_is_refused_with_its_reason():
    real = encode(Snapshot(_cluster_mid_job().driver, 1))
    cases = [
        (b"PICKLE" + pickle.dumps(1), "magic"),
        (MAGIC + bytes([VERSION]) + b"\x01", "ends inside its header"),
        (_header(b"\x00" * 8) + real[len(_header()) :], "0x0000000000000000, which this versi"),
        (real[:-7], "its body is corrupt"),
        (real + b"\x00", "its body is followed by bytes"),
        (_with_garbage_event(real), "its values do not build the state"),
    ]
    assert decode(None) is None and decode(b"") is None
    for payload, reason in cases:
        with pytest.raises(SnapshotRefused, match=reason):
            decode(payload)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_a_damaged_snapshot_is_refused_or_read_never_a_crash(data):
    real = _REAL_SNAPSHOT
    at = data.draw(st.integers(len(_header()), len(real) - 1))
    value = data.draw(st.integers(0, 255))
    damaged = real[:at] + bytes([value]) + real[at + 1 :]
    with contextlib.suppress(SnapshotRefused):
        decode(damaged)


_REAL_SNAPSHOT = encode(Snapshot(_cluster_mid_job().driver, 1))


def _kv_locations(datum):
    """Every KvStateLocation record inside a decoded snapshot datum."""
    if isinstance(datum, dict):
        if {"registration_name", "num_key_groups", "key_groups"} <= datum.keys():
            yield datum
        for value in datum.values():
            yield from _kv_locations(value)
    elif isinstance(datum, list):
        for value in datum:
            yield from _kv_locations(value)


def _datum(data: bytes):
    return schemaless_reader(
        io.BytesIO(data[len(_header()) :]), parse_schema(current_schema()), None
    )


def test_key_groups_are_written_once_per_run_and_read_back_shared():
    """A KvStateLocation's key groups come in runs of one registration: each run is written
    once and read back as one object, as the registry held it, not one per key group."""
    driver = _cluster_mid_job().driver
    location = next(iter(driver.job_masters[JOB].registry.locations.values()))
    assert location.num_registered_key_groups > 1

    restored = decode(encode(Snapshot(driver, 0))).driver
    again = next(iter(restored.job_masters[JOB].registry.locations.values()))

    assert again == location
    [written] = [loc for loc in _kv_locations(_datum(_REAL_SNAPSHOT))
                 if loc["registration_name"] == location.registration_name]  # fmt: skip
    runs = [(run["length"], run["value"] and run["value"]["kv_state_id"])
            for run in written["key_groups"]]  # fmt: skip
    expected = [(sum(1 for _ in group), reg and reg.kv_state_id)
                for reg, group in itertools.groupby(location.key_groups)]  # fmt: skip
    assert runs == expected and len(runs) < len(location.key_groups)
    assert len({id(reg) for reg in again.key_groups}) == len(runs)


@pytest.mark.parametrize("length", [0, -1, 1 << 40])
def test_a_run_of_a_forged_length_is_refused(length):
    datum = _datum(_REAL_SNAPSHOT)
    next(_kv_locations(datum))["key_groups"][0]["length"] = length
    out = io.BytesIO()
    schemaless_writer(out, parse_schema(current_schema()), datum)
    with pytest.raises(SnapshotRefused, match="makes a list longer than"):
        decode(_header() + out.getvalue())


def test_a_snapshot_of_key_groups_item_by_item_is_refused_with_its_reason():
    """The schema before runs wrote every key group: its snapshots do not upcast (Avro cannot
    turn an item into a run), so they are refused, and the partition rebuilt from the log."""
    old_schema = json.loads((snapshot.HISTORY / "42ef8a86b12993a1.avsc").read_text())
    old_writer = parse_schema(old_schema)
    datum = _as_rows(_datum(_REAL_SNAPSHOT))
    for location in _kv_locations(datum):
        location["key_groups"] = [run["value"] for run in location["key_groups"]
                                  for _ in range(run["length"])]  # fmt: skip
    body = io.BytesIO()
    schemaless_writer(body, old_writer, datum)
    payload = MAGIC + bytes([VERSION]) + schema_fingerprint(old_writer) + body.getvalue()

    with pytest.raises(SnapshotRefused, match="0x42ef8a86b12993a1, whose values do not upcast"):
        decode(payload)


def _expand(column):
    """A table's column as one value per row: runs expanded, nested tables as rows."""
    if isinstance(column, list):
        return column
    if "count" in column:
        return _rows(column)
    if "sizes" in column:  # ragged: each row's list of the rows of one table
        rows, sizes, at, lists = _rows(column["rows"]), _expand(column["sizes"]), 0, []
        for size in sizes:
            lists.append(rows[at : at + size])
            at += size
        return lists
    if not column["lengths"]:
        return column["values"]
    return [v for v, n in zip(column["values"], column["lengths"], strict=True) for _ in range(n)]


def _rows(table):
    columns = {name: _expand(column) for name, column in table.items() if name != "count"}
    return [dict(zip(columns, row, strict=True)) for row in zip(*columns.values(), strict=True)]


def _as_rows(datum):
    """A current snapshot datum as the schema before tables wrote it: every ExecutionGraph's
    subtasks record by record, the dedup windows as maps of their ids."""
    for location in _graphs(datum):
        for job_vertex in location["vertices"].values():
            job_vertex["subtasks"] = _rows(job_vertex["subtasks"])
    driver = datum["driver"]
    for name in ("recent", "rejected"):
        window = driver[name]
        width = len(window["keys"]) // window["count"] if window["count"] else 0
        keys = [window["keys"][i * width : (i + 1) * width] for i in range(window["count"])]
        values = [None] * len(keys) if window["values"] is None else _expand(window["values"])
        driver[name] = dict(zip(keys, values, strict=True))
    return datum


def _graphs(datum):
    if isinstance(datum, dict):
        if isinstance(datum.get("vertices"), dict):  # an ExecutionGraph's, not a JobGraph's
            yield datum
        for value in datum.values():
            yield from _graphs(value)
    elif isinstance(datum, list):
        for value in datum:
            yield from _graphs(value)


def _old_payload(history_file: str, datum) -> bytes:
    writer = parse_schema(json.loads((snapshot.HISTORY / history_file).read_text()))
    body = io.BytesIO()
    schemaless_writer(body, writer, datum)
    return MAGIC + bytes([VERSION]) + schema_fingerprint(writer) + body.getvalue()


def test_a_snapshot_of_subtasks_record_by_record_is_refused_with_its_reason():
    """The schema before tables wrote each subtask as a record: Avro cannot turn an array
    of records into a table, so its snapshots are refused (and the partition rebuilt from
    the log), never misread."""
    datum = _as_rows(_datum(_REAL_SNAPSHOT))
    assert datum["driver"]["recent"], "the windows are part of what is written the old way"
    with pytest.raises(SnapshotRefused, match="0xcdd59e043d386369, whose values do not upcast"):
        decode(_old_payload("cdd59e043d386369.avsc", datum))


def test_subtasks_are_written_as_columns_of_runs_and_read_back_as_they_were():
    driver = _cluster_mid_job().driver
    driver.job_masters[JOB].graph.reset(
        driver.job_masters[JOB].graph.vertices["a"].subtasks[0], lambda v, i, n: f"{v}-{i}-{n}"
    )
    restored = decode(encode(Snapshot(driver, 0))).driver

    graph, again = driver.job_masters[JOB].graph, restored.job_masters[JOB].graph
    assert again == graph and again.attempts.keys() == graph.attempts.keys()
    subtasks = [ev for jv in again.vertices.values() for ev in jv.subtasks]
    assert len({id(ev.prior) for ev in subtasks}) == len(subtasks), "no list is shared"
    assert len({id(ev.current) for ev in subtasks}) == len(subtasks)
    [table] = [jv["subtasks"] for g in _graphs(_datum(encode(Snapshot(driver, 0))))
               for vid, jv in g["vertices"].items() if vid == "b"]  # fmt: skip
    assert table["job_vertex_id"] == {"values": ["b"], "lengths": [2]}
    assert table["subtask_index"] == {"values": [0, 1], "lengths": []}


def _forged(change) -> bytes:
    datum = _datum(_REAL_SNAPSHOT)
    change(datum)
    out = io.BytesIO()
    schemaless_writer(out, parse_schema(current_schema()), datum)
    return _header() + out.getvalue()


def _first_table(datum):
    return next(iter(next(_graphs(datum))["vertices"].values()))["subtasks"]


def _set(path, value):
    def change(datum):
        *parents, last = path
        target = _first_table(datum)
        for key in parents:
            target = target[key]
        target[last] = value

    return change


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (_set(["count"], 1 << 40), "rows is not within"),
        (_set(["count"], 3), "rows inside a row of|makes a column longer|zip"),
        (_set(["current", "count"], 1), "rows inside a row of"),
        (_set(["version", "lengths"], [1 << 40]), "makes a column longer than"),
        (_set(["version", "lengths"], [0, 2]), "run lengths for"),
        (_set(["subtask_index", "values"], [0]), "zip|has columns of"),
        (_set(["prior", "sizes", "values"], [-1]), "list sizes do not cut 0 rows in 2"),
        (_set(["prior", "rows", "count"], 1), "list sizes do not cut 1 rows in 2"),
        (_set(["prior", "sizes"], {"values": [1 << 40], "lengths": []}), "list sizes do not"),
    ],
)
def test_a_forged_table_is_refused_with_its_reason(change, reason):
    with pytest.raises(SnapshotRefused, match=reason):
        decode(_forged(change))


@pytest.mark.parametrize(
    ("window", "reason"),
    [
        ({"count": 2, "keys": "abc", "widths": [], "values": None}, "do not cut 2 keys evenly"),
        ({"count": 2, "keys": "abc", "widths": [1, 1], "values": None}, "key widths do not cut"),
        ({"count": 2, "keys": "aa", "widths": [], "values": None}, "only 1 are distinct"),
        ({"count": 0, "keys": "ab", "widths": [], "values": None}, "do not cut 0 keys evenly"),
        ({"count": 1 << 62, "keys": "", "widths": [], "values": None},
         "1 keys where the window says"),
    ],
)  # fmt: skip
def test_a_forged_window_is_refused_with_its_reason(window, reason):
    def change(datum):
        datum["driver"]["recent"] = window

    with pytest.raises(SnapshotRefused, match=reason):
        decode(_forged(change))


def _items_may_take_no_bytes(schema, named) -> bool:
    """Whether a value of `schema` may be written in zero bytes (null, a fixed of size 0, a
    record of such fields): an array of them has a count no bytes stand behind."""
    if isinstance(schema, str):
        return schema == "null" or (
            schema in named and _items_may_take_no_bytes(named[schema], named)
        )
    if isinstance(schema, list):  # a union writes its branch's index
        return False
    kind = schema["type"]
    if kind == "record":
        return all(_items_may_take_no_bytes(f["type"], named) for f in schema["fields"])
    return kind == "fixed" and schema["size"] == 0


def _arrays_of_nothing(schema, named, path="") -> list[str]:
    if isinstance(schema, list):
        return [p for branch in schema for p in _arrays_of_nothing(branch, named, path)]
    if not isinstance(schema, dict):
        return []
    kind = schema["type"]
    if kind in ("record", "enum", "fixed"):
        named[schema["name"]] = named[f"{schema.get('namespace', '')}.{schema['name']}"] = schema
    if kind == "record":
        return [p for f in schema["fields"]
                for p in _arrays_of_nothing(f["type"], named, f"{path}.{f['name']}")]  # fmt: skip
    if kind == "array":
        here = [path] if _items_may_take_no_bytes(schema["items"], named) else []
        return here + _arrays_of_nothing(schema["items"], named, f"{path}[]")
    if kind == "map":  # every entry writes its key: at least a byte
        return _arrays_of_nothing(schema["values"], named, f"{path}{{}}")
    return _arrays_of_nothing(kind, named, path)


def test_no_array_of_the_state_or_of_an_event_has_items_written_in_no_bytes():
    """The decoder builds an array's items before anything here checks them: items of no
    bytes would let a forged count of 2**62 fill memory (the dedup windows' values, all
    None, were once such an array)."""
    catalog = SchemaCatalog()
    schemas = [current_schema(), *(json.loads(catalog.schema_json(c)) for c in EVENT_TYPES)]
    assert [p for schema in schemas for p in _arrays_of_nothing(schema, {})] == []


def test_a_snapshot_whose_window_held_an_array_of_nulls_is_refused_before_its_body_is_read():
    """The schema before windows of None wrote no values had them as an array of nulls: its
    snapshots do not upcast, and are refused before a byte of the body is read (a forged
    count in that array once filled memory)."""
    payload = MAGIC + bytes([VERSION]) + _history_fingerprint("f90778cfdd2b4dae") + b"\xff" * 9
    with pytest.raises(SnapshotRefused, match="0xf90778cfdd2b4dae, whose values do not upcast"):
        decode(payload)


def _history_fingerprint(name: str) -> bytes:
    return schema_fingerprint(
        parse_schema(json.loads((snapshot.HISTORY / f"{name}.avsc").read_text()))
    )


def test_windows_of_ids_of_any_length_round_trip_in_their_order():
    driver = _cluster_mid_job().driver
    for ids in ([], [""], ["b", "a"], ["x" * 32, "é", "", "yz"], ["dup1", "dup2"]):
        driver.recent = OrderedDict.fromkeys(ids)
        driver.rejected = OrderedDict((key, n) for n, key in enumerate(reversed(ids)))
        restored = decode(encode(Snapshot(driver, 0))).driver
        assert list(restored.recent.items()) == list(driver.recent.items())
        assert list(restored.rejected.items()) == list(driver.rejected.items())
        assert type(restored.recent) is OrderedDict and type(restored.rejected) is OrderedDict


def test_a_snapshot_of_an_earlier_schema_is_upcast(tmp_path, monkeypatch):
    """An earlier version's state lacked a field: its snapshot, read through the history,
    takes the field's default (Avro schema resolution), instead of a rebuild from the log."""
    older = copy.deepcopy(current_schema())
    scheduler = _record(older, "Scheduler")
    scheduler["fields"] = [f for f in scheduler["fields"] if f["name"] != "failure_cause"]
    (tmp_path / "older.avsc").write_text(json.dumps(older))
    monkeypatch.setattr(snapshot, "HISTORY", tmp_path)
    snapshot._known_writers.cache_clear()
    cluster = _cluster_mid_job()
    cluster.play(fails_first_attempt_of("b"))
    assert "boom" in cluster.jm.failure_cause
    full = parse_schema(current_schema())
    datum = schemaless_reader(io.BytesIO(encode(Snapshot(cluster.driver, 3))[len(_header()) :]),
                              full, None)  # fmt: skip
    old_writer = parse_schema(older)
    body = io.BytesIO()
    schemaless_writer(body, old_writer, datum)
    payload = MAGIC + bytes([VERSION]) + schema_fingerprint(old_writer) + body.getvalue()
    try:
        restored = decode(payload)
    finally:
        snapshot._known_writers.cache_clear()

    assert restored.driver.job_masters[JOB].failure_cause is None, "the field takes its default"
    assert restored.driver.job_masters[JOB].status == cluster.jm.status


PRE_SPLIT = "73fc78d7c06de966"
"""The last snapshot schema before the slot states moved to `slot_states.py`."""

SPLIT_NAMED = "e391b88a1496afcd"
"""A schema written while the slot states were named after `slot_states.py`, unpinned."""


def _full_names(schema, namespace=None) -> dict[str, str]:
    """Every named type defined in `schema`: its name -> its full name."""
    names = {}
    if isinstance(schema, list):
        for branch in schema:
            names |= _full_names(branch, namespace)
    elif isinstance(schema, dict):
        if schema.get("type") in ("record", "enum", "fixed"):
            namespace = schema.get("namespace", namespace)
            names[schema["name"]] = f"{namespace}.{schema['name']}"
        for child in [schema.get(k) for k in ("type", "items", "values")]:
            names |= _full_names(child, namespace)
        for field in schema.get("fields", []):
            names |= _full_names(field["type"], namespace)
    return names


def test_a_type_moved_between_modules_keeps_the_name_snapshots_wrote_it_under():
    """One rule for moved types (`wire_namespace`): every type the pre-split schema names,
    the current schema names alike, records and enums, so moving code changes no schema."""
    before = _full_names(json.loads((snapshot.HISTORY / f"{PRE_SPLIT}.avsc").read_text()))
    now = _full_names(current_schema())
    shared = before.keys() & now.keys()
    assert {"Slot", "SlotRequest", "SlotState", "TaskSlot", "TaskSlotState"} <= shared
    assert {name: now[name] for name in shared} == {name: before[name] for name in shared}


def test_a_snapshot_written_before_the_split_restores_the_state():
    """A snapshot written with the pre-split schema restores the slots and slot tables
    (where the moved types are) as they were; the state as queries see it is equal too
    (the fields added since take their defaults, which the queries do not show)."""
    cluster = _cluster_mid_job()
    datum = _datum(encode(Snapshot(cluster.driver, 7)))

    restored = decode(_old_payload(f"{PRE_SPLIT}.avsc", datum))

    assert restored.next_offset == 7
    assert restored.driver.task_executors == cluster.driver.task_executors
    assert (restored.driver.resource_manager.task_executors
            == cluster.driver.resource_manager.task_executors)  # fmt: skip
    assert restored.driver.to_dict() == cluster.driver.to_dict()


def test_a_snapshot_naming_the_slot_states_by_their_new_module_restores_the_state():
    """Snapshots written while the moved enums went unpinned still load, whole."""
    cluster = _cluster_mid_job()
    datum = _datum(encode(Snapshot(cluster.driver, 7)))

    restored = decode(_old_payload(f"{SPLIT_NAMED}.avsc", datum))

    assert restored.driver == cluster.driver


def _record(schema, name):
    """The definition of the named record `name` inside `schema`."""
    if isinstance(schema, dict):
        if schema.get("type") == "record" and schema.get("name") == name:
            return schema
        children = [schema.get(k) for k in ("type", "items", "values", "fields")]
    elif isinstance(schema, list):
        children = schema
    else:
        return None
    for child in children:
        found = _record(child, name)
        if found is not None:
            return found
    return None


@pytest.mark.parametrize("size", [0, 1, CHUNK_BYTES, CHUNK_BYTES * 3 + 17])
def test_chunks_reassemble_to_the_snapshot(size):
    data = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    assembler = SnapshotAssembler("job/0")
    records = chunk_records("job/0", 9, data)
    assert all(len(value) <= CHUNK_BYTES + 32 for _, value in records)
    for key, value in records:
        assembler.add(key, value)
    assert assembler.latest == data


def test_the_latest_complete_snapshot_wins_and_strangers_are_ignored():
    assembler = SnapshotAssembler("job/0")
    assembler.add(b"job/0", b"whole, as written before chunks")
    old = chunk_records("job/0", 5, b"o" * (CHUNK_BYTES + 1))
    new = chunk_records("job/0", 8, b"n" * (CHUNK_BYTES * 2))
    for key, value in [*old, *new[:1], *chunk_records("job/1", 9, b"other")]:
        assembler.add(key, value)
    assert assembler.latest == b"o" * (CHUNK_BYTES + 1), "a torn newer snapshot was taken"
    assembler.add(*new[1])
    assert assembler.latest == b"n" * (CHUNK_BYTES * 2)
    assembler.add(b"job/0#0", b"JLCHNK\x00")  # a forged, truncated chunk changes nothing
    assert assembler.latest == b"n" * (CHUNK_BYTES * 2)


@pytest.mark.broker
def test_a_state_larger_than_a_kafka_message_is_snapshotted_and_rebuilt(cluster):
    """The issue's reproduction: two JobSubmitted with 600 KB names made every snapshot fail
    with MSG_SIZE_TOO_LARGE, killing the service at once and after every restart. (An event
    of 600 KB is larger than an event may be and now dead-lettered: three of 400 KB make the
    state as large.)"""
    serde = EventSerde()
    producer = transactional_producer(cluster.bootstrap, "big")
    producer.begin_transaction()
    topic = topic_name(TopicRole.JOB, cluster.prefix)
    jobs = ["job-1", "job-4", "job-5"]  # one partition: murmur2 puts them on partition 2 of 3
    assert {partition_of(job, 3) for job in jobs} == {2}
    for job_id in jobs:
        job = JobSubmitted(event_id=f"big-{job_id}", event_time=1, producer="t", job_id=job_id,
                           job_name="x" * 400_000, vertices=[vertex("v", 1)])  # fmt: skip
        producer.produce(topic, key=job_id.encode(), value=serde.encode(job, topic))
    producer.commit_transaction(30)

    with RuntimeThread(cluster, snapshot_every=1) as first:
        wait_until_decided(cluster)
        assert first.failure is None, first.failure
    with RuntimeThread(cluster, snapshot_every=1) as second:
        wait_until_decided(cluster)
        workers = dict(second.workers)
        assert second.failure is None, second.failure

    # decided and committed: an oversized snapshot used to abort every transaction, and the
    # partition went back to its committed offset again and again
    committed = committed_offsets(cluster.bootstrap, SERVICES_GROUP_PREFIX + cluster.prefix,
                                  [topic])  # fmt: skip
    assert committed.get((topic, 2), 0) >= 3, committed
    job_worker = next(w for w in workers.values() if "job-1" in w.driver.job_masters)
    assert job_worker.rebuilt_from_snapshot_at is not None, "no snapshot was used"
    assert sorted(job_worker.driver.job_masters) == jobs
    assert {len(jm.job.job_name) for jm in job_worker.driver.job_masters.values()} == {400_000}


def test_chunks_of_snapshots_older_than_the_assembled_one_are_dropped():
    """Torn or compacted snapshots never complete: their chunks must not pile up in memory."""
    assembler = SnapshotAssembler("job/0")
    torn = chunk_records("job/0", 3, b"t" * (CHUNK_BYTES * 2))
    for key, value in [torn[0], *chunk_records("job/0", 7, b"whole")]:
        assembler.add(key, value)
    assert assembler.latest == b"whole" and assembler._parts == {}
    assembler.add(*torn[1])  # the rest of the torn one, read late: older, so dropped
    assert assembler.latest == b"whole" and assembler._parts == {}
