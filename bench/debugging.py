"""Debugging benchmark: one question (`jobledger history JOB`, by default) asked of a generated
export file, answered by reading the whole file (`--no-index`) and by the log's index
(projections/log/log_index.py) once it is built; checked equal, timed, and the ratio printed.

    python bench/debugging.py --events 1000000 [--question "slots --at count:500000"]

The log is bench/replay.py's (1,000 TaskExecutors, waves of jobs through slots, deployments,
every task state, some failures and restarts), written as `jobledger export` writes it. The
last line is one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import resource
import shlex
import sys
import tempfile
import time
from pathlib import Path

import fastavro.write
from fastavro import parse_schema
from realistic_log import PARTITIONS, generate

from jobledger.cli import main as main_cli
from jobledger.projections.log.log_file import export_schema
from jobledger.projections.log.log_index import open_index
from jobledger.schemas import Event
from jobledger.schemas.topics import TopicRole
from jobledger.services.control.partitioning import partition_of


def write_log(path: Path, events: int) -> int:
    """A generated log of `events` records as an export file (offsets counted per partition,
    each record's timestamp its event time); returns how many were written."""
    offsets: dict[tuple[TopicRole, int], int] = {}
    with open(path, "wb") as out:
        export = fastavro.write.Writer(out, parse_schema(export_schema()), codec="deflate")

        def sink(batch: list[Event]) -> None:
            for event in batch:
                role, key = event.route()
                partition = partition_of(
                    key, PARTITIONS if role is not TopicRole.RESOURCE_MANAGER else 1
                )
                offset = offsets.get((role, partition), 0)
                offsets[(role, partition)] = offset + 1
                export.write({
                    "role": role.value, "partition": partition, "offset": offset,
                    "timestamp": event.event_time,
                    "event": (event.full_name(), event.model_dump()),
                })  # fmt: skip

        count = generate(events, sink)
        export.flush()
    return count


def ask(question: list[str]) -> tuple[str, float]:
    """The answer to a `jobledger` command line, and the wall-clock seconds it took."""
    out = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main_cli(question)
    if code != 0:
        raise SystemExit(f"{' '.join(question)}: exit {code}")
    return out.getvalue(), time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--file", type=Path, help="an export to ask (default: a generated one)")
    parser.add_argument("--write", type=Path, help="only write the generated log to this file")
    parser.add_argument(
        "--question", default="history job-00001",
        help="the command line to ask (default: %(default)s)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.write:
        print(json.dumps({"events": write_log(args.write, args.events), "file": str(args.write)}))
        return 0
    with tempfile.TemporaryDirectory(prefix="jobledger-bench-debugging-") as scratch:
        path = args.file or Path(scratch) / "log.avro"
        if args.file is None:
            write_log(path, args.events)
        question = [*shlex.split(args.question), "--file", str(path)]
        whole, whole_s = ask([*question, "--no-index"])
        built = time.perf_counter()
        index = open_index(path, lambda items, _what, _total: items, print)
        if index is None:
            raise SystemExit(f"no index of {path} could be kept")
        build_s = time.perf_counter() - built
        indexed, indexed_s = ask(question)
        if indexed != whole:
            raise SystemExit("the indexed answer differs from the one read from the whole file")
        result = {
            "events": index.count,
            "question": args.question,
            "whole_file_s": round(whole_s, 2),
            "index_build_s": round(build_s, 2),
            "indexed_s": round(indexed_s, 2),
            "ratio_whole_indexed": round(whole_s / indexed_s, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        }
    print(f"{args.question}: {whole_s:.2f} s reading the whole file, {indexed_s:.2f} s from "
          f"the index (built once in {build_s:.1f} s)")  # fmt: skip
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
