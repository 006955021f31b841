"""Which releases a runner with a keyring acts on (`services/runner/releases.py`): only one a
`services` key signed; anything else is one warning line and deletes nothing. The rows are
built as Spark hands them to `foreachBatch` (bytearrays, header structs, local times)."""

from __future__ import annotations

import logging
from datetime import datetime

import pytest
from pyspark.sql import Row

from jobledger.schemas import EventSerde
from jobledger.schemas.tasks import ResultPartitionsReleased
from jobledger.schemas.types import JobStatus
from jobledger.services.runner.releases import ResultReleases, release_refusal
from jobledger.services.signing import TYPE_HEADER, Keyring, SigningKey

TOPIC = "sec.taskexecutor"
RELEASE = ResultPartitionsReleased(
    event_id="e-1",
    event_time=1,
    producer="jm",
    job_id="job-1",
    resource_id="runner-0",
    job_status=JobStatus.FINISHED,
)
VALUE = EventSerde().encode(RELEASE, TOPIC)
TYPE = ResultPartitionsReleased.type_name()
APPENDED_MS = 1_700_000_000_123


def row(signer: SigningKey | None, value: bytes = VALUE, topic: str = TOPIC) -> Row:
    """The release as the query's row: `signer`'s signature over TOPIC (none: unsigned)."""
    headers = [(TYPE_HEADER, TYPE.encode())]
    if signer is not None:
        headers += signer.headers(topic, b"runner-0", value, TYPE).items()
    return Row(
        value=bytearray(VALUE), topic=TOPIC, key=bytearray(b"runner-0"),
        timestamp=datetime.fromtimestamp(APPENDED_MS / 1000),
        headers=[Row(key=k, value=bytearray(v)) for k, v in headers],
    )  # fmt: skip


@pytest.fixture
def keys() -> dict[str, SigningKey]:
    return {who: SigningKey.generate() for who in ("services", "runner", "client", "stranger")}


@pytest.fixture
def keyring(keys) -> Keyring:
    ring = Keyring({})
    for who in ("services", "runner", "client"):
        ring.add(keys[who], who, who)
    return ring


def test_a_release_the_services_signed_is_acted_on(keys, keyring):
    assert release_refusal(keyring, row(keys["services"])) is None


def test_a_release_anyone_else_wrote_is_refused_saying_why(keys, keyring):
    services_id = keys["services"].key_id
    refusals = {
        "unsigned": release_refusal(keyring, row(None)),
        "a client's": release_refusal(keyring, row(keys["client"])),
        "a runner's": release_refusal(keyring, row(keys["runner"])),
        "a stranger's": release_refusal(keyring, row(keys["stranger"])),
        "of other bytes": release_refusal(keyring, row(keys["services"], value=VALUE + b"\0")),
        "for another topic": release_refusal(keyring, row(keys["services"], topic="x.te")),
    }  # fmt: skip
    bad = f"bad signature for key {services_id} (services): the record is not what that key signed"
    assert refusals == {
        "unsigned": "unsigned record (no jobledger.signer/jobledger.signature header)",
        "a client's": "written by client (client): only the services release",
        "a runner's": "written by runner (runner): only the services release",
        "a stranger's": f"signed by key '{keys['stranger'].key_id}', which is not in the keyring",
        "of other bytes": bad,
        "for another topic": bad,
    }


def test_a_revoked_services_key_releases_only_what_was_appended_before(keys, keyring):
    """The row's local time read back as the broker's milliseconds, to the millisecond."""
    keyring.revoke("services", APPENDED_MS + 1)
    assert release_refusal(keyring, row(keys["services"])) is None
    again = Keyring({})
    again.add(keys["services"], "services", "services")
    again.revoke("services", APPENDED_MS)
    assert release_refusal(again, row(keys["services"])) == (
        f"signed by key {keys['services'].key_id} of services, revoked at {APPENDED_MS} "
        f"(the record was appended at {APPENDED_MS})"
    )


def test_a_refused_release_is_one_warning_line_and_without_a_keyring_all_are_believed(
    keys, keyring, caplog
):
    caplog.set_level(logging.WARNING, "jobledger.runner")
    assert ResultReleases("b:1", "sec.", keyring).believes("job-1", row(keys["client"])) is False
    assert ResultReleases("b:1", "sec.", keyring).believes("job-1", row(keys["services"]))
    assert ResultReleases("b:1", "sec.").believes("job-1", row(None))
    assert [r.getMessage() for r in caplog.records] == [
        "ignored a release of job job-1's result topics: written by client (client): only the "
        "services release"
    ]
