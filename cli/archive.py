"""`jobledger archive`: each closed job's story written to an archive location, and `archive
list`, what is there. Every debugging command reads an archived job with `--archive`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from jobledger.projections.log import archive
from jobledger.projections.log.positions import log_order
from jobledger.services import home

from . import log_source
from .options import registry_option

Subparsers = argparse._SubParsersAction

LOCATION_ENV = "JOBLEDGER_ARCHIVE"


def default_location() -> str:
    """`$JOBLEDGER_ARCHIVE`, else the folder `archive` under the jobledger home."""
    return os.environ.get(LOCATION_ENV) or str(home.home() / "archive")


def location_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--to", dest="location", default=None, metavar="LOCATION",
        help=f"a folder or any fsspec URL (s3://bucket/jobs, ...); default ${LOCATION_ENV}, "
        "else $JOBLEDGER_HOME/archive",
    )  # fmt: skip


def add_parsers(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "archive", parents=[common],
        help="write each finished, failed or cancelled job's story to an archive location",
    )  # fmt: skip
    location_option(p)
    p.add_argument(
        "--job", action="append", default=[], metavar="JOB",
        help="archive this closed job (again, if it is there already); default: every closed "
        "job not archived yet",
    )  # fmt: skip
    p.add_argument("--file", type=Path, help="an exported .avro file instead of the broker")
    registry_option(p)
    actions = p.add_subparsers(dest="archive_command", metavar="ACTION")
    listed = actions.add_parser("list", help="the jobs archived in the location and their files")
    location_option(listed)
    p.set_defaults(func=cmd_archive, parser=p)


def cmd_archive(args: argparse.Namespace) -> int:
    location = args.location or default_location()
    if args.archive_command == "list":
        for job_id, url in archive.archived(location).items():
            print(f"{job_id}\t{url}")
        return 0
    ordered = log_order(log_source.log_records(args, args.file, provenance=True))
    closed = archive.closed_jobs(ordered)
    unknown = [job for job in args.job if job not in closed]
    if unknown:
        print(f"jobledger: not archived: {', '.join(unknown)}: the log holds no finished, "
              "failed or cancelled status of it", file=sys.stderr)  # fmt: skip
    done = archive.archived(location)
    wanted = [job for job in args.job if job in closed] or (
        [] if args.job else [job for job in closed if job not in done]
    )  # fmt: skip
    for job_id in wanted:
        url, count = archive.write_archive(ordered, job_id, location)
        print(f"{job_id}\t{count} records\t{url}")
    return 1 if unknown else 0
