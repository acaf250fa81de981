"""Shared fixtures: a CLI runner that goes through kvcal's single error boundary; each test marked with its tier.

The tier is the folder under tests/ (browser, cli, conformance, integration, unit): every test
carries its folder's marker, so ``pytest -m unit`` or ``KVCAL_TIERS="unit cli" bash scripts/test.sh``
selects tiers by marker (pyproject.toml lists the markers; docs/architecture.md, "The test suite").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvcal.cli.app import main

TESTS = Path(__file__).resolve().parent
TIERS = ("browser", "cli", "conformance", "integration", "unit")


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test with its tier: the first folder under tests/ that holds it."""
    for item in items:
        try:
            folder = Path(str(item.path)).resolve().relative_to(TESTS).parts[0]
        except ValueError:  # a test file outside this tree (none today)
            continue
        if folder in TIERS:
            item.add_marker(folder)


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
