"""ThrowableClassifier: what kind of error a failure carries, read from its text.

A failure reaches the JobMaster as text (a task's `error`, a refusal's reason): the error's
own `Type: message` on the first line, and each error of its cause chain on a line of its own
starting `Caused by: ` (as a Java stack trace prints it; `\tat ...` frames and other lines are
not errors of the chain). A type may be fully qualified; its simple name decides.
"""

from __future__ import annotations

CAUSED_BY = "Caused by: "

NON_RECOVERABLE_ERRORS = frozenset({"SuppressRestartsException"})
"""Flink's ThrowableType.NonRecoverableError: an error of these types anywhere in the chain
means the job must not restart, whatever the restart strategy says (RS-4)."""


def cause_chain(error: str) -> list[str]:
    """The simple type names of the error and of every cause it carries, outermost first."""
    lines = error.splitlines()
    heads = lines[:1] + [line.strip()[len(CAUSED_BY) :] for line in lines[1:]
                         if line.strip().startswith(CAUSED_BY)]  # fmt: skip
    return [head.split(":", 1)[0].strip().rsplit(".", 1)[-1] for head in heads]


def is_unrecoverable_error(error: str) -> bool:
    """ExecutionFailureHandler.isUnrecoverableError: a non-recoverable error in the chain."""
    return any(name in NON_RECOVERABLE_ERRORS for name in cause_chain(error))
