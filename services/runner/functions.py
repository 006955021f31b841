"""Functions every runner may load for `map` / `flat_map` / `filter` / `key_by`, whatever its
allow-list says: small, pure, and part of jobledger itself.

Only the names in `__all__` can be loaded (as for any allowed module, see `operators.py`): a
function added here is callable by jobs only once it is listed there.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = ["identity", "non_empty", "words"]

_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)*")


def words(line: str) -> Iterator[str]:
    """The words of a line, lower-cased: letters with inner apostrophes (`don't`)."""
    for match in _WORD.finditer(line.lower()):
        yield match.group()


def non_empty(value: object) -> bool:
    return bool(value)


def identity(value: object) -> object:
    return value
