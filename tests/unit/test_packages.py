"""Packages depend one way, in the order docs/architecture.md states: a stage imports only stages below it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "kvcal"
# Bottom to top. "base" is every top-level module (errors, redact, terminal_text, lazy) and transports/; the ground
# floor's packages stand on it in the order they import one another: files < costs < settings < records.
# threshold/ (choosing the threshold from a fit) sits on fit/ and under every stage that calls it: the sweep's
# adaptive stop, plan, emit, gate, fleet, observe and report. plan (kvcal plan) sits just above sweep: it simulates
# campaigns with the sweep's adaptive controller.
ORDER = ("base", "files", "costs", "settings", "records", "estimate", "engines", "fit", "threshold", "sweep", "plan", "emit", "k8s", "gate", "fleet", "observe", "report", "cli")


def _own_package(relative: tuple[str, ...]) -> str:
    """The package of a module at ``relative`` (path parts below kvcal/, no suffix): a top-level module is base."""
    return relative[0] if len(relative) > 1 and relative[0] in ORDER else "base"


def _target_package(module: str) -> str:
    """The package an imported kvcal name belongs to: ``kvcal.fit`` and ``kvcal.fit.tables`` are fit."""
    parts = module.split(".")[1:]
    return parts[0] if parts and parts[0] in ORDER else "base"


def _imported(tree: ast.AST, relative: tuple[str, ...]) -> set[str]:
    """Every kvcal module or name a module's source imports, anywhere in it, as a dotted name (a lazy ``_API`` entry too)."""
    here = ["kvcal", *relative[:-1]]  # the module's own package, for relative imports
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            origin = ".".join([*here[:len(here) - node.level + 1], *([node.module] if node.module else [])]) \
                if node.level else node.module or ""
            found |= {origin} | {f"{origin}.{alias.name}" for alias in node.names}
        elif (isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["_API"]
              and isinstance(node.value, ast.Dict)):  # a package's public API, imported on first use (kvcal/lazy.py)
            found |= {value.value for value in node.value.values if isinstance(value, ast.Constant)}
    return {name for name in found if isinstance(name, str) and (name == "kvcal" or name.startswith("kvcal."))}


def upward_in(source: str, relative: tuple[str, ...]) -> set[str]:
    """The packages above its own that a module (``relative``: its path parts below kvcal/) imports."""
    mine = ORDER.index(_own_package(relative))
    return {target for name in _imported(ast.parse(source), relative)
            if ORDER.index(target := _target_package(name)) > mine}


def _upward_imports() -> set[tuple[str, str]]:
    found = set()
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE).with_suffix("").parts
        found |= {("/".join(relative), target) for target in upward_in(path.read_text(), relative)}
    return found


@pytest.mark.parametrize("source, module, upward", [
    ("from kvcal.fit import fit_table", ("estimate", "plan"), {"fit"}),  # the package itself, not only its modules
    ("from kvcal import sweep", ("fit", "tables"), {"sweep"}),
    ("import kvcal.sweep.config", ("records",), {"sweep"}),
    ("import kvcal.emit.limits as limits", ("fit", "breakeven"), {"emit"}),
    ("from ..sweep import reach", ("fit", "breakeven"), {"sweep"}),
    ("from .summary import summarize", ("sweep", "runner"), set()),
    ("def late():\n    from kvcal.cli import app", ("gate", "plot"), {"cli"}),
    ("from kvcal import errors\nfrom kvcal.costs import cost_curve\nimport kvcal\nfrom kvcal.records.run import Leg",
     ("records", "old_schemas"), set()),
    ("from kvcal.records.run import Leg\nfrom kvcal.engines.sim import SimPair", ("fit", "tables"), set()),
    ("import numpy\nfrom typing import Any", ("estimate", "predict"), set()),
    ('_API = {"plan_campaigns": "kvcal.sweep.campaign_plan"}', ("estimate", "__init__"), {"sweep"}),
    ('_API = {"SweepConfig": "kvcal.settings.sweep"}', ("sweep", "__init__"), set()),
    ("from kvcal.records.run import Leg", ("settings", "sweep"), {"records"}),  # the ground floor is ordered too
    ("from kvcal.files.reading import read_text\nfrom kvcal.errors import InputError", ("costs", "simulated"), set()),
    ("from kvcal.transports import transport_names", ("settings", "sweep_groups"), set()),
])
def test_the_classifier_sees_every_way_of_importing(source, module, upward):
    assert upward_in(source, module) == upward


def test_packages_import_only_the_stages_below_them():
    """No exceptions: (importing module, package above it) pairs, all of which must go."""
    assert _upward_imports() == set(), "a stage imports one above it (docs/architecture.md, package order)"


def test_the_architecture_doc_names_every_module():
    doc = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    missing = [str(path.relative_to(PACKAGE)) for path in sorted(PACKAGE.rglob("*.py")) if path.name != "__init__.py"
               and str(path.relative_to(PACKAGE)) not in doc and f"`{path.name}`" not in doc and f" {path.name}" not in doc]
    assert not missing, f"docs/architecture.md does not name {missing}"
