"""How the partition host stops: cleanly when asked, or halted with one line for the operator
when going on could cost a wrong or lost decision."""

from __future__ import annotations


class StopRequested(Exception):
    """A stop was asked for while a rebuild waited on the broker: a clean stop, not a fault."""


class ServiceHalted(RuntimeError):
    """The service cannot go on without risking a wrong or lost decision; the message says
    what happened and what the operator can do. The process exits non-zero."""


def topic_gone(what: str) -> ServiceHalted:
    return ServiceHalted(
        f"{what}: the decisions it held are lost. Re-create the cluster's topics (`jobledger "
        "topics create`, a new prefix for a clean start) and start the service again"
    )
