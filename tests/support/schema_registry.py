"""A real schema registry for the Confluent wire-format tests: Apicurio Registry, whose
Confluent-compatible API (`/apis/ccompat/v7`) confluent-kafka's client speaks. `make registry`
installs it from Maven Central; it runs on Java 17 with its in-memory storage."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from jobledger.services.local import broker

from .processes import stop_process

VERSION = "3.0.9"
HOME_ENV = "JOBLEDGER_APICURIO_HOME"


def runner_jar() -> Path:
    home = os.environ.get(HOME_ENV) or Path.home() / ".cache" / "jobledger" / (
        f"apicurio-registry-{VERSION}"
    )
    return Path(home) / f"apicurio-registry-app-{VERSION}-runner.jar"


def missing() -> str | None:
    """Why the registry cannot run here, or None."""
    if shutil.which("java") is None:
        return "java is not on PATH"
    if not runner_jar().exists():
        return f"no {runner_jar()} (run `make registry`)"
    return None


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/subjects", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def run_registry(log_path: Path, limit_s: float = 120.0) -> Iterator[str]:
    """Start the registry on a free loopback port; yields its Confluent-compatible URL."""
    port = broker.free_port()
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             f"-Dquarkus.http.host={broker.LOOPBACK}", f"-Dquarkus.http.port={port}",
             "-jar", str(runner_jar())],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://{broker.LOOPBACK}:{port}/apis/ccompat/v7"
    try:
        deadline = time.monotonic() + limit_s
        while not _answers(url):
            if process.poll() is not None:
                raise RuntimeError(f"the registry exited with {process.returncode}: {log_path}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the registry did not answer in {limit_s:.0f} s: {log_path}")
            time.sleep(0.25)
        yield url
    finally:
        stop_process(process, 15)
