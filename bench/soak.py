"""Soak: run the main demo N times on one broker and count what ended, what hung, what lied.

    python bench/soak.py --runs 20 [--fail-once] [--broker kafka|tansu] [--master URL]

Each run is `jobledger demo wordcount FILE` in a subprocess of its own (a fresh Spark, fresh
services, fresh topics) against one broker started here for the whole soak. A run is `ok` when
it exits 0 and `jobledger replay --verify` over its topics finds every recorded decision
re-derived and no derived decision missing; `hung` when the demo says its job did not end (or
the subprocess outlives its limit, which is then killed). Prints one line per run (exit code,
seconds, verdict) and last one JSON line: runs, ok, hung, failed, unverified, p50_s, max_s.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from jobledger.services import broker

ROOT = Path(__file__).resolve().parent.parent
TOPICS = re.compile(r"topics (\S+)\* on ")


def run_once(args: argparse.Namespace, env: dict[str, str]) -> dict[str, object]:
    command = [sys.executable, "-m", "jobledger.cli", "demo", "wordcount",
               str(args.file), "--timeout", str(args.job_timeout)]  # fmt: skip
    if args.fail_once:
        command.append("--fail-once")
    if args.master:
        command += ["--master", args.master]
    started = time.monotonic()
    try:
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=args.job_timeout + 120
        )
        code, out = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        code = None
        out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
    seconds = time.monotonic() - started
    hung = code is None or "did not end within" in out
    verified = verify(out, env)
    return {"code": code, "seconds": round(seconds, 1), "hung": hung, "verify": verified,
            "ok": code == 0 and verified == "clean", "tail": out[-3000:]}  # fmt: skip


def verify(out: str, env: dict[str, str]) -> str:
    """`clean`, the first divergence `replay --verify` reports, or why it could not run."""
    found = TOPICS.search(out)
    if found is None:
        return "no topics named in the demo's output"
    done = subprocess.run(
        [sys.executable, "-m", "jobledger.cli", "replay", "--verify",
         "--topic-prefix", found.group(1)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if done.returncode == 0:
        return "clean"
    return " ".join((done.stdout + done.stderr).strip().splitlines()[-2:])[:400]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--fail-once", action="store_true")
    parser.add_argument("--broker", choices=broker.KINDS, default="kafka")
    parser.add_argument("--bootstrap", help="an already running Kafka instead of --broker")
    parser.add_argument("--master", help="Spark master for the demo (default: local[*])")
    parser.add_argument("--file", type=Path, default=ROOT / "examples" / "words.txt")
    parser.add_argument("--job-timeout", type=float, default=180)
    parser.add_argument("--keep-going", action="store_true", help="do not stop at a hang")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="jobledger-soak-"))
    proc = None
    if args.bootstrap:
        bootstrap = args.bootstrap
    else:
        port = broker.free_port()
        proc = broker.spawn(args.broker, port, work, detach=False)
        bootstrap = f"{broker.LOOPBACK}:{port}"
    env = {**os.environ, "JOBLEDGER_BOOTSTRAP": bootstrap, "JOBLEDGER_HOME": str(work)}
    results = []
    try:
        for i in range(args.runs):
            result = run_once(args, env)
            results.append(result)
            verdict = "ok" if result["ok"] else ("HUNG" if result["hung"] else "FAILED")
            print(f"run {i + 1:>3}: exit {result['code']}, {result['seconds']:>6.1f} s, "
                  f"{verdict}, verify: {result['verify']}", flush=True)  # fmt: skip
            if not result["ok"]:
                log = work / f"run-{i + 1}.out"
                log.write_text(str(result["tail"]))
                print(f"          output: {log}", flush=True)
                if result["hung"] and not args.keep_going:
                    break
    finally:
        if proc is not None:
            broker.stop_child(proc, args.broker)
    seconds = [float(r["seconds"]) for r in results]
    summary = {
        "runs": len(results),
        "ok": sum(bool(r["ok"]) for r in results),
        "hung": sum(bool(r["hung"]) for r in results),
        "failed": sum(not r["ok"] and not r["hung"] for r in results),
        "unverified": sum(r["verify"] != "clean" for r in results),
        "p50_s": round(statistics.median(seconds), 1) if seconds else None,
        "max_s": round(max(seconds), 1) if seconds else None,
        "broker": args.bootstrap or args.broker,
        "fail_once": args.fail_once,
    }
    print(json.dumps(summary))
    return 0 if summary["ok"] == summary["runs"] == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
