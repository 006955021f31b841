"""A client in another language on `broker --secure` (tests/system/test_java_client.py,
tests/system/test_go_client.py): what it signs is admitted and named as its writer; what it signs
with a key the keyring does not hold is dead-lettered, with nothing else changed."""

from __future__ import annotations

import base64
import json
import subprocess
import time

from .secure_cluster import SignedRun


def signed_client_runs(run: SignedRun, command: list[str], language: str) -> None:
    """Run the client with the good key to FINISHED, then with the wrong key; check both."""
    good = subprocess.run(
        [*command, *run.client_args(run.good), "--parallelism", "2", "--timeout-s", "120"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert good.returncode == 0, good.stdout + good.stderr
    job_id = good.stdout.splitlines()[0].split()[2]
    assert good.stdout.splitlines()[-1] == f"job {job_id}: RUNNING -> FINISHED"

    asked = run.broker.run("history", job_id, "-o", "json", *run.as_("client"))
    assert asked.returncode == 0, asked.stderr
    writers = {
        (e["event"]["producer"], e["writer"]["principal"], e["writer"]["role"])
        for e in json.loads(asked.stdout)["events"]
    }
    # every input is the client's, every decision the services', nothing refused or unsigned
    assert {(p, w, r) for p, w, r in writers if p == f"{language}-client"} == {
        (f"{language}-client", run.principal, "admin")
    }
    assert {(w, r) for p, w, r in writers if p != f"{language}-client"} == {
        ("services", "services")
    }
    assert _dead_letters(run) == []

    wrong = subprocess.run(
        [*command, *run.client_args(run.wrong), "--parallelism", "1", "--timeout-s", "1"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert wrong.returncode == 1, wrong.stdout + wrong.stderr
    wrong_job = wrong.stdout.splitlines()[0].split()[2]
    # the client wrote a registration, a beat or more and three job inputs: all refused
    letters = _dead_letters(run, until=lambda found: len(found) >= 5)
    refused = f"signed by key {run.wrong_key_id!r}, which is not in the keyring"
    assert {letter["reason"] for letter in letters} == {refused}, letters
    keys = {base64.b64decode(letter["original_key"]).decode() for letter in letters}
    assert wrong_job in keys, keys


def _dead_letters(run: SignedRun, until=None) -> list[dict]:
    """The dead letters on the prefix (once `until` holds of them, if given)."""
    deadline = time.monotonic() + 60
    while True:
        tail = run.broker.run("tail", "deadletter", "-o", "beginning", "-e", "--format",
                              "event", *run.as_("client"))  # fmt: skip
        assert tail.returncode == 0, tail.stderr
        found = [json.loads(line) for line in tail.stdout.splitlines()]
        if until is None or until(found) or time.monotonic() > deadline:
            return found
        time.sleep(0.5)
