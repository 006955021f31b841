"""Who wrote each record, wherever events are shown: `history` (and
`--by`), `explain`, `tail`, `job show` and the REST API name each record's signer as the
keyring checks it, or say it is unsigned, refused, or that no keyring names its key. The log
is the stale-leader golden log as a cluster whose writers all sign writes it
(tests/log/test_signed_replay.py), exported, with a cancellation by bob appended."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient

from jobledger.cli.main import main
from jobledger.projections.debugging.history import belongs_to
from jobledger.projections.log.log_file import read_export
from jobledger.projections.log.positions import log_order
from jobledger.projections.log.provenance import Provenance
from jobledger.projections.log.writers import Writers
from jobledger.projections.rest.web_monitor import create_app
from jobledger.schemas.jobs import JobCancellationRequested
from jobledger.schemas.timers import TimerFired
from jobledger.services.signing import Keyring

from .test_signed_replay import ALICE, BOB, exported, keyring, log, signed  # noqa: F401


@pytest.fixture
def export(log, tmp_path):  # noqa: F811 (the fixture imported above)
    """The signed log, a cancellation of job-1 by bob after it, and one record whose signed
    bytes were altered (alice's ResourceManagerConnected, its key now naming no one)."""
    last = max((r for r in log if r.role.value == "job"), key=lambda r: r.offset)
    cancel = JobCancellationRequested(event_id="cancel-1", event_time=last.event.event_time + 1,
                                      producer="cli", job_id="job-1")  # fmt: skip
    records = [*log, signed(replace(last, offset=last.offset + 1, event=cancel,
                                    timestamp=last.timestamp + 1), BOB)]  # fmt: skip
    n = next(i for i, r in enumerate(records) if r.event.type_name() == "ResourceManagerConnected")
    parts = records[n].provenance.record()
    forged = Provenance.of(parts.topic, parts.key, parts.value + b"\0", parts.headers)
    records[n] = replace(records[n], provenance=forged)
    return exported(records, tmp_path / "signed.avro")


def ask(capsys, *args: str) -> str:
    assert main(list(args)) == 0
    return capsys.readouterr().out


def test_history_names_each_writer_as_the_keyring_checks_it(export, keyring, capsys):  # noqa: F811
    answer = json.loads(ask(capsys, "history", "job-1", "--file", str(export), "--keyring",
                            str(keyring), "-o", "json", "--no-index"))  # fmt: skip
    shown = [(e["event"]["type"], e["writer"]["principal"], e["writer"]["role"])
             for e in answer["events"]]  # fmt: skip
    expected = []
    for record in log_order(list(read_export(export))):
        if not belongs_to(record.event, "job-1") or isinstance(record.event, TimerFired):
            continue
        name = record.event.type_name()
        who = (None, None) if name == "ResourceManagerConnected" else _signer(record, keyring)
        expected.append((name, *who))
    assert shown == expected
    assert ("JobSubmitted", "alice", "client") in shown
    assert ("JobCancellationRequested", "bob", "admin") in shown
    refused = next(e["writer"] for e in answer["events"]
                   if e["event"]["type"] == "ResourceManagerConnected")  # fmt: skip
    assert refused["refused"].startswith(f"bad signature for key {ALICE.key_id} (alice)")
    indexed = json.loads(ask(capsys, "history", "job-1", "--file", str(export), "--keyring",
                             str(keyring), "-o", "json"))  # fmt: skip
    assert indexed["events"] == answer["events"]  # the export's index keeps each provenance


def _signer(record, keyring) -> tuple[str, str]:  # noqa: F811
    found = record.provenance.check(Keyring.load(keyring), record.timestamp)
    return found.principal, found.role


def test_history_by_a_principal_shows_only_what_it_wrote(export, keyring, capsys):  # noqa: F811
    lines = ask(capsys, "history", "job-1", "--by", "bob", "--file", str(export),
                "--keyring", str(keyring), "--no-index").splitlines()[1:]  # fmt: skip
    assert [line.split()[2:5] for line in lines] == [
        ["JobMasterLeadershipGranted", "by", "bob"],
        ["JobCancellationRequested", "by", "bob"],
    ]


def test_without_a_keyring_a_signature_is_named_by_its_key_only(export, tmp_path, capsys,
                                                                monkeypatch):  # fmt: skip
    monkeypatch.setenv("JOBLEDGER_HOME", str(tmp_path))
    monkeypatch.delenv("JOBLEDGER_KEYRING", raising=False)
    lines = ask(capsys, "tail", "--file", str(export), "job", "-c", "1").splitlines()
    assert f" JobSubmitted by key {ALICE.key_id} (no keyring) " in lines[0]


def test_explain_and_job_show_name_the_writers(export, keyring, capsys):  # noqa: F811
    story = ask(capsys, "explain", "cancel-1", "--file", str(export), "--keyring", str(keyring))
    assert "input by cli [bob (admin)]: " in story
    shown = ask(capsys, "job", "show", "job-1", "--file", str(export), "--keyring", str(keyring))
    assert "  submitted by: alice (client); cancelled by: bob (admin)" in shown.splitlines()


def test_the_rest_api_carries_the_writers_where_flink_s_shapes_have_room(export, keyring):  # noqa: F811
    records = log_order(list(read_export(export)))
    app = create_app(lambda: records, writers=Writers(Keyring.load(keyring)))
    details = TestClient(app).get("/jobs/job-1").json()
    assert (details["submitted-by"]["principal"], details["cancelled-by"]["principal"]) == (
        "alice",
        "bob",
    )
    history = [(s["status"], s["writer"]["principal"], s["cause"] and s["cause"]["type"])
               for s in details["status-history"]]  # fmt: skip
    assert history[0] == ("CREATED", "services", "JobSubmitted")
    assert {writer for _, writer, _ in history} == {"services"}
