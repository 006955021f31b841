"""ExecutionState moves (ES-1..ES-7), JobStatus transitions (JS-1..JS-3) and restart strategy
counting (RS-1), as pure functions."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobledger.schemas.types import ExecutionState as S
from jobledger.schemas.types import JobStatus as J
from jobledger.schemas.types import RestartStrategy, RestartStrategyKind
from jobledger.services.control import execution_state as es
from jobledger.services.control.job_status import GLOBALLY_TERMINAL, TERMINAL, transition_refusal
from jobledger.services.control.restart_strategy import RestartBackoff


def test_es_1_terminal_states():
    assert {S.FINISHED, S.CANCELED, S.FAILED} == es.TERMINAL


def test_es_2_transitions_are_compare_and_set():
    assert es.transition(S.CREATED, S.CREATED, S.SCHEDULED).state is S.SCHEDULED
    wrong = es.transition(S.CREATED, S.DEPLOYING, S.RUNNING)
    assert wrong.state is S.CREATED and wrong.refused
    terminal = es.transition(S.FINISHED, S.FINISHED, S.RUNNING)
    assert terminal.refused == "Cannot leave terminal state FINISHED to RUNNING."


@pytest.mark.parametrize(
    ("current", "state", "cancel_task"),
    [(S.DEPLOYING, S.CANCELING, True), (S.RUNNING, S.CANCELING, True),
     (S.INITIALIZING, S.CANCELING, True), (S.CREATED, S.CANCELED, False),
     (S.SCHEDULED, S.CANCELED, False), (S.CANCELING, S.CANCELING, False),
     (S.CANCELED, S.CANCELED, False), (S.FINISHED, S.FINISHED, False),
     (S.FAILED, S.FAILED, False)],
)  # fmt: skip
def test_es_3_cancel(current, state, cancel_task):
    outcome = es.cancel(current)
    assert (outcome.state, outcome.cancel_task) == (state, cancel_task)


@pytest.mark.parametrize(
    ("current", "state"),
    [(S.RUNNING, S.FINISHED), (S.DEPLOYING, S.FINISHED), (S.CANCELING, S.CANCELED),
     (S.CANCELED, S.CANCELED), (S.FAILED, S.FAILED), (S.FINISHED, S.FINISHED),
     (S.CREATED, S.FAILED),
     (S.SCHEDULED, S.FAILED)],
)  # fmt: skip
def test_es_4_mark_finished(current, state):
    assert es.mark_finished(current).state is state
    if current in (S.CREATED, S.SCHEDULED):
        assert "received FINISHED message while being in state" in es.mark_finished(current).refused


@pytest.mark.parametrize(
    ("current", "state"),
    [(S.FAILED, S.FAILED), (S.CANCELED, S.CANCELED), (S.FINISHED, S.FINISHED),
     (S.CANCELING, S.CANCELED), (S.RUNNING, S.FAILED), (S.CREATED, S.FAILED)],
)  # fmt: skip
def test_es_5_fail(current, state):
    assert es.fail(current).state is state


@pytest.mark.parametrize(
    ("current", "state", "cancel_task"),
    [(S.DEPLOYING, S.RUNNING, False), (S.INITIALIZING, S.RUNNING, False),
     (S.FINISHED, S.FINISHED, False), (S.CANCELED, S.CANCELED, False),
     (S.CANCELING, S.CANCELING, True), (S.FAILED, S.FAILED, True),
     (S.SCHEDULED, S.FAILED, True)],
)  # fmt: skip
def test_es_6_switch_to_running(current, state, cancel_task):
    outcome = es.switch_to_running(current)
    assert (outcome.state, outcome.cancel_task) == (state, cancel_task)


def test_es_7_complete_cancelling():
    for current in (S.CANCELING, S.RUNNING, S.DEPLOYING):
        assert es.complete_cancelling(current).state is S.CANCELED
    assert es.complete_cancelling(S.FAILED).state is S.FAILED
    assert "Asynchronous race" in es.complete_cancelling(S.SCHEDULED).global_failure


def test_a_task_cannot_report_scheduling_states():
    for reported in (S.CREATED, S.SCHEDULED, S.DEPLOYING, S.UNKNOWN):
        outcome = es.on_reported(S.RUNNING, reported)
        assert outcome.state is S.RUNNING and outcome.refused


@given(st.sampled_from(list(S)), st.lists(st.sampled_from(list(S)), max_size=10))
def test_no_report_ever_leaves_a_terminal_state(start, reports):
    state = start
    for reported in reports:
        before = state
        state = es.on_reported(state, reported).state
        if before in es.TERMINAL:
            assert state is before


def test_js_1_terminal_job_statuses():
    assert {J.FAILED, J.CANCELED, J.FINISHED} == GLOBALLY_TERMINAL
    assert GLOBALLY_TERMINAL | {J.SUSPENDED} == TERMINAL


def test_js_2_leaving_a_terminal_status_is_refused():
    for terminal in TERMINAL:
        assert "trying to leave terminal state" in transition_refusal(terminal, J.RUNNING)


def test_js_3_normal_life_cycle():
    path = [J.CREATED, J.RUNNING, J.FINISHED]
    assert all(transition_refusal(a, b) is None for a, b in itertools.pairwise(path))
    for start in (J.RUNNING, J.CREATED, J.RESTARTING, J.FAILING):
        assert transition_refusal(start, J.CANCELLING) is None
    assert transition_refusal(J.CANCELLING, J.CANCELED) is None
    assert transition_refusal(J.CREATED, J.FINISHED) is not None


def test_rs_1_fixed_delay_allows_exactly_its_attempts():
    backoff = RestartBackoff(
        RestartStrategy(kind=RestartStrategyKind.FIXED_DELAY, restart_attempts=3, delay_ms=77)
    )
    answers = []
    for t in range(4):
        backoff.notify_failure(t)
        answers.append((backoff.can_restart(t), backoff.can_restart(t)))
    assert answers == [(True, True)] * 3 + [(False, False)]
    assert backoff.backoff_ms == 77


def _failure_rate(max_failures: int, interval_ms: int) -> RestartBackoff:
    return RestartBackoff(RestartStrategy(
        kind=RestartStrategyKind.FAILURE_RATE, max_failures_per_interval=max_failures,
        failure_rate_interval_ms=interval_ms,
    ))  # fmt: skip


def test_failure_rate_1_12_the_max_th_failure_inside_the_interval_refuses():
    """FailureRateRestartBackoffTimeStrategyTest#testFailuresExceedingRate: max 3, all three
    failures inside the interval: the first two may restart, the third may not."""
    backoff = _failure_rate(3, 10_000)
    answers = []
    for t in (0, 1, 2):
        backoff.notify_failure(t)
        answers.append((backoff.can_restart(t), backoff.can_restart(t)))
    assert answers == [(True, True), (True, True), (False, False)]


def test_failure_rate_1_12_failures_spread_wider_than_the_interval_always_restart():
    """testManyFailuresWithinRate: interval 1 ms, a failure every 2 ms, max 3: always yes."""
    backoff = _failure_rate(3, 1)
    for t in (0, 2, 4, 6, 8):
        backoff.notify_failure(t)
        assert backoff.can_restart(t)
    assert backoff.failures == [4, 6, 8], "only the last max failures are kept"


def test_failure_rate_1_12_the_oldest_counted_failure_must_be_strictly_older_than_the_interval():
    backoff = _failure_rate(2, 1_000)
    backoff.notify_failure(0)
    backoff.notify_failure(500)
    assert not backoff.can_restart(1_000), "0 is exactly the interval ago: still inside"
    assert backoff.can_restart(1_001)
    backoff.notify_failure(1_200)
    assert not backoff.can_restart(1_200), "500 and 1200 both inside the interval"


def test_none_never_restarts():
    backoff = RestartBackoff(RestartStrategy(kind=RestartStrategyKind.NONE))
    backoff.notify_failure(0)
    assert not backoff.can_restart(0)
