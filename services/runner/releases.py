"""Deleting a job's result topics once its JobMaster released them (`ResultPartitionsReleased`,
decided when the job is FINISHED, CANCELED or FAILED: no restart can need them). The runner,
an outside actor, acts on the decision; apart from the routing because it talks to the
broker's admin API, not to Spark. On a secured cluster a release is acted on only if a
`services` key signed it (`trust.py`): one forged for a running job would delete the results
its consumers still read."""

from __future__ import annotations

import logging

from . import exchange
from .reports import first_line

log = logging.getLogger("jobledger.runner")


class ResultReleases:
    def __init__(self, bootstrap: str, prefix: str) -> None:
        self.bootstrap = bootstrap
        self.prefix = prefix

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
