"""Record signatures and the keyring: what a signature covers, what the
keyring refuses and why, and `jobledger keys`."""

from __future__ import annotations

import json
import stat

import pytest

from jobledger.cli.main import main
from jobledger.services.signing import (
    SIGNATURE_HEADER,
    SIGNER_HEADER,
    TYPE_HEADER,
    KeyFileError,
    Keyring,
    Signer,
    SigningKey,
)

TOPIC, KEY, VALUE, TYPE = "jobledger.job", b"job-1", b"\xc3\x01value", "JobSubmitted"


def signed(key: SigningKey, **changes) -> dict:
    """What `check` is given for a record `key` signed, with `changes` made after signing."""
    record = {"topic": TOPIC, "key": KEY, "value": VALUE}
    headers = [(TYPE_HEADER, TYPE.encode()), *key.headers(TOPIC, KEY, VALUE, TYPE).items()]
    record["headers"] = headers
    record.update(changes)
    return record


@pytest.fixture
def keys() -> tuple[Keyring, SigningKey, SigningKey]:
    """A keyring of alice (client) and tm (runner), and a key the keyring does not hold."""
    alice, tm = SigningKey.generate(), SigningKey.generate()
    keyring = Keyring({})
    keyring.add(alice, "alice", "client")
    keyring.add(tm, "tm", "runner")
    return keyring, alice, tm


def check(keyring: Keyring, record: dict, at: int = 1_000) -> Signer | str:
    return keyring.check(record["topic"], record["key"], record["value"], record["headers"], at)


def test_a_signed_record_names_its_signer(keys):
    keyring, alice, tm = keys
    assert check(keyring, signed(alice)) == Signer("alice", "client")
    assert check(keyring, signed(tm)) == Signer("tm", "runner")


@pytest.mark.parametrize(
    "changes",
    [
        {"topic": "other.job"},  # copied to another cluster's (prefix's) topic
        {"key": b"job-2"},
        {"value": VALUE + b"\x00"},
        {"headers": "retyped"},
    ],
)
def test_a_signature_covers_the_topic_key_value_and_type(keys, changes):
    keyring, alice, _ = keys
    record = signed(alice)
    if changes == {"headers": "retyped"}:
        changes = {"headers": [(TYPE_HEADER, b"JobCancellationRequested"), *record["headers"][1:]]}
    assert check(keyring, {**record, **changes}) == (
        f"bad signature for key {alice.key_id} (alice): the record is not what that key signed"
    )


def test_unsigned_unknown_and_doubly_signed_records_are_refused(keys):
    keyring, alice, _ = keys
    stranger = SigningKey.generate()
    assert check(keyring, {**signed(alice), "headers": [(TYPE_HEADER, TYPE.encode())]}) == (
        f"unsigned record (no {SIGNER_HEADER}/{SIGNATURE_HEADER} header)"
    )
    assert check(keyring, {**signed(alice), "headers": None}).startswith("unsigned record")
    assert check(keyring, signed(stranger)) == (
        f"signed by key {stranger.key_id!r}, which is not in the keyring"
    )
    doubled = signed(alice)
    doubled["headers"] = [*doubled["headers"], *signed(stranger)["headers"][1:]]
    assert check(keyring, doubled) == (
        f"two {SIGNER_HEADER} or {SIGNATURE_HEADER} headers: which one signed it?"
    )


def test_a_revoked_key_signs_nothing_appended_from_its_revocation_on(keys):
    keyring, alice, tm = keys
    assert [e.principal for e in keyring.revoke("alice", at_ms=2_000)] == ["alice"]
    assert check(keyring, signed(alice), at=1_999) == Signer("alice", "client")
    assert check(keyring, signed(alice), at=2_000) == (
        f"signed by key {alice.key_id} of alice, revoked at 2000 (the record was appended at 2000)"
    )
    assert check(keyring, signed(tm), at=5_000) == Signer("tm", "runner")
    assert keyring.revoke("alice", at_ms=3_000) == []  # revoked once, at its first time


def test_a_keyring_and_a_key_survive_their_files(tmp_path, keys):
    keyring, alice, _ = keys
    keyring.revoke(alice.key_id, at_ms=7)
    keyring.save(tmp_path / "keyring.json")
    again = Keyring.load(tmp_path / "keyring.json")
    assert again.entries == keyring.entries
    assert check(again, signed(alice), at=6) == Signer("alice", "client")
    assert SigningKey.from_pem(alice.pem()).key_id == alice.key_id


def test_files_that_are_not_keys_or_keyrings_are_one_line_errors(tmp_path):
    (tmp_path / "k.pem").write_text("not a key")
    with pytest.raises(KeyFileError, match="is not an unencrypted PEM private key"):
        SigningKey.load(tmp_path / "k.pem")
    with pytest.raises(KeyFileError, match="cannot read signing key"):
        SigningKey.load(tmp_path / "missing.pem")
    (tmp_path / "ring.json").write_text(json.dumps({"keys": [{"key_id": "x"}]}))
    with pytest.raises(KeyFileError, match="is not a jobledger keyring"):
        Keyring.load(tmp_path / "ring.json")
    entry = {"key_id": "x", "principal": "p", "role": "root", "public_key": ""}
    (tmp_path / "ring.json").write_text(json.dumps({"keys": [entry]}))
    with pytest.raises(KeyFileError, match="has role 'root', not one of"):
        Keyring.load(tmp_path / "ring.json")


def test_keys_new_list_and_revoke(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("JOBLEDGER_HOME", str(tmp_path))
    ring = tmp_path / "secure" / "keyring.json"
    assert main(["keys", "new", "alice", "--role", "client"]) == 0
    assert main(["keys", "new", "runner-eu", "--role", "runner"]) == 0
    key_file = tmp_path / "secure" / "alice.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    alice = SigningKey.load(key_file)
    assert Keyring.load(ring).entries[alice.key_id].principal == "alice"
    assert main(["keys", "new", "alice", "--role", "client"]) == 1  # its key file exists
    assert main(["keys", "revoke", "alice"]) == 0
    assert main(["keys", "revoke", "alice"]) == 1
    capsys.readouterr()
    assert main(["keys", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1:3] for line in lines] == [["alice", "client"], ["runner-eu", "runner"]]
    assert "revoked at" in lines[0] and "revoked" not in lines[1]


def test_a_runner_key_states_its_task_executors_and_one_has_one_owner(
    tmp_path, capsys, monkeypatch
):
    """`keys new --runner-id --task-executors` writes each ResourceID into the keyring as its
    principal's; a ResourceID stated for a second principal is refused, by `keys new` and by
    a keyring file edited by hand, and only a runner's key states any."""
    monkeypatch.setenv("JOBLEDGER_HOME", str(tmp_path))
    ring = tmp_path / "secure" / "keyring.json"
    assert main(["keys", "new", "rk", "--role", "runner"]) == 0
    assert main(["keys", "new", "rk-2", "--role", "runner", "--task-executors", "2"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "rk-2 speaks for TaskExecutors rk-2-0, rk-2-1"
    assert Keyring.load(ring).owners() == {"rk-0": "rk", "rk-2-0": "rk-2", "rk-2-1": "rk-2"}
    taking = ["keys", "new", "thief", "--role", "runner", "--runner-id", "rk-2"]
    assert main(taking) == 1
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(
            "TaskExecutor 'rk-2-0' is stated for both rk-2 and thief: a TaskExecutor has one owner"
        )
    )
    assert not (tmp_path / "secure" / "thief.key").exists()
    assert main(["keys", "new", "c", "--role", "client", "--task-executors", "1"]) == 1
    data = json.loads(ring.read_text())
    data["keys"][0]["task_executors"] = ["rk-2-1"]
    ring.write_text(json.dumps(data))
    with pytest.raises(KeyFileError, match="'rk-2-1' is stated for both rk and rk-2"):
        Keyring.load(ring)
    assert main(["keys", "list"]) == 1
