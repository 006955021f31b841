"""Command-line options every `jobledger` command shares (where the broker and the topics
are, the schema registry), in a module of their own so that the main command line and the
runner's (`runner/cli.py`, also run under `spark-submit`) both use them without importing
each other."""

from __future__ import annotations

import argparse
import os

from . import kafka


def connection_options() -> argparse.ArgumentParser:
    """A parent parser with `--bootstrap` and `--topic-prefix`."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--bootstrap",
        help=f"Kafka bootstrap servers (default: ${kafka.BOOTSTRAP_ENV}, else the local broker)",
    )
    common.add_argument(
        "--topic-prefix",
        help=f"prefix of every topic name (default: ${kafka.PREFIX_ENV}, else 'jobledger.')",
    )
    return common


def registry_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--schema-registry",
        default=os.environ.get(kafka.REGISTRY_ENV),
        help="schema registry URL: write the Confluent wire format instead of Avro "
        f"single-object encoding (default: ${kafka.REGISTRY_ENV})",
    )
