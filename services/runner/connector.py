"""Spark's Kafka connector for a standalone cluster, resolved once and remembered.

Given `spark.jars.packages`, Spark resolves the packages with Ivy at every start and Ivy
prints its whole report to the runner's stderr (about 40 lines when everything is cached, a
hundred on the first download), with no setting that quiets it. So the runner resolves the
connector once, in a `spark-submit` of its own whose output it keeps (`print_spark_jars.py`
prints the jars Spark resolved), remembers those jars in jobledger's cache, and starts every
session with them as `spark.jars`: the jars Spark itself would have fetched, nothing printed,
and no network needed after the first time.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyspark

from ..home import cache

RESOLVE_S = 600.0
"""Bound on the one resolution: a first download of the connector and its dependencies."""
MARK = "jobledger-spark-jars="
SCRIPT = Path(__file__).with_name("print_spark_jars.py")


class ConnectorUnresolved(RuntimeError):
    """Ivy could not resolve the connector; the message says what it could not find."""


def connector_jars(package: str) -> list[str]:
    """The jars of Maven package `package` and its dependencies, as Spark resolves them:
    remembered from an earlier resolution while every jar is still there, else resolved now."""
    listing = cache() / "spark-packages" / f"{package.replace(':', '_')}.jars"
    if listing.is_file():
        jars = listing.read_text().split()
        if jars and all(Path(jar).is_file() for jar in jars):
            return jars
    jars = resolve(package)
    listing.parent.mkdir(parents=True, exist_ok=True)
    staging = listing.with_name(f"{listing.name}.{uuid.uuid4().hex[:8]}")
    staging.write_text("\n".join(jars) + "\n")
    staging.replace(listing)  # whole or absent: two runners starting at once agree
    return jars


def resolve(package: str) -> list[str]:
    """Resolve `package` through `spark-submit --packages` (Spark's own Ivy settings:
    Maven Central, the local Maven repository, Spark's exclusions), its report kept."""
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    python = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    try:
        done = subprocess.run(
            [str(submit), "--packages", package, str(SCRIPT)], capture_output=True, text=True,
            env={**os.environ, **python}, timeout=RESOLVE_S, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise ConnectorUnresolved(
            f"Ivy did not resolve {package} within {RESOLVE_S:.0f} s (no way to reach Maven "
            "Central?)"
        ) from None
    printed = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
    if done.returncode != 0 or not printed:
        raise ConnectorUnresolved(
            f"Spark did not start: Ivy could not resolve spark.jars.packages={package} "
            f"({_problem(done.stderr)})"
        )
    return [_path(uri) for uri in printed[-1].removeprefix(MARK).split(",") if uri]


def _problem(report: str) -> str:
    """What Ivy's report says went wrong, in one line: its unresolved dependencies, else its
    last line."""
    lines = [line.strip(" \t:") for line in report.splitlines() if line.strip(" \t:")]
    missing = [line for line in lines if line.endswith("not found") and "#" in line]
    return "; ".join(dict.fromkeys(missing)) or (lines[-1] if lines else "no output")


def _path(uri: str) -> str:
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme == "file" else uri
