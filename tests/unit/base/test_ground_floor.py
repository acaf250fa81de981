"""The ground floor stands alone: probe, setup and plan records import nothing of kvcal but errors, and reading
probes or a fit.json loads neither the sweep's settings nor the simulator (docs/architecture.md, issue 41)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PACKAGE = REPO / "kvcal"
BASELINE = REPO / "results" / "baselines" / "cpu-tiny"  # a committed run folder: run.json, probes.jsonl, fit.json
HEAVY = ("kvcal.settings.sweep", "kvcal.costs.simulated", "kvcal.engines.sim", "kvcal.fleet.sim", "kvcal.records.manifest")


def _kvcal_imports(path: Path) -> set[str]:
    """The kvcal modules a module's source imports anywhere in it (``from kvcal import x`` counts as kvcal.x)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module == "kvcal":
            found |= {f"kvcal.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert not node.level, f"{path}: a relative import"
            found.add(node.module or "")
    return {name for name in found if name == "kvcal" or name.startswith("kvcal.")}


def _source(module: str) -> Path:
    path = REPO / Path(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _below(module: str) -> dict[str, set[str]]:
    """Each kvcal module ``module`` stands on (itself included), with the kvcal modules it imports."""
    seen: dict[str, set[str]] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen[name] = _kvcal_imports(_source(name))
            todo += sorted(seen[name])
    return seen


def test_the_records_stand_on_nothing_of_kvcal_but_errors():
    below = _below("kvcal.records.run")
    assert {name: sorted(imports) for name, imports in below.items() if imports - {"kvcal.errors"}} == {}
    assert set(below) <= {"kvcal.records.run", "kvcal.errors"}


def test_the_transports_stand_on_nothing_of_kvcal_but_errors():
    """The sweep's settings check the transport setting against the transports' own names (a base package)."""
    own = {
        "kvcal.transports",
        *(f"kvcal.transports.{p.stem}" for p in (PACKAGE / "transports").glob("*.py") if p.stem != "__init__"),
    }
    outside = {name: sorted(_kvcal_imports(_source(name)) - own) for name in sorted(own)}
    assert {name: imports for name, imports in outside.items() if set(imports) - {"kvcal.errors"}} == {}


def test_reading_probes_and_a_fit_loads_neither_the_settings_nor_the_simulator(tmp_path):
    script = (
        "import json, sys\n"
        "from kvcal.records.fit import load_fit\n"
        "from kvcal.records.run_folder import RunFolder\n"
        f"fit = load_fit({str(BASELINE / 'fit.json')!r})\n"
        f"probes = RunFolder({str(BASELINE)!r}).read_probes()\n"
        "print(json.dumps({'break_even': fit.break_even_tokens, 'probes': len(probes),\n"
        "                  'modules': sorted(m for m in sys.modules if m.startswith('kvcal'))}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert (
        seen["probes"] > 0
        and seen["break_even"] == json.loads((BASELINE / "fit.json").read_text())["break_even_tokens"]
    )
    assert "kvcal.records.fit" in seen["modules"] and "kvcal.records.run_folder" in seen["modules"]  # the readers did run
    assert not set(HEAVY) & set(seen["modules"])
