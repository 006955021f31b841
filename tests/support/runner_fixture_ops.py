"""A user-operator module for the runner's allow-list tests: one exported function, and the
kinds of names an allowed module holds that jobs must never reach, even when listed."""

from __future__ import annotations

from json import dumps as dumped  # an imported Python function: never loadable, though listed
from os import system as x  # an imported builtin: never loadable, though listed

__all__ = ["Listed", "double", "dumped", "x"]


def double(value: int) -> int:
    return 2 * value


def unlisted(value: int) -> int:
    return value


def _private(value: int) -> int:
    return value


class Listed:
    """A class, listed: not a function."""

    def __init__(self, value: int) -> None:
        self.value = value
