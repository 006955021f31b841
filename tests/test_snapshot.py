"""Snapshots: a real one round-trips; anything else is refused with a reason, and reading a
crafted one runs no code (issue: a pickle on the snapshot topic executed its `__reduce__`)."""

from __future__ import annotations

import os
import pickle

import pytest

from jobledger.services.snapshot import MAGIC, VERSION, Snapshot, SnapshotRefused, decode, encode

from .jobs import JobCluster, fails_first_attempt_of, fixed_delay, vertex


class _Marker:
    """Unpickling this creates a file: the proof that code ran."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


class _OpenFile:
    def __reduce__(self):
        return (open, ("/etc/passwd",))


def _header() -> bytes:
    return MAGIC + bytes([VERSION])


def test_a_real_snapshot_round_trips():
    cluster = JobCluster(task_executors=2, slots=4)
    cluster.submit([vertex("a", 2), vertex("b", 2, ("a", "ALL_TO_ALL", "BLOCKING"))],
                   restart=fixed_delay(2, 10))  # fmt: skip
    cluster.play(fails_first_attempt_of("b"))

    restored = decode(encode(Snapshot(cluster.driver, 42)))

    assert restored.next_offset == 42
    assert restored.driver.to_dict() == cluster.driver.to_dict()


def test_a_crafted_snapshot_runs_no_code(tmp_path):
    marker = tmp_path / "pwned"
    payload = _header() + pickle.dumps(_Marker(str(marker)))

    with pytest.raises(SnapshotRefused, match=r"names posix\.system, which is not a class"):
        decode(payload)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (pickle.dumps(_OpenFile()), r"names io\.open"),
        (pickle.dumps(print), "names builtins.print"),
        (pickle.dumps(os.path.join), "names posixpath.join"),
        (pickle.dumps(Snapshot), "holds a type, not a Snapshot"),
        (pickle.dumps({"not": "a snapshot"}), "holds a dict, not a Snapshot"),
        (b"\x80\x05garbage", "it is corrupt"),
    ],
    ids=["open", "builtin-function", "imported-function", "a-class-itself", "dict", "torn"],
)
def test_anything_but_a_snapshot_is_refused_with_its_reason(payload, reason):
    with pytest.raises(SnapshotRefused, match=reason):
        decode(_header() + payload)


def test_wrong_magic_or_version_is_refused_and_absence_is_none():
    assert decode(None) is None and decode(b"") is None
    with pytest.raises(SnapshotRefused, match="magic"):
        decode(b"PICKLE" + pickle.dumps(1))
    with pytest.raises(SnapshotRefused, match=f"version 1, this reads version {VERSION}"):
        decode(MAGIC + bytes([1]) + pickle.dumps(1))
