"""jobledger's key groups against Flink's own KeyGroupRangeAssignment, run from the jars the
`apache-flink` wheel ships (installed in its own virtualenv, `.venv-flink`, by `make test`).
Skips where Java or that virtualenv is missing."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from jobledger.services.control.key_groups import (
    assign_key_to_parallel_operator,
    assign_to_key_group,
)

ROOT = Path(__file__).resolve().parents[2]
FLINK_PYTHON = Path(os.environ.get("JOBLEDGER_FLINK_VENV", ROOT / ".venv-flink")) / "bin/python"
SOURCE = Path(__file__).resolve().parents[1] / "flink" / "KeyGroupVectors.java"


def flink_dist_jar() -> Path | None:
    if not FLINK_PYTHON.exists():
        return None
    lib = subprocess.run(
        [str(FLINK_PYTHON), "-c",
         "import os, pyflink; print(os.path.join(os.path.dirname(pyflink.__file__), 'lib'))"],
        capture_output=True, text=True, timeout=60,
    ).stdout.strip()  # fmt: skip
    jars = sorted(Path(lib).glob("flink-dist*.jar")) if lib else []
    return jars[0] if jars else None


def keys(n: int) -> list[object]:
    rng = random.Random(20261122)
    alphabet = "abcxyzAZ09 _-é€中𝄞"
    strings = ["", "a", "hello", "flink"] + [
        "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) for _ in range(n - 4)
    ]
    ints = [0, 1, -1, 2**31 - 1, -(2**31)] + [
        rng.randint(-(2**31), 2**31 - 1) for _ in range(n - 5)
    ]
    return strings + ints


@pytest.mark.parametrize(("max_parallelism", "parallelism"), [(128, 4), (4096, 37)])
def test_key_groups_match_flinks_on_10000_string_and_integer_keys(
    tmp_path, max_parallelism, parallelism
):
    if shutil.which("javac") is None or shutil.which("java") is None:
        pytest.skip("no Java on this machine")
    jar = flink_dist_jar()
    if jar is None:
        pytest.skip(f"no apache-flink in {FLINK_PYTHON.parent.parent} (run `make flink`)")
    subprocess.run(
        ["javac", "-cp", str(jar), "-d", str(tmp_path), str(SOURCE)], check=True, timeout=120
    )
    sample = keys(5_000)
    lines = "\n".join(f"s:{k}" if isinstance(k, str) else f"i:{k}" for k in sample) + "\n"
    result = subprocess.run(
        ["java", "-cp", f"{tmp_path}{os.pathsep}{jar}", "KeyGroupVectors",
         str(max_parallelism), str(parallelism)],
        input=lines.encode(), capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    flink = [tuple(map(int, row.split())) for row in result.stdout.decode().splitlines()]
    ours = [
        (assign_to_key_group(k, max_parallelism),
         assign_key_to_parallel_operator(k, max_parallelism, parallelism))
        for k in sample
    ]  # fmt: skip
    assert len(flink) == len(sample) == 10_000
    mismatches = [(k, f, o) for k, f, o in zip(sample, flink, ours, strict=True) if f != o]
    assert mismatches == []
