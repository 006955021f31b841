"""Where jobledger keeps things on this machine: one home for what it writes while it runs,
one cache for what it downloads once.

- home (`$JOBLEDGER_HOME`, default `~/.jobledger`): the local broker's record and data
  (`broker.json`, `broker/`), the light broker's binary (`bin/`), the runner's Spark
  checkpoints (`runner/`) and the demo's output (`demo/`);
- cache (`$JOBLEDGER_CACHE`, default `~/.cache/jobledger`): Apache Kafka's jars from Maven
  Central, kept apart so that a fresh home (CI makes one per run) does not download them again.
"""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "JOBLEDGER_HOME"
CACHE_ENV = "JOBLEDGER_CACHE"


def home() -> Path:
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".jobledger")


def cache() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "jobledger")
