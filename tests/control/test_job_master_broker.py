"""Whole jobs driven by events over the real broker, with hand-written TaskExecutor (runner)
events: EAGER and LAZY jobs finish; a task failing once under fixed-delay restarts and
finishes; a stale leader's event is rejected."""

from __future__ import annotations

import pytest

from jobledger.schemas import Event
from jobledger.schemas.types import ExecutionState, ScheduleMode
from jobledger.services.control.driver import ReducerDriver

from ..support.broker_pump import BrokerPump
from ..support.jobs import JobCluster, fails_first_attempt_of, fixed_delay, vertex

pytestmark = pytest.mark.broker


class BrokerJobCluster(JobCluster):
    """The same harness, with every event going through Kafka topics."""

    def __init__(self, cluster) -> None:
        self.pump = BrokerPump(cluster.bootstrap, cluster.prefix, ReducerDriver)
        super().__init__()

    def run(self, events: list[Event]) -> list[Event]:
        start = len(self.pump.log)
        self.pump.append(events)
        self.pump.run_until_quiet()
        new = self.pump.log[start:]
        self.log.extend(new)
        return new

    def answer(self, reports: list[Event]) -> None:
        """One trip through the broker for a whole round of reports."""
        self.run(reports)


@pytest.fixture
def jobs(cluster):
    made: list[BrokerJobCluster] = []

    def make() -> BrokerJobCluster:
        made.append(BrokerJobCluster(cluster))
        return made[-1]

    yield make
    for c in made:
        c.pump.close()


def test_an_eager_job_finishes_over_the_broker(jobs):
    c = jobs()
    c.submit([vertex("src", 2), vertex("sink", 2, ("src", "ALL_TO_ALL", "PIPELINED"))])
    c.play()
    assert c.statuses() == ["CREATED", "RUNNING", "FINISHED"]
    assert len(c.deployments()) == 4


def test_a_lazy_job_finishes_over_the_broker(jobs):
    c = jobs()
    c.submit([vertex("src", 2), vertex("sink", 1, ("src", "POINTWISE", "BLOCKING"))],
             mode=ScheduleMode.LAZY_FROM_SOURCES)  # fmt: skip
    c.play()
    assert [d.vertex_id for d in c.deployments()] == ["src", "src", "sink"]
    assert c.statuses() == ["CREATED", "RUNNING", "FINISHED"]


def test_a_task_failing_once_restarts_under_fixed_delay_and_finishes(jobs):
    c = jobs()
    c.submit([vertex("only", 2)], restart=fixed_delay(attempts=3, delay_ms=1_000))
    c.play(fails_first_attempt_of("only"))
    assert c.statuses()[-1] == "RESTARTING"
    c.tick(c.clock.now + 1_000)
    c.play(fails_first_attempt_of("only"))
    assert c.statuses() == ["CREATED", "RUNNING", "RESTARTING", "RUNNING", "FINISHED"]


def test_a_stale_leaders_event_is_rejected_over_the_broker(jobs):
    c = jobs()
    c.submit([vertex("only", 1)])
    attempt = c.deployments()[0].execution_attempt_id
    decisions = c.report(attempt, ExecutionState.RUNNING, job_master_id="jm-stale")
    assert [(e.type_name(), e.reason) for e in decisions] == [
        ("EventRejected", "JobMasterId jm-stale is not the leader's"),
    ]  # fmt: skip
