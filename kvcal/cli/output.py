"""Printing helpers for the CLI: rich on a terminal, plain lines otherwise. The library never prints."""

from __future__ import annotations

import sys

from rich.console import Console

stdout = Console(soft_wrap=True)
stderr = Console(stderr=True, soft_wrap=True)


def error_line(message: str) -> None:
    """One line on stderr: the whole error report a user sees."""
    first = " ".join(str(message).split())
    print(f"kvcal: error: {first}", file=sys.stderr)


def warn(message: str) -> None:
    print(f"kvcal: warning: {message}", file=sys.stderr)


def info(message: str) -> None:
    print(message, file=sys.stderr)
