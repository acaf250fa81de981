"""Shared fixtures: a CLI runner that goes through kvcal's single error boundary."""

from __future__ import annotations

import pytest

from kvcal.cli.app import main


class CliResult:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.code, self.out, self.err = code, out, err


@pytest.fixture
def kvcal(capsys):
    """Run `kvcal ARGS...` in-process; returns exit code, stdout and stderr."""

    def run(*args: str) -> CliResult:
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run
