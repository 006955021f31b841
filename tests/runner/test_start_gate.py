"""The runner's start gate over real HTTP: an attempt whose cancellation the driver read
first never starts; one that started cannot be cancelled before it starts; a Spark retry of
a started attempt may start it again."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from jobledger.services.runner.start_gate import StartGate, may_start
from jobledger.services.runner.task_producers import ProducerLeases


@pytest.fixture
def gate():
    gate = StartGate("127.0.0.1", ProducerLeases(lambda _: None))
    yield gate
    gate.close()


def test_an_attempt_cancelled_before_it_starts_never_starts(gate):
    assert gate.cancel_unstarted("late") is True
    assert may_start(gate.url, ["late", "other"]) == {"other"}
    assert gate.cancelled_before_start(["late", "other"]) == {"late"}


def test_a_started_attempt_is_not_cancelled_before_start(gate):
    assert may_start(gate.url, ["running"]) == {"running"}
    assert gate.cancel_unstarted("running") is False
    assert may_start(gate.url, ["running"]) == {"running"}, "a Spark retry starts it again"


def test_forgotten_attempts_leave_nothing_behind(gate):
    may_start(gate.url, ["a"])
    gate.cancel_unstarted("b")
    gate.forget(["a", "b"])
    assert gate.started == set() and gate.cancelled == set()


@pytest.mark.parametrize("body", [b"not json", b'{"attempts": [1]}', b"{}"])
def test_a_bad_request_is_refused_and_the_gate_goes_on(gate, body):
    request = urllib.request.Request(gate.url, data=body, method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 400
    assert may_start(gate.url, ["ok"]) == {"ok"}


def test_the_answer_is_json_naming_the_attempts_that_may_start(gate):
    request = urllib.request.Request(
        gate.url, data=json.dumps({"attempts": ["x"]}).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert json.loads(response.read()) == {"start": ["x"]}
