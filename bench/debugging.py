"""Debugging benchmark: one question (`jobledger history JOB`, by default) asked of a generated
export file, answered by reading the whole file as the unindexed path does, and by the log's
index (projections/log_index.py) once it is built; checked equal, timed, and the ratio printed.

    python bench/debugging.py --events 1000000 [--file LOG.avro] [--keep]

The log is bench/replay.py's (1,000 TaskExecutors, waves of jobs through slots, deployments,
every task state, some failures and restarts), written as `jobledger export` writes it. The
last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import fastavro.write
from fastavro import parse_schema
from replay import PARTITIONS, generate

from jobledger.projections.log_file import export_schema
from jobledger.schemas import Event
from jobledger.schemas.topics import TopicRole
from jobledger.services.partitioning import partition_of


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--write", type=Path, help="only write the generated log to this file")
    args = parser.parse_args()
    if args.write:
        print(json.dumps({"events": write_log(args.write, args.events), "file": str(args.write)}))
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
