"""What the README and the docs tell a newcomer to run: it must work on whatever port the local
broker took, leave the checkout clean, and name only examples that exist."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
WALK_THROUGH = (ROOT / "docs" / "getting-started" / "walk-through.md").read_text()
PAGES = [README, *(page.read_text() for page in sorted((ROOT / "docs").rglob("*.md")))]
MAX_README_LINES = 150


def _code_blocks(text: str) -> list[str]:
    return re.findall(r"```(?:bash|console|sh)?\n(.*?)```", text, re.S)


def test_no_command_names_a_fixed_local_broker_address():
    """`broker --detach` takes another port when 9092 is busy: a command naming 9092 reached
    someone else's broker (the Java example failed after 66 s)."""
    fixed = re.compile(r"(--bootstrap|-b)[ =]+(127\.0\.0\.1|localhost):\d+")
    for text in PAGES:
        lines = [line for block in _code_blocks(text) for line in block.splitlines()]
        assert [line for line in lines if fixed.search(line)] == []
        assert not re.search(r"--bootstrap (127\.0\.0\.1|localhost):\d+", text)


def test_the_walk_through_leaves_the_checkout_clean():
    """What the walk-through writes (redirected logs, an export) is git-ignored."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    walk = WALK_THROUGH.split("```bash\n", 1)[1].split("```", 1)[0]
    written = set(re.findall(r"> ?([\w.]+) 2>&1", walk))
    written |= set(re.findall(r"jobledger export ([\w.]+)", walk))
    assert written >= {"services.log", "runner.log", "log.avro"}, written
    checked = subprocess.run(
        ["git", "check-ignore", *sorted(written)], cwd=ROOT, capture_output=True, text=True
    )
    assert sorted(checked.stdout.split()) == sorted(written)


LANGUAGES = {"java": "java", "go": "go", ".net": "dotnet", "python": "python"}


def test_the_docs_name_only_examples_that_exist():
    for text in PAGES:
        for path in re.findall(r"\bexamples/[\w./-]*\w", text):
            built = "/target/" in path or path == "examples/go/goclient"  # Maven's, go build's
            if not built:
                assert (ROOT / path).exists(), path
        for named in re.findall(r"([\w.]+(?:/[\w.]+)*) examples?\b", text):
            for language in named.lower().split("/"):
                if language in LANGUAGES:
                    assert (ROOT / "examples" / LANGUAGES[language]).is_dir(), named


def test_the_readme_is_a_landing_page():
    """What it is, the two commands, a taste and links: the rest lives in docs/."""
    assert len(README.splitlines()) <= MAX_README_LINES
