"""Packages depend one way, in the order docs/architecture.md states: a stage imports only stages below it."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "kvcal"
# Bottom to top. "base" is every top-level module (errors, records, userfiles, ...).
ORDER = ("base", "estimate", "engines", "fit", "sweep", "emit", "report", "fleet", "cli")
# Imports that still point up, by importing module and target package: each is a debt named in
# docs/architecture.md; the list may only shrink (a new upward import fails below).
KNOWN_UPWARD = {
    ("records", "sweep"), ("records_v1", "sweep"),  # run.json holds SweepConfig
    ("estimate/campaign_plan", "engines"), ("estimate/campaign_plan", "fit"), ("estimate/campaign_plan", "sweep"),
    ("engines/vllm", "sweep"), ("engines/vllm_launch", "sweep"), ("engines/vllm_setup", "sweep"),
    ("fit/tables", "sweep"), ("fit/inputs", "sweep"), ("fit/costmodel", "sweep"),
    ("fit/breakeven", "sweep"), ("fit/breakeven", "emit"),  # the fit's advice: lengths sweep/reach.py would add, in emit's words
}


def _package(parts: tuple[str, ...]) -> str:
    return parts[0] if len(parts) > 1 and parts[0] in ORDER else "base"


def _upward_imports() -> set[tuple[str, str]]:
    found = set()
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE).with_suffix("")
        mine = _package(relative.parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kvcal."):
                target = _package(tuple(node.module.split(".")[1:]))
                if ORDER.index(target) > ORDER.index(mine):
                    found.add(("/".join(relative.parts), target))
    return found


def test_packages_import_only_the_stages_below_them():
    upward = _upward_imports()
    assert upward - KNOWN_UPWARD == set(), "a stage imports one above it (docs/architecture.md, package order)"


def test_the_list_of_known_upward_imports_is_current():
    assert KNOWN_UPWARD - _upward_imports() == set(), "an upward import was removed: drop it from KNOWN_UPWARD"


def test_the_architecture_doc_names_every_module():
    doc = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    missing = [str(path.relative_to(PACKAGE)) for path in sorted(PACKAGE.rglob("*.py")) if path.name != "__init__.py"
               and str(path.relative_to(PACKAGE)) not in doc and f"`{path.name}`" not in doc and f" {path.name}" not in doc]
    assert not missing, f"docs/architecture.md does not name {missing}"
