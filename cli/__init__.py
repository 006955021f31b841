"""The `jobledger` command line: the one layer that wires the engine (`services`), the
runtime and the read models (`projections`) together; nothing below it imports it."""

from .main import build_parser, main

__all__ = ["build_parser", "main"]
