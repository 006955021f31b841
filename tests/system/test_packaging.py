"""The package mapping of pyproject.toml: every folder Python could import under a mapped
package is listed, so `make install` ships it without setuptools' "Package would be ignored"
warnings (about 80 lines of them)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_importable_folder_of_a_package_is_listed():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    missing = []
    for name, folder in config["package-dir"].items():
        for path in sorted((ROOT / folder).rglob("*")):
            if not path.is_dir() or path.name == "__pycache__":
                continue
            parts = path.relative_to(ROOT / folder).parts
            if not all(part.isidentifier() for part in parts):
                continue  # no importable name: setuptools leaves it to package-data quietly
            if any(child.is_file() for child in path.iterdir()):
                dotted = ".".join((name, *parts))
                if dotted not in listed:
                    missing.append(dotted)
    assert missing == []


def test_every_listed_data_package_ships_its_files():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    for package in config["packages"]:
        mapped = next(n for n in sorted(config["package-dir"], key=len, reverse=True)
                      if package == n or package.startswith(f"{n}."))  # fmt: skip
        folder = ROOT / config["package-dir"][mapped] / Path(*package[len(mapped) + 1 :].split("."))
        if not (folder / "__init__.py").exists():
            assert config["package-data"].get(package), f"{package} holds data but ships none"
