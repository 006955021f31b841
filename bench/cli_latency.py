"""Command-line latency: how long a person waits for `jobledger --version`, `--help`, `job
list`, `job show` and `job wait` on a small log, beside `kcat -L` (a metadata request from a
fresh process: the least any Kafka command line can do) on the same broker.

    python bench/cli_latency.py [--repeats 5] [--bootstrap HOST:PORT]

Each command runs in a fresh process, `--repeats` rounds interleaved, and its figure is the
median wall time; the ratio is to the baseline's median of the same rounds (this machine is
shared and noisy). The log is one submitted job with no services running (its records and
nothing else); `job wait` is given `--timeout 0.1`, so it reads the log, finds the job still
waiting, says for what and exits 124: the figure includes that 0.1 s. Without `kcat` on PATH
(Debian: apt-get install kcat), the baseline is a bare confluent-kafka `list_topics` in a
fresh Python process. Starts its own Apache Kafka unless `--bootstrap`. The last line is one
JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from jobledger.services.local import broker

JOBGRAPH = Path(__file__).resolve().parents[1] / "examples" / "jobgraph.json"
BARE_LIST_TOPICS = (
    "import sys; from confluent_kafka.admin import AdminClient; "
    "AdminClient({'bootstrap.servers': sys.argv[1]}).list_topics(timeout=10)"
)


def baseline(bootstrap: str) -> tuple[str, list[str]]:
    """The command every ratio is against: kcat -L, else a bare list_topics."""
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat:
        return "kcat -L", [kcat, "-L", "-b", bootstrap, "-m", "10"]
    return "list_topics (confluent-kafka)", [sys.executable, "-c", BARE_LIST_TOPICS, bootstrap]


def timed(command: list[str], env: dict[str, str], ok: tuple[int, ...] = (0,)) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    seconds = time.perf_counter() - started
    if done.returncode not in ok:
        raise SystemExit(f"{command} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return seconds


def measure(bootstrap: str, repeats: int) -> dict[str, object]:
    cli = [sys.executable, "-m", "jobledger.cli"]
    prefix = f"bench-cli-{uuid.uuid4().hex[:8]}."
    with tempfile.TemporaryDirectory() as home:
        env = {
            **os.environ, "JOBLEDGER_BOOTSTRAP": bootstrap, "JOBLEDGER_TOPIC_PREFIX": prefix,
            "JOBLEDGER_HOME": home,
        }  # fmt: skip
        subprocess.run([*cli, "topics", "create"], env=env, check=True, capture_output=True)
        job = subprocess.run(
            [*cli, "job", "submit", str(JOBGRAPH)], env=env, check=True, capture_output=True,
            text=True,
        ).stdout.strip()  # fmt: skip
        name, base = baseline(bootstrap)
        commands: dict[str, tuple[list[str], tuple[int, ...]]] = {
            name: (base, (0,)),
            "jobledger --version": ([*cli, "--version"], (0,)),
            "jobledger --help": ([*cli, "--help"], (0,)),
            "job list": ([*cli, "job", "list"], (0,)),
            "job show JOB": ([*cli, "job", "show", job], (0,)),
            "job wait JOB --timeout 0.1": ([*cli, "job", "wait", job, "--timeout", "0.1"], (124,)),
        }
        rounds: dict[str, list[float]] = {label: [] for label in commands}
        for _ in range(repeats):
            for label, (command, ok) in commands.items():
                rounds[label].append(timed(command, env, ok))
    medians = {label: statistics.median(times) for label, times in rounds.items()}
    floor = medians[name]
    print(f"{'command':32} {'median s':>9} {'min s':>7} {'max s':>7} {'x ' + name:>12}")
    for label, times in rounds.items():
        print(f"{label:32} {medians[label]:9.3f} {min(times):7.3f} {max(times):7.3f} "
              f"{medians[label] / floor:12.1f}")  # fmt: skip
    return {
        "baseline": name,
        "repeats": repeats,
        "median_s": {label: round(value, 3) for label, value in medians.items()},
        "ratio": {label: round(value / floor, 2) for label, value in medians.items()},
        "load_1m": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--bootstrap", help="an existing broker (default: start one here)")
    args = parser.parse_args()
    if args.bootstrap:
        print(json.dumps(measure(args.bootstrap, args.repeats)))
        return
    port = broker.free_port()
    with tempfile.TemporaryDirectory() as workdir:
        proc = broker.spawn(port, Path(workdir), detach=False)
        try:
            result = measure(f"{broker.LOOPBACK}:{port}", args.repeats)
        finally:
            broker.stop_child(proc)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
