"""MkDocs hook: the reference pages that are a view of the code, generated at build time.

The command line (from the argparse parsers) and the event catalog (from the `.avsc` files)
are written into the site when it is built rather than checked in: a checked-in copy would
need a test to catch it going stale, while a page built from the source cannot drift."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

from jobledger.cli.main import COMMANDS, build_parser
from jobledger.schemas.catalog import SCHEMA_DIR
from jobledger.schemas.docs import catalog_table

HELP_WIDTH = "100"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _command_sections(path: str, parser: argparse.ArgumentParser, depth: int) -> list[str]:
    lines = [f"{'#' * depth} `{path}`", "", "```text", parser.format_help().rstrip(), "```", ""]
    for name, child in _subcommands(parser).items():
        lines += _command_sections(f"{path} {name}", child, min(depth + 1, 4))
    return lines


def cli_page() -> str:
    """Every command's `--help`, in the order `jobledger --help` lists them."""
    os.environ["COLUMNS"] = HELP_WIDTH  # argparse wraps to the terminal: one width for all
    lines = [
        "# Command line",
        "",
        "Generated from the argparse parsers when the site is built: each command's `--help`.",
        "",
        "```text",
        build_parser("").format_help().rstrip(),
        "```",
        "",
    ]
    for command in COMMANDS:
        parser = _subcommands(build_parser(command))[command]
        lines += _command_sections(f"jobledger {command}", parser, 2)
    return "\n".join(lines)


def _type_name(avro_type: Any) -> str:
    if isinstance(avro_type, list):
        return " \\| ".join(_type_name(branch) for branch in avro_type)
    if isinstance(avro_type, dict):
        kind = avro_type.get("type")
        if kind == "array":
            return f"array<{_type_name(avro_type['items'])}>"
        if kind == "map":
            return f"map<{_type_name(avro_type['values'])}>"
        if "logicalType" in avro_type:
            return f"{kind} ({avro_type['logicalType']})"
        return str(avro_type.get("name", kind))
    return str(avro_type).removeprefix("jobledger.")


def _cell(text: object) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _schema_section(schema: dict[str, Any]) -> list[str]:
    name = schema["name"]
    lines = [f"### {name} {{#{name.lower()}}}", "", _cell(schema.get("doc", "")), ""]
    if schema["type"] == "enum":
        lines.append("Symbols: " + ", ".join(f"`{s}`" for s in schema["symbols"]))
        if "default" in schema:
            lines.append(f" (default `{schema['default']}`)")
        return [*lines, ""]
    lines += ["| field | type | default | meaning |", "| --- | --- | --- | --- |"]
    for field in schema.get("fields", []):
        default = f"`{json.dumps(field['default'])}`" if "default" in field else ""
        lines.append(
            f"| `{field['name']}` | `{_type_name(field['type'])}` | {default} | "
            f"{_cell(field.get('doc', ''))} |"
        )
    return [*lines, ""]


def events_page() -> str:
    """The catalog table (topic, key, producer) and then every `.avsc` file's fields."""
    lines = [
        "# Event catalog",
        "",
        "Generated from `schemas/*.avsc` when the site is built. The [clients guide](clients.md)",
        "says how to load the schemas and encode records; earlier versions of changed schemas",
        "are in `schemas/history/`.",
        "",
        "## Events",
        "",
        catalog_table(),
        "",
        "## Schemas",
        "",
    ]
    for path in sorted(SCHEMA_DIR.glob("jobledger.*.avsc")):
        lines += _schema_section(json.loads(path.read_text()))
    return "\n".join(lines)


GENERATED = {"reference/cli.md": cli_page, "reference/events.md": events_page}


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for src_uri, render in GENERATED.items():
        files.append(File.generated(config, src_uri, content=render()))
    return files
