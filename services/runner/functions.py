"""Functions every runner may load for `map` / `flat_map` / `filter` / `key_by`, whatever its
allow-list says: small, pure, and part of jobledger itself."""

from __future__ import annotations

import re
from collections.abc import Iterator

_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)*")


def words(line: str) -> Iterator[str]:
    """The words of a line, lower-cased: letters with inner apostrophes (`don't`)."""
    for match in _WORD.finditer(line.lower()):
        yield match.group()


def non_empty(value: object) -> bool:
    return bool(value)


def identity(value: object) -> object:
    return value
