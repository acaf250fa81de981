"""Every kvcal name a benchmark or script imports exists: a package move must re-point them too.

Benchmarks and scripts run outside pytest (by hand, or in CI's jobs after it), so a name
left behind by a move is found only when someone next runs them; this finds it at once.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = sorted([*ROOT.glob("benchmarks/*.py"), *ROOT.glob("scripts/*.py")])


def kvcal_imports(source: str) -> set[tuple[str, str | None]]:
    """(module, name) for each ``from kvcal... import name`` and (module, None) for each ``import kvcal...``."""
    found: set[tuple[str, str | None]] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "kvcal":
            found |= {(node.module or "", alias.name) for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {(alias.name, None) for alias in node.names if alias.name.split(".")[0] == "kvcal"}
    return found


def missing_names(source: str) -> list[str]:
    missing = []
    for module, name in sorted(kvcal_imports(source), key=str):
        try:
            loaded = importlib.import_module(module)
        except ImportError:
            missing.append(module)
            continue
        if name is not None and not hasattr(loaded, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                missing.append(f"{module}.{name}")
    return missing


def test_the_check_finds_a_name_a_move_left_behind():
    assert missing_names("from kvcal.records.run import FitSettings\nimport kvcal.no_such_module") == [
        "kvcal.no_such_module", "kvcal.records.run.FitSettings"]
    assert missing_names("from kvcal.records.fit import FitSettings") == []


@pytest.mark.parametrize("tool", TOOLS, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_every_kvcal_name_a_tool_imports_exists(tool):
    assert missing_names(tool.read_text()) == []
