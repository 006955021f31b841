"""`jobledger cluster`: a Spark standalone cluster on this machine for `jobledger runner
--master spark://...` (services/local/spark_standalone.py)."""

from __future__ import annotations

import argparse
import sys

from jobledger.services.local import spark_standalone

from .options import CommandFailed, positive_int

Subparsers = argparse._SubParsersAction


def add_parsers(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "cluster", help="a Spark standalone master and workers on loopback, for runner --master"
    )
    actions = p.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")
    c = actions.add_parser("start", help="start a master and workers in the background")
    c.add_argument("--workers", type=positive_int, default=2, help="worker daemons")
    c.add_argument("--cores", type=positive_int, default=1, help="cores each worker offers")
    c.add_argument("--memory", default="2g", help="memory each worker offers its executors")
    c.set_defaults(func=cmd_start)
    c = actions.add_parser("status", help="say whether one runs, and its master URL")
    c.set_defaults(func=cmd_status)
    c = actions.add_parser("stop", help="stop the workers, then the master")
    c.set_defaults(func=cmd_stop)


def cmd_start(args: argparse.Namespace) -> int:
    running = spark_standalone.read_record()
    if running is not None:
        raise CommandFailed(f"{running.describe()} already; `jobledger cluster stop` first")
    try:
        cluster = spark_standalone.start_detached(args.workers, args.cores, args.memory)
    except spark_standalone.ClusterError as exc:
        raise CommandFailed(str(exc)) from None
    print(cluster.describe())
    print(f"jobledger runner --master {cluster.master_url} ...   # runs its tasks there",
          file=sys.stderr)  # fmt: skip
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    cluster = spark_standalone.read_record()
    print(cluster.describe() if cluster else "not running")
    return 0 if cluster else 1


def cmd_stop(args: argparse.Namespace) -> int:
    stopped = spark_standalone.stop()
    print(f"stopped {stopped.master_url}" if stopped else "no Spark cluster was running")
    return 0
