"""The life of one execution attempt: Flink's ExecutionState and the moves Execution allows.

Each move takes the current state and returns an `Outcome`: the next state, whether the task
must be told to cancel, and what was refused or is a global failure. Nothing here mutates;
the JobMaster applies outcomes. Terminal states (FINISHED, CANCELED, FAILED) are final.

An outcome depends on the states alone and is frozen, so the moves the scheduler makes for
every report, failure and cancellation (`on_reported`, `fail`, `cancel`) are cached: each
state, or pair of states, gets its Outcome once, not one per task report.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from jobledger.schemas.types import ExecutionState as S

TERMINAL = frozenset({S.FINISHED, S.CANCELED, S.FAILED})
DEPLOYED = frozenset({S.DEPLOYING, S.INITIALIZING, S.RUNNING})


@dataclass(frozen=True)
class Outcome:
    state: S
    cancel_task: bool = False
    refused: str | None = None
    global_failure: str | None = None


def transition(current: S, expected: S, target: S) -> Outcome:
    """Compare-and-set (ES-2): leaving a terminal state is refused; a wrong expectation
    changes nothing."""
    if expected in TERMINAL:
        return Outcome(current, refused=f"Cannot leave terminal state {expected} to {target}.")
    if current is not expected:
        return Outcome(current, refused=f"expected {expected}, but the attempt is {current}")
    return Outcome(target)


@functools.cache
def cancel(current: S) -> Outcome:
    """ES-3: deployed attempts go CANCELING and are told; undeployed ones are CANCELED now."""
    if current in DEPLOYED:
        return Outcome(S.CANCELING, cancel_task=True)
    if current in (S.CREATED, S.SCHEDULED):
        return Outcome(S.CANCELED)
    return Outcome(current)


def mark_finished(current: S) -> Outcome:
    """ES-4: a very fast task may finish while still DEPLOYING. Elsewhere the attempt fails,
    and a terminal one ignores that failure (ES-5)."""
    if current in DEPLOYED:
        return Outcome(S.FINISHED)
    if current is S.CANCELING:
        return Outcome(S.CANCELED)
    if current in TERMINAL:
        return Outcome(current, refused=f"FINISHED ignored in {current}")
    return Outcome(
        S.FAILED, refused=f"Vertex received FINISHED message while being in state {current}"
    )


@functools.cache
def fail(current: S) -> Outcome:
    """ES-5: a cancelling attempt completes as CANCELED; terminal ones ignore the failure."""
    if current in TERMINAL:
        return Outcome(current, refused=f"failure ignored in {current}")
    if current is S.CANCELING:
        return Outcome(S.CANCELED)
    return Outcome(S.FAILED)


def switch_to_initializing(current: S) -> Outcome:
    """INITIALIZING sits between DEPLOYING and RUNNING (Flink 1.13+)."""
    if current is S.DEPLOYING:
        return Outcome(S.INITIALIZING)
    return _unexpected_start(current, "INITIALIZING")


def switch_to_running(current: S) -> Outcome:
    """ES-6: a task reporting RUNNING it should not be running is cancelled."""
    if current in (S.DEPLOYING, S.INITIALIZING):
        return Outcome(S.RUNNING)
    return _unexpected_start(current, "RUNNING")


def _unexpected_start(current: S, reported: str) -> Outcome:
    if current in (S.FINISHED, S.CANCELED):
        return Outcome(current, refused=f"{reported} ignored in {current}")
    if current in (S.CANCELING, S.FAILED):
        return Outcome(current, cancel_task=True, refused=f"{reported} reported in {current}")
    return Outcome(
        S.FAILED, cancel_task=True, refused=f"{reported} reported while the attempt is {current}"
    )


def complete_cancelling(current: S) -> Outcome:
    """ES-7: a CANCELED report from a state nobody cancelled is a global failure."""
    if current in (S.CANCELING,) or current in DEPLOYED:
        return Outcome(S.CANCELED)
    if current is S.FAILED:
        return Outcome(current, refused="CANCELED ignored in FAILED")
    return Outcome(
        current,
        global_failure=f"Asynchronous race: Found {current} while expecting CANCELING",
    )


REPORTED = {
    S.INITIALIZING: switch_to_initializing,
    S.RUNNING: switch_to_running,
    S.FINISHED: mark_finished,
    S.CANCELED: complete_cancelling,
    S.FAILED: fail,
}


@functools.cache
def on_reported(current: S, reported: S) -> Outcome:
    """What a task's state report does to the attempt; states a task cannot report are refused."""
    move = REPORTED.get(reported)
    if move is None:
        return Outcome(current, refused=f"a task cannot report {reported}")
    return move(current)
