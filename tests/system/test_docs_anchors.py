"""The code's "why" resolves inside the repository: every Flink rule ID (`SP-24`), design rule
(`design rule D-3`) and source (`seed 002`) that a file cites is an anchor of a page in docs/,
and nothing points at documents a clone does not have."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

RULE = re.compile(r"\b(SP|KV|JM|TE|TST|ES|JS|RS|SM|KG)-(\d+|\*)")
DESIGN_RULE = re.compile(r"\bD-(\d+)\b")
SEED = re.compile(r"\b[Ss]eeds? (00\d)\b")  # "seed 350" is a random seed
OUTSIDE = re.compile(r"DESIGN\.md|flink-behavior|reference/seeds|[Ss]eed documents")
ANCHOR = re.compile(r"\{#([\w-]+)\}")
CITING = (".py", ".avsc", ".md", ".toml", ".yml", ".txt", ".json")


def _citing_files() -> list[Path]:
    """Every tracked text file outside docs/ (the pages that hold the anchors)."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    return [
        ROOT / name
        for name in listed
        if name.endswith(CITING) and not name.startswith("docs/") and (ROOT / name).is_file()
    ]


def _anchors() -> set[str]:
    return {a for page in DOCS.rglob("*.md") for a in ANCHOR.findall(page.read_text())}


def _cited(text: str) -> set[str]:
    cited = {f"{room}-{n}".lower() if n != "*" else room.lower() for room, n in RULE.findall(text)}
    cited |= {f"d-{n}" for n in DESIGN_RULE.findall(text)}
    cited |= {f"seed-{n}" for n in SEED.findall(text)}
    return cited


def test_every_citation_in_the_code_is_an_anchor_in_the_docs():
    anchors = _anchors()
    unresolved = {
        f"{path.relative_to(ROOT)}: {cited}"
        for path in _citing_files()
        for cited in _cited(path.read_text(errors="replace"))
        if cited not in anchors
    }
    assert sorted(unresolved) == []


def test_nothing_points_at_documents_outside_the_repository():
    outside = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in _citing_files()
        if path != Path(__file__)
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert outside == []


def test_the_citation_forms_are_recognised():
    """The three forms the code uses, so a change to the patterns cannot quietly match none."""
    text = "SlotPool (SP-24, rules TE-*), design rules D-2 and D-3, seed 002, ES-8/9"
    assert _cited(text) == {"sp-24", "te", "d-2", "d-3", "seed-002", "es-8"}
    assert {"sp-24", "te", "d-3", "seed-002", "kg-8"} <= _anchors()
