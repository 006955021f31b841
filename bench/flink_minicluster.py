"""Flink's half of the end-to-end benchmark: submission-to-FINISHED time of jobs of P no-op tasks
on an already running Flink MiniCluster, measured with the jars of the `apache-flink` wheel.

    python bench/flink_minicluster.py 1 8 32 128 [--repeats 3]

That wheel lives in its own virtualenv (`.venv-flink`, from `make flink`; JOBLEDGER_FLINK_VENV
overrides the path) because its pins clash with PySpark's, so the Java driver,
`bench/flink/MiniClusterBench.java`, is compiled with javac and run in a JVM of its own. The
last line printed is one JSON object mapping P to median seconds.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = Path(__file__).resolve().parent / "flink" / "MiniClusterBench.java"
CACHE = Path.home() / ".cache" / "jobledger" / "flink-bench"
# flink-dist shades the slf4j API but binds no logger; with log4j on the classpath and no log4j
# configuration, Flink logs at ERROR only: silent on success, still loud when a job breaks.
LOG4J_JARS = ("log4j-api-*.jar", "log4j-core-*.jar", "log4j-slf4j-impl-*.jar")
JVM_OPTIONS = ("-Xmx512m", "-Dlog4j2.level=ERROR")
MEASUREMENT = re.compile(r"^P (\d+) (\d+(?:\.\d+)?)$")


def flink_venv() -> Path:
    """Where `make flink` put the apache-flink virtualenv, unless the environment says otherwise."""
    return Path(os.environ.get("JOBLEDGER_FLINK_VENV", ROOT / ".venv-flink"))


def flink_classpath() -> list[Path]:
    """flink-dist plus the log4j jars beside it, found by asking pyflink in its own virtualenv
    (the only sure way to learn where the wheel put its `lib` directory)."""
    python = flink_venv() / "bin" / "python"
    if not python.exists():
        raise RuntimeError(f"no apache-flink virtualenv: {python} is missing (run `make flink`)")
    lib = subprocess.run(
        [str(python), "-c",
         "import os, pyflink; print(os.path.join(os.path.dirname(pyflink.__file__), 'lib'))"],
        capture_output=True, text=True, timeout=60,
    ).stdout.strip()  # fmt: skip
    if not lib:
        raise RuntimeError(f"{python} cannot import pyflink (run `make flink`)")
    jars = []
    for pattern in ("flink-dist*.jar", *LOG4J_JARS):
        found = sorted(Path(lib).glob(pattern))
        if not found:
            raise RuntimeError(f"no {pattern} in {lib}")
        jars.append(found[0])
    return jars


def require_java() -> None:
    """Fail early and by name: a missing JDK otherwise shows up as a FileNotFoundError."""
    missing = [tool for tool in ("java", "javac") if shutil.which(tool) is None]
    if missing:
        raise RuntimeError(f"{' and '.join(missing)} not on PATH (a JDK 17 is needed)")


def compiled_classes(flink_dist: Path) -> Path:
    """The driver's class files, compiled once per (driver source, flink-dist jar) pair so that
    repeated benchmark runs skip javac and a Flink upgrade or source edit recompiles."""
    key = hashlib.sha256()
    key.update(SOURCE.read_bytes())
    key.update(f"{flink_dist.resolve()}:{flink_dist.stat().st_mtime_ns}".encode())
    target = CACHE / key.hexdigest()[:16]
    if target.is_dir():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    # Compile beside the target and rename, so a concurrent or interrupted run never sees a
    # half-written directory under the final name.
    staging = Path(tempfile.mkdtemp(dir=CACHE, prefix="tmp-"))
    try:
        subprocess.run(
            ["javac", "-cp", str(flink_dist), "-d", str(staging), str(SOURCE)],
            check=True, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        staging.rename(target)
    except subprocess.CalledProcessError as error:
        raise RuntimeError(f"javac failed on {SOURCE}:\n{error.stderr}") from error
    except OSError:
        if not target.is_dir():  # lost a race to another run: its result is just as good
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def measure_flink(parallelisms: list[int], repeats: int = 3) -> dict[int, float]:
    """Median seconds from submission to FINISHED of a job of P no-op tasks, for each P, on one
    MiniCluster (1 TaskManager, max(P) slots) started before any timing and warmed up with one
    job each of P=1 and the largest P, so only the steady-state control-plane path is timed."""
    if not parallelisms or any(p < 1 for p in parallelisms):
        raise ValueError(f"parallelisms must be a non-empty list of positive ints: {parallelisms}")
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1: {repeats}")
    require_java()
    jars = flink_classpath()
    classes = compiled_classes(jars[0])
    wanted = list(dict.fromkeys(parallelisms))
    classpath = os.pathsep.join(str(path) for path in (classes, *jars))
    run = subprocess.run(
        ["java", *JVM_OPTIONS, "-cp", classpath, "MiniClusterBench", str(repeats),
         *map(str, wanted)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if run.returncode != 0:
        raise RuntimeError(f"MiniClusterBench exited {run.returncode}:\n{run.stderr[-4000:]}")
    # log4j's default console appender also writes to stdout, so keep only measurement lines.
    samples: dict[int, list[float]] = {p: [] for p in wanted}
    for line in run.stdout.splitlines():
        if match := MEASUREMENT.match(line.strip()):
            samples[int(match[1])].append(float(match[2]))
    short = {p: len(times) for p, times in samples.items() if len(times) != repeats}
    if short:
        raise RuntimeError(f"expected {repeats} timings per P, got {short}:\n{run.stdout}")
    return {p: statistics.median(times) for p, times in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parallelisms", nargs="+", type=int, metavar="P")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    result = measure_flink(args.parallelisms, args.repeats)
    print(json.dumps({str(p): seconds for p, seconds in result.items()}))


if __name__ == "__main__":
    main()
