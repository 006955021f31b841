"""ThrowableClassifier: the cause chain read from a failure's text (RS-4)."""

from __future__ import annotations

from jobledger.services.control.throwable_classifier import cause_chain, is_unrecoverable_error


def test_the_chain_is_the_first_line_and_every_caused_by_line_by_simple_type_name():
    error = (
        "java.lang.RuntimeException: outer\n\tat a.B.c(B.java:1)\nCaused by: "
        "java.io.IOException: middle: with a colon\n\tat d.E.f(E.java:2)\n"
        "Caused by: org.apache.flink.runtime.execution.SuppressRestartsException: inner"
    )
    assert cause_chain(error) == ["RuntimeException", "IOException", "SuppressRestartsException"]
    assert is_unrecoverable_error(error)


def test_rs_4_the_outermost_error_alone_suppresses_restarts_too():
    assert is_unrecoverable_error("SuppressRestartsException: stop")


def test_a_type_named_only_in_a_message_or_a_frame_does_not():
    assert not is_unrecoverable_error("ValueError: SuppressRestartsException: quoted")
    assert not is_unrecoverable_error("ValueError: x\n\tat SuppressRestartsException.run(X:1)")
