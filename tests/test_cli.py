"""The command line without a broker: help everywhere, schema commands."""

from __future__ import annotations

import json

import pytest

from jobledger.services.cli import build_parser, main

SUBCOMMANDS = [
    ["broker"],
    ["topics"],
    ["topics", "create"],
    ["topics", "list"],
    ["produce"],
    ["tail"],
    ["schemas"],
    ["schemas", "list"],
    ["schemas", "show"],
    ["schemas", "write"],
    ["services"],
    ["services", "run"],
    ["export"],
    ["replay"],
]


@pytest.mark.parametrize("argv", SUBCOMMANDS, ids=" ".join)
def test_every_subcommand_has_help(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([*argv, "--help"])
    assert exit_info.value.code == 0
    assert "usage: jobledger " + " ".join(argv) in capsys.readouterr().out


def test_schemas_show_prints_the_avsc(capsys):
    assert main(["schemas", "show", "SlotOffered"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "SlotOffered"


def test_schemas_show_unknown_type_is_an_error(capsys):
    assert main(["schemas", "show", "NoSuchEvent"]) == 1
    assert "unknown event type 'NoSuchEvent'" in capsys.readouterr().err


def test_schemas_files_are_up_to_date():
    assert main(["schemas", "write", "--check"]) == 0
