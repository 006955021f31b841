"""A job's failovers read back from its log (projections/debugging/failovers.py): under region
failover each failed region is a restart of its own, though the job moves to RESTARTING once."""

from __future__ import annotations

from jobledger.projections.debugging.failovers import failovers

from ..support.golden_logs import as_log
from ..support.jobs import JOB, JobCluster, fails_first_attempt_of, fixed_delay, vertex


def test_each_region_that_fails_is_a_failover_of_its_own_at_the_report_that_failed_it():
    c = JobCluster()
    c.submit([vertex("only", 2)], restart=fixed_delay(attempts=3, delay_ms=5_000))
    c.play(fails_first_attempt_of("only"))
    assert c.statuses() == ["CREATED", "RUNNING", "RESTARTING"]
    log = as_log(c.log)
    found = failovers(log, JOB)
    failed = [r for r in log if getattr(r.event, "execution_state", None) == "FAILED"]
    assert [(f.record, f.subtasks, f.whole_job, f.failures) for f in found] == [
        (failed[0], ("only[0]",), False, 1),
        (failed[1], ("only[1]",), False, 2),
    ]  # fmt: skip
    assert [f.cause for f in found] == [
        f"{r.event.execution_attempt_id}: java.lang.RuntimeException: boom" for r in failed
    ]
    assert failovers(log, "another-job") == []
