"""Deleting a job's result topics once its JobMaster released them (`ResultPartitionsReleased`,
decided when the job is FINISHED, CANCELED or FAILED: no restart can need them). The runner,
an outside actor, acts on the decision; apart from the routing because it talks to the
broker's admin API, not to Spark.

On a secured cluster the TaskExecutor topic is written by clients and runners too, and a
release a tenant forged for a running job would delete the results its consumers still
read. So a runner given the keyring (`--keyring`) acts only on a release a `services` key
signed; any other gets one warning line and deletes nothing. A genuine release sent again
(a copy of its signed bytes) can only name a job that already ended for good."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from ..signing import Keyring
from . import exchange
from .reports import first_line

log = logging.getLogger("jobledger.runner")

SIGNED_COLUMNS = ("topic", "key", "timestamp", "headers")
"""The columns, besides `value`, that a signature is checked over (`Keyring.check`): the query
reads them (`includeHeaders`) only when the runner has a keyring."""


def release_refusal(keyring: Keyring, row: Any) -> str | None:
    """Why the release in `row` (a record of the query, `SIGNED_COLUMNS` and `value`) may not
    be acted on, in one line, or None if a `services` key signed it."""
    headers = [(name, None if value is None else bytes(value)) for name, value in row.headers or []]
    key = None if row.key is None else bytes(row.key)
    signer = keyring.check(row.topic, key, bytes(row.value), headers, _millis(row.timestamp))
    if isinstance(signer, str):
        return signer
    if signer.role != "services":
        return f"written by {signer.principal} ({signer.role}): only the services release"
    return None


def _millis(timestamp: datetime | None) -> int:
    """A record's timestamp as Kafka's milliseconds (PySpark hands it over as a naive local
    time, which `datetime.timestamp` reads back as such); none known: 0, before any revocation."""
    return 0 if timestamp is None else round(timestamp.timestamp() * 1000)


class ResultReleases:
    def __init__(self, bootstrap: str, prefix: str, keyring: Keyring | None = None) -> None:
        self.bootstrap = bootstrap
        self.prefix = prefix
        self.keyring = keyring
        """None: every release is believed (an unsecured cluster, where anyone may write)."""

    def believes(self, job_id: str, row: Any) -> bool:
        """Whether to act on this release of `job_id`'s topics (the module docstring); a
        refusal is one warning line."""
        if self.keyring is None:
            return True
        reason = release_refusal(self.keyring, row)
        if reason is not None:
            log.warning("ignored a release of job %s's result topics: %s", job_id, reason)
        return reason is None

    def release(self, job_id: str) -> None:
        """The job ended for good: its result topics go. Each TaskExecutor a producer ran on
        is told; the first to act deletes them, the others find them gone."""
        try:
            deleted = exchange.delete_result_topics(self.bootstrap, self.prefix, job_id)
        except Exception as exc:
            log.warning("could not delete job %s's result topics (%s)", job_id, first_line(exc))
            return
        if deleted:
            log.info("job %s ended: deleted its %d result topic(s)", job_id, len(deleted))
