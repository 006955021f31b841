"""Schemathesis fuzzes the REST API `jobledger ui` serves over a golden log, from the OpenAPI
document it serves (its command line, run against the real server): whatever the path ids,
positions, methods and query strings, no answer is a server error, every status and content
type is one the document declares, and every body fits its schema.

Left out: `positive_data_acceptance` (a position of the right shape may name nothing in this
log, and that is a 400 by design)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ..support.golden_logs import LOGS
from ..support.web_server import ui_server

FUZZ_TIMEOUT_S = 600


def test_no_request_makes_the_server_fail(tmp_path):
    schemathesis = Path(sys.executable).with_name("schemathesis")
    with ui_server(LOGS / "wordcount-fail-once.avro") as url:
        run = subprocess.run(
            [str(schemathesis), "run", f"{url}openapi.json", "--checks", "all",
             "--exclude-checks", "positive_data_acceptance", "--max-examples", "30",
             "--seed", "1", "--no-color", "--report-dir", str(tmp_path)],
            capture_output=True, text=True, timeout=FUZZ_TIMEOUT_S, cwd=tmp_path,
        )  # fmt: skip
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
