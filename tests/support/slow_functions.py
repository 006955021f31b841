"""User functions for the runner-loss tests (`tests/runner/test_runner_loss.py`): the word count's
split, slowed down per line, so that a source task is still RUNNING when its runner is killed
or paused. The runner loads them only from an allow-listed module (`--allow-module
tests.support.slow_functions`), whose Python workers import it from the repository's root.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from jobledger.services.runner.functions import words

__all__ = ["slow_words"]

SECONDS_PER_LINE = 0.05


def slow_words(line: str) -> Iterator[str]:
    """`functions.words`, after a pause: the counts stay those of a plain Python count."""
    time.sleep(SECONDS_PER_LINE)
    return words(line)
