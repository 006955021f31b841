"""The `jobledger` command line: one entry point, a subcommand per job to be done, and one
place that turns every expected failure into one line saying what to do."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

from confluent_kafka import KafkaException

from jobledger.projections.debugging.explain import UnknownTarget
from jobledger.projections.debugging.history import UnknownJob
from jobledger.projections.log.log_file import ExportUnreadable
from jobledger.projections.log.positions import PositionError
from jobledger.services.client.dispatcher import JobGraphRefused
from jobledger.services.host.parallel import ReplayWorkerFailed
from jobledger.services.kafka import BrokerUnreachable
from jobledger.services.kafka_topics import TopicNotFound
from jobledger.services.local.loopback import BrokerError
from jobledger.services.runner.kv_state import KvStateLookupError
from jobledger.services.signing import KeyFileError

from . import (
    broker,
    cluster,
    debug,
    events,
    job,
    job_views,
    keys,
    kvstate,
    replay,
    runner,
    services,
    tail,
    ui,
)
from .options import CommandFailed, connection_options, use_client_settings


def _version() -> str:
    try:
        return version("jobledger")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jobledger",
        description="Flink's cluster control plane as an event-sourced state machine over Kafka.",
    )
    parser.add_argument("--version", action="version", version=f"jobledger {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = connection_options()
    broker.add_parsers(sub, common)
    events.add_parsers(sub, common)
    tail.add_parser(sub, common)
    services.add_parsers(sub, common)
    replay.add_parsers(sub, common)
    debug.add_parsers(sub, common)
    job_views.add_parsers(job.add_parsers(sub, common), common)
    kvstate.add_parsers(sub, common)
    keys.add_parsers(sub)
    runner.add_parsers(sub, common)
    cluster.add_parsers(sub, common)
    ui.add_parsers(sub, common)
    _show_defaults(parser)
    return parser


class _DefaultsShown(argparse.HelpFormatter):
    """Help that ends an option's line with its default, where it has one the help text
    does not already name."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default in (None, False, [], argparse.SUPPRESS) or "default" in text:
            return text
        return f"{text} (default: %(default)s)"


def _show_defaults(parser: argparse.ArgumentParser) -> None:
    """Every command's --help shows its defaults."""
    parser.formatter_class = _DefaultsShown
    for action in parser._subparsers._group_actions if parser._subparsers else []:
        for child in getattr(action, "choices", {}).values():
            _show_defaults(child)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        use_client_settings(args)
        return args.func(args)
    except argparse.ArgumentTypeError as exc:
        getattr(args, "parser", parser).error(str(exc))
    except BrokenPipeError:
        return _reader_went_away()
    except (BrokerError, BrokerUnreachable) as exc:
        return _fail(str(exc), UNAVAILABLE)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else exc
        return _fail(f"Kafka error: {error.str() if hasattr(error, 'str') else error}", UNAVAILABLE)
    except (
        ExportUnreadable, PositionError, ReplayWorkerFailed, TopicNotFound, UnknownJob,
        UnknownTarget, TimeoutError, CommandFailed, JobGraphRefused, KvStateLookupError,
        KeyFileError,
    ) as exc:  # fmt: skip
        return _fail(str(exc))
    except OSError as exc:
        return _fail(f"{exc.filename or ''}{': ' if exc.filename else ''}{exc.strerror or exc}")
    except KeyboardInterrupt:
        return 130
    return 0


UNAVAILABLE = 69
"""Exit status when the broker cannot be reached or refuses (sysexits' EX_UNAVAILABLE): apart
from 1 (the command failed: a missing file, an unknown topic) and 2 (a usage error)."""


def _fail(message: str, status: int = 1) -> int:
    print(f"jobledger: {message}", file=sys.stderr)
    return status


def _reader_went_away() -> int:
    """`jobledger tail ... | head`: the reader has what it wanted. Point stdout at /dev/null so
    the interpreter's final flush does not fail again (the Python docs' recipe)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 0
