"""Which decisions read from the TaskExecutor topic the runner acts on.

The runner acts on the services' decisions there: the ResourceManager's answers to its
registrations, the TaskExecutors' deployments and acceptances, the JobMasters'
cancellations and releases. On a secured cluster every role writes that topic (it is the
TaskExecutors' inbox), so a decision a tenant forged would cancel another tenant's task, run
one its TaskExecutor never accepted, stop the runner (an instance it did not make) or delete
results still being read. The services dead-letter such a forgery, but the runner reads the
topic itself. So a runner given the keyring (`--keyring`) holds them to the services' own
rule (`services/control/authorizer.py`: only the services decide): it acts only on a
decision a `services` key signed; any other gets one warning line with its reason and
changes nothing. A genuine decision sent again (a copy of its signed bytes) names what it
named when it was new: an attempt already cancelled or deployed (a deployment read is
remembered, `routing.SEEN_WINDOW`), a job that already ended for good.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from jobledger.schemas import Event
from jobledger.schemas.cluster import (
    TaskManagerConnectionClosed,
    TaskManagerRegistrationAccepted,
)
from jobledger.schemas.tasks import (
    ResultPartitionsReleased,
    TaskCancellationRequested,
    TaskDeploymentRequested,
    TaskSubmissionAccepted,
)

from ..signing import Keyring

log = logging.getLogger("jobledger.runner")

ACTED_ON = (
    TaskManagerRegistrationAccepted, TaskManagerConnectionClosed, TaskDeploymentRequested,
    TaskSubmissionAccepted, TaskCancellationRequested, ResultPartitionsReleased,
)  # fmt: skip
"""The decisions the runner acts on: each believed only where a `services` key signed it."""

SIGNED_COLUMNS = ("topic", "key", "timestamp", "headers")
"""The columns, besides `value`, that a signature is checked over (`Keyring.check`): the query
reads them (`includeHeaders`) only when the runner has a keyring."""


def decision_refusal(keyring: Keyring, row: Any) -> str | None:
    """Why the decision in `row` (a record of the query, `SIGNED_COLUMNS` and `value`) may
    not be acted on, in one line, or None if a `services` key signed it."""
    headers = [(name, None if value is None else bytes(value)) for name, value in row.headers or []]
    key = None if row.key is None else bytes(row.key)
    signer = keyring.check(row.topic, key, bytes(row.value), headers, _millis(row.timestamp))
    if isinstance(signer, str):
        return signer
    if signer.role != "services":
        return f"written by {signer.principal} ({signer.role}): only the services decide"
    return None


def _millis(timestamp: datetime | None) -> int:
    """A record's timestamp as Kafka's milliseconds (PySpark hands it over as a naive local
    time, which `datetime.timestamp` reads back as such); none known: 0, before any revocation."""
    return 0 if timestamp is None else round(timestamp.timestamp() * 1000)


def described(event: Event) -> str:
    """A decision in a warning line: its type and what it is about."""
    attempt = getattr(event, "execution_attempt_id", None)
    job = getattr(event, "job_id", None)
    about = (
        f"attempt {attempt} of job {job}"
        if attempt
        else f"job {job}"
        if job
        else f"TaskExecutor {getattr(event, 'resource_id', None)}"
    )
    return f"{event.type_name()} for {about}"


class ServicesDecisions:
    """The runner's belief in the decisions it reads (the module docstring)."""

    def __init__(self, keyring: Keyring | None) -> None:
        self.keyring = keyring
        """None: every decision is believed (an unsecured cluster, where anyone may write)."""

    def believes(self, event: Event, row: Any) -> bool:
        """Whether to act on `event`, read in `row`; a refusal is one warning line."""
        if self.keyring is None or not isinstance(event, ACTED_ON):
            return True
        reason = decision_refusal(self.keyring, row)
        if reason is not None:
            log.warning("ignored %s: %s", described(event), reason)
        return reason is None
