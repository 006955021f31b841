"""The `jobledger` command line: one entry point, a subcommand per job to be done, and one
place that turns every expected failure into one line saying what to do."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

COMMANDS: dict[str, tuple[str, str]] = {
    "broker": ("broker", "run Apache Kafka (KRaft, one node) on loopback"),
    "topics": ("broker", "manage the cluster's topics"),
    "produce": ("events", "append JSON events (one per line) to their topics"),
    "schemas": ("events", "the Avro event catalog"),
    "tail": ("tail", "print a topic's events (kcat-style offsets, partitions and filters)"),
    "services": ("services", "the reducers as Kafka services"),
    "export": ("replay", "write the log to an Avro container file"),
    "replay": ("replay", "rebuild every reducer's state from the log"),
    "checkpoint": ("audit", "write signed checkpoints (Merkle tree heads) of every partition "
                   "of the log"),
    "audit": ("audit", "check an export offline: signatures, checkpoints, decisions"),
    "history": ("debug", "every event of one job across all topics, in log order, each with its "
                "cause"),
    "explain": ("debug", "why: an event's causes, a task's story (JOB/VERTEX[SUBTASK]#ATTEMPT), "
                "an allocation's or a TaskExecutor's events"),
    "timeline": ("debug", "a job's attempts per slot over time: lines, JSON, or a Gantt chart "
                 "(-o FILE.svg)"),
    "slots": ("debug", "every job's pending slot requests and why nothing satisfies them; "
              "every slot"),
    "diff": ("debug", "what changed in every reducer's state between two points"),
    "job": ("job", "submit, list, show, cancel and wait for jobs, as Flink's CLI does"),
    "kvstate": ("kvstate", "queryable state of running and finished jobs"),
    "keys": ("keys", "signing keys and the services' keyring"),
    "runner": ("runner", "run deployed tasks with Spark Structured Streaming"),
    "demo": ("runner", "end-to-end demos"),
    "cluster": ("cluster", "a Spark standalone master and workers on loopback, for runner "
                "--master"),
    "ui": ("ui", "Flink's REST API and a web dashboard over the log, with a time slider"),
    "archive": ("archive", "write each finished, failed or cancelled job's story to an archive "
                "location"),
}  # fmt: skip
"""Every command: the module of this package that defines it, and its line in `--help`.
A command's module is imported only when that command runs (PySpark, confluent-kafka, the
event models take a second to import): `--version`, `--help` and a command's own parser pay
for nothing else. `tests/cli/test_cli.py` holds each line equal to its module's."""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("jobledger")
    except PackageNotFoundError:
        return "unknown (not installed)"


class _Version(argparse.Action):
    """`--version`, looked up only when asked (the package metadata is a read of its own)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(f"jobledger {_version()}")
        parser.exit()


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; given `command` (the first word of the arguments, "" for
    none), that command's parser in full and every other one as its name and help line."""
    parser = argparse.ArgumentParser(
        prog="jobledger",
        description="Flink's cluster control plane as an event-sourced state machine over Kafka.",
    )
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    if command is None:
        wanted = list(dict.fromkeys(module for module, _ in COMMANDS.values()))
    else:
        wanted = [COMMANDS[command][0]] if command in COMMANDS else []
    if wanted:
        from .options import connection_options

        common = connection_options()
        for module in wanted:
            _register(module, sub, common)
    for name, (_, help_line) in COMMANDS.items():
        if name not in sub.choices:
            sub.add_parser(name, help=help_line)
    _show_defaults(parser)
    return parser


def _register(
    module: str, sub: argparse._SubParsersAction, common: argparse.ArgumentParser
) -> None:
    registered = importlib.import_module(f"{__package__}.{module}")
    if module == "job":
        views = importlib.import_module(f"{__package__}.job_views")
        views.add_parsers(registered.add_parsers(sub, common), common)
    elif module == "keys":
        registered.add_parsers(sub)
    elif module == "tail":
        registered.add_parser(sub, common)
    else:
        registered.add_parsers(sub, common)


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
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(next((word for word in words if not word.startswith("-")), ""))
    args = parser.parse_args(words)
    try:
        from .options import use_client_settings

        use_client_settings(args)
        if getattr(args, "archive", None) is not None:
            from .log_source import use_archive

            use_archive(args)
        return args.func(args)
    except argparse.ArgumentTypeError as exc:
        getattr(args, "parser", parser).error(str(exc))
    except BrokenPipeError:
        return _reader_went_away()
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if _one_of(exc, UNREACHABLE):
            return _fail(_kafka_error(exc), UNAVAILABLE)
        if _one_of(exc, EXPECTED) or isinstance(exc, TimeoutError):
            return _fail(str(exc))
        if isinstance(exc, OSError):
            where = f"{exc.filename}: " if exc.filename else ""
            return _fail(f"{where}{exc.strerror or exc}")
        raise
    return 0


UNREACHABLE = {
    "jobledger.services.local.loopback": ("BrokerError",),
    "jobledger.services.kafka": ("BrokerUnreachable",),
    "confluent_kafka": ("KafkaException",),
}
"""The broker cannot be found, started or reached, or it refused (exit status UNAVAILABLE)."""

EXPECTED = {
    "jobledger.projections.log.log_file": ("ExportUnreadable",),
    "jobledger.projections.log.positions": ("PositionError",),
    "jobledger.services.host.parallel": ("ReplayWorkerFailed",),
    "jobledger.services.kafka_topics": ("TopicNotFound",),
    "jobledger.projections.debugging.history": ("UnknownJob",),
    "jobledger.projections.debugging.explain": ("UnknownTarget",),
    "jobledger.cli.options": ("CommandFailed",),
    "jobledger.services.client.dispatcher": ("JobGraphRefused",),
    "jobledger.services.runner.kv_state": ("KvStateLookupError",),
    "jobledger.services.runner.connector": ("ConnectorUnresolved",),
    "jobledger.services.signing": ("KeyFileError",),
    "jobledger.projections.log.archive": ("ArchiveError",),
    "jobledger.projections.log.retained": ("DeletedBeforeSnapshot",),
}
"""The expected failures of a command, each said in one line (exit status 1)."""


def _one_of(exc: Exception, classes: dict[str, tuple[str, ...]]) -> bool:
    """Whether `exc` is of one of `classes` (module -> class names). A module not imported
    raised nothing, so it is not imported to find out: a command pays for its own modules."""
    return any(
        isinstance(exc, getattr(sys.modules[module], name))
        for module, names in classes.items()
        if module in sys.modules
        for name in names
    )


def _kafka_error(exc: Exception) -> str:
    if not _one_of(exc, {"confluent_kafka": ("KafkaException",)}):
        return str(exc)
    error = exc.args[0] if exc.args else exc
    return f"Kafka error: {error.str() if hasattr(error, 'str') else error}"


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
