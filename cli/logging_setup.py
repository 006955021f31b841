"""Logging for the long-running commands: for operators, so one line per thing that happened
and none for the libraries' routine chatter (py4j's per-call INFO lines)."""

from __future__ import annotations

import logging

FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
QUIET = {"py4j": logging.WARNING, "jobledger.kafka": logging.WARNING}
"""Libraries' routine lines left out: py4j's per-call INFO, librdkafka's INFO (a client's
connections coming and going)."""


def configure_logging(level: int = logging.INFO) -> None:
    logging.basicConfig(level=level, format=FORMAT)
    for name, floor in QUIET.items():
        logging.getLogger(name).setLevel(floor)
