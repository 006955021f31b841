"""A client in Go (`examples/go`: franz-go with Java's murmur2 partitioner, hamba/avro and the
published `.avsc` files, crypto/ed25519; no jobledger code) on `broker --secure`: it
registers a TaskExecutor, submits a job and runs its tasks to FINISHED, every record signed
and admitted; with a key the keyring does not hold, every record is dead-lettered."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from jobledger.schemas.catalog import SCHEMA_DIR

from ..support.secure_cluster import signed_run
from ..support.signed_clients import signed_client_runs

EXAMPLE = SCHEMA_DIR.parent / "examples" / "go"
GO = os.environ.get("GO") or shutil.which("go") or "/usr/local/go/bin/go"

pytestmark = [
    pytest.mark.broker,
    pytest.mark.skipif(not Path(GO).is_file(), reason="Go is not installed (`make goclient`)"),
]


@pytest.fixture(scope="module")
def go_client() -> list[str]:
    """The example built by `go build` (what `make goclient` does; cached by Go)."""
    binary = EXAMPLE / "goclient"
    subprocess.run([GO, "build", "-o", str(binary), "."], cwd=EXAMPLE, check=True, timeout=600)
    return [str(binary)]


def test_a_go_client_signs_what_it_writes_and_a_wrong_key_is_dead_lettered(
    go_client, secured, tmp_path
):
    with signed_run(secured, tmp_path, "goclient") as run:
        signed_client_runs(run, [*go_client, "--schemas", str(SCHEMA_DIR)], "go")
