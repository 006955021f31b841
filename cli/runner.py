"""`jobledger runner` and `jobledger demo wordcount`: the Spark side of the command line.

PySpark is imported only when one of these commands runs, so the rest of `jobledger` works
without the `spark` extra.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

from jobledger.services import kafka, signing
from jobledger.services.home import home

from .logging_setup import configure_logging
from .options import (
    CommandFailed,
    bootstrap_of,
    connection_options,
    metrics_option,
    positive_float,
    positive_int,
    prefix_of,
    serve_metrics,
    use_client_settings,
)


def add_runner_arguments(p: argparse.ArgumentParser, master_default: str | None) -> None:
    metrics_option(p)
    p.add_argument(
        "--task-executors", type=positive_int, default=1, help="TaskExecutors to register"
    )
    p.add_argument(
        "--slots", type=positive_int, help="slots per TaskExecutor (default: Spark's cores)"
    )
    p.add_argument(
        "--allow-module", action="append", default=[], metavar="MODULE",
        help="a module user operators may be loaded from (repeatable; default: none)",
    )  # fmt: skip
    p.add_argument(
        "--data-root", action="append", default=[], type=Path, metavar="DIR",
        help="a directory text_file sources and file sinks may use, subdirectories included "
        "(repeatable; default: none, so jobs read and write no files)",
    )  # fmt: skip
    p.add_argument(
        "--checkpoint", type=Path,
        help="Spark checkpoint directory (default: $JOBLEDGER_HOME/runner/PREFIX/RUNNER_ID)",
    )  # fmt: skip
    p.add_argument(
        "--checkpoint-mismatch", choices=("restart", "fail"), default="restart",
        help="when the checkpoint does not fit the log (another cluster, topics created again, "
        "offsets past their end): move it aside and start from the log's current end, or exit 1",
    )  # fmt: skip
    p.add_argument(
        "--runner-id", default="runner",
        help="the TaskExecutors are RUNNER_ID-0 .. RUNNER_ID-<N-1>; where the services check "
        "signatures, the keyring must state them as the signing principal's (`jobledger keys "
        "new PRINCIPAL --role runner --runner-id RUNNER_ID --task-executors N`)",
    )  # fmt: skip
    p.add_argument(
        "--heartbeat-interval", type=positive_float, default=10.0, metavar="SECONDS",
        help="how often the TaskExecutors beat (default: 10, Flink's heartbeat.interval; keep "
        "it well under the services' -D heartbeat.timeout, 50 s by default)",
    )  # fmt: skip
    p.add_argument(
        "--keyring", type=Path, default=os.environ.get(signing.KEYRING_ENV), metavar="FILE",
        help="act only on decisions (deployments, cancellations, releases, registration "
        "answers) a services key of this keyring signed, as a secured cluster needs (default: "
        "$JOBLEDGER_KEYRING; none: believe every one, which a secured runner warns of)",
    )  # fmt: skip
    p.add_argument(
        "--master", default=master_default,
        help=f"Spark master (default: {master_default or 'whatever spark-submit says'})",
    )  # fmt: skip


def add_parsers(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "runner",
        parents=[common],
        help="run deployed tasks with Spark Structured Streaming",
    )
    add_runner_arguments(p, "local[*]")
    p.set_defaults(func=cmd_runner)

    p = sub.add_parser("demo", help="end-to-end demos")
    demos = p.add_subparsers(dest="demo", required=True, metavar="DEMO")
    c = demos.add_parser(
        "wordcount", parents=[connection_options("else a fresh demo-XXXXXXXX. per run")],
        help="count the words of a file on the whole system (broker, services, Spark runner)",
    )  # fmt: skip
    c.add_argument("file", type=Path, help="a text file")
    c.add_argument(
        "--parallelism", type=positive_int, default=4, help="parallelism of both vertices"
    )
    c.add_argument(
        "--top", type=positive_int, default=10, help="how many of the top words to print"
    )
    c.add_argument(
        "--fail-once", action="store_true",
        help="the count operator fails on its first attempt; the job restarts and finishes",
    )  # fmt: skip
    c.add_argument(
        "--pipelined", action="store_true",
        help="deploy both vertices at once (EAGER) over a pipelined exchange",
    )  # fmt: skip
    c.add_argument(
        "--timeout", type=positive_float, default=300, help="seconds to wait for the job"
    )
    c.add_argument(
        "--master", default="local[*]",
        help="Spark master of the runner, e.g. spark://HOST:PORT (default: local[*])",
    )  # fmt: skip
    c.add_argument(
        "--timeline", type=Path, metavar="FILE",
        help="also draw the job's attempts per slot over time (.svg, .png or .pdf)",
    )  # fmt: skip
    c.add_argument(
        "--secure", action="store_true",
        help="on this home's secure broker (`broker --secure`, started if none runs), the "
        "services and the runner each a process on its own principal and signing key, the "
        "services checking every record's signature",
    )  # fmt: skip
    c.set_defaults(func=cmd_demo_wordcount)


def cmd_runner(args: argparse.Namespace) -> int:
    from jobledger.services.runner.checkpoint import CheckpointMismatch
    from jobledger.services.runner.runner import RunnerConfig, RunnerStopped, TaskRunner

    configure_logging()
    prefix = prefix_of(args)
    config = RunnerConfig(
        bootstrap=bootstrap_of(args),
        prefix=prefix,
        checkpoint=args.checkpoint or home() / "runner" / prefix.rstrip(".") / args.runner_id,
        runner_id=args.runner_id,
        task_executors=args.task_executors,
        slots=args.slots,
        allowed_modules=frozenset(args.allow_module),
        data_roots=tuple(args.data_root),
        master=args.master,
        heartbeat_interval_s=args.heartbeat_interval,
        checkpoint_mismatch=args.checkpoint_mismatch,
        client_properties=tuple(kafka.client_properties().items()),
        signing_key=key.pem() if (key := signing.signing_key()) else None,
        keyring=_keyring(args.keyring),
    )
    runner = TaskRunner(config)
    serve_metrics(args.metrics_port, runner.metrics.registry)
    signal.signal(signal.SIGTERM, lambda *_: runner.stop())
    try:
        runner.start()
        runner.await_termination()
    except KeyboardInterrupt:
        runner.stop()
    except CheckpointMismatch as exc:
        runner.stop()
        raise CommandFailed(
            f"{exc}; --checkpoint-mismatch restart moves it aside and starts from the log's "
            "current end"
        ) from None
    except RunnerStopped as exc:  # stopped on its own (or its query never started)
        runner.stop()
        raise CommandFailed(str(exc)) from None
    return 0


def _keyring(path: Path | None) -> signing.Keyring | None:
    """The keyring of `--keyring`, read before Spark starts; one that cannot be read stops
    the runner in one line (under spark-submit too, where `main` catches nothing else)."""
    try:
        return signing.Keyring.load(path) if path else None
    except signing.KeyFileError as exc:
        raise CommandFailed(str(exc)) from None


def cmd_demo_wordcount(args: argparse.Namespace) -> int:
    from .demo import Cluster, run
    from .demo_secure import SecuredCluster, secure_broker

    configure_logging(logging.WARNING)
    prefix = args.topic_prefix or os.environ.get(kafka.PREFIX_ENV)
    if args.secure:
        if args.bootstrap or args.client_config or args.client_property or args.signing_key:
            raise CommandFailed(
                "--secure runs on this home's secure broker, as each role's own principal: "
                "give no --bootstrap, -F, -X or --signing-key"
            )
        prefix = prefix or f"demo-{uuid.uuid4().hex[:8]}."
    return run(
        args.file, secure_broker(prefix) if args.secure else bootstrap_of(args), home() / "demo",
        prefix=prefix, parallelism=args.parallelism, fail_once=args.fail_once,
        pipelined=args.pipelined, top=args.top, timeout_s=args.timeout, master=args.master,
        picture=args.timeline, cluster_type=SecuredCluster if args.secure else Cluster,
    )  # fmt: skip


def submit_main(argv: Sequence[str] | None = None) -> int:
    """`spark-submit .../spark_submit.py [runner options]`: the runner under spark-submit."""
    parser = argparse.ArgumentParser(
        prog="spark_submit.py", parents=[connection_options()],
        description="the jobledger task runner, for spark-submit",
    )  # fmt: skip
    add_runner_arguments(parser, None)
    args = parser.parse_args(argv)
    try:
        use_client_settings(args)
        return cmd_runner(args)
    except CommandFailed as exc:
        print(f"jobledger runner: {exc}", file=sys.stderr)
        return 1
