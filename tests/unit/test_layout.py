"""The tree shows the pipeline: no import circles, small modules, imports at the top (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "kvcal"
MAX_LINES = 400
MAX_FUNCTION_LINES = 60
# Imports inside functions that are deliberate: the CLI loads a command's stage only when it runs;
# serve.py imports vLLM after patching it.
LAZY_ALLOWED = ("cli/", "engines/serve.py",
                "costs/simulated.py",  # kvcal --help loads it through the flags; see its docstring
                "threshold/limits.py",  # read by the flags: emit-config's --help must not build the records (MAX_TOKENS)
                "records/run_folder.py",  # the run manifest's settings: reading probes must not load them (RunFolder.manifest)
                "fit/inputs.py",  # the probe table and fitting code (pandas, scipy): reading a stored fit must not load them
                "fit/observational.py")  # the cost model's bootstrap (scipy.stats): emit-config --deltas reads its log parser


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ("kvcal", *path.relative_to(PACKAGE).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(tree: ast.AST, modules: dict[str, Path]) -> list[tuple[ast.AST, str]]:
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        found += [(node, name) for name in names if name in modules]
    return found


def test_no_module_imports_one_that_imports_it_back():
    modules = _modules()
    graph = {name: {target for _, target in _imports(ast.parse(path.read_text()), modules)} - {name}
             for name, path in modules.items()}
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(node: str, trail: list[str]) -> bool:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle.extend(trail[trail.index(nxt):] + [node, nxt] if nxt in trail else [node, nxt])
                return True
            if nxt not in state and visit(nxt, trail + [node]):
                return True
        state[node] = 2
        return False

    assert not any(visit(name, []) for name in sorted(graph) if name not in state), " -> ".join(cycle)


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_modules_stay_small(path):
    assert len(path.read_text().splitlines()) <= MAX_LINES


def test_kvcal_modules_are_imported_at_the_top():
    modules = _modules()
    late = []
    for name, path in modules.items():
        relative = str(path.relative_to(PACKAGE))
        if relative.startswith(LAZY_ALLOWED):
            continue
        tree = ast.parse(path.read_text())
        top = {id(node) for node in tree.body}
        guarded = {id(child) for node in tree.body if isinstance(node, ast.If) for child in ast.walk(node)}
        late += [f"{relative}: {target}" for node, target in _imports(tree, modules)
                 if id(node) not in top and id(node) not in guarded]
    assert not late


def _own_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """A function's lines from its first statement to its end, less the functions defined inside it: a typer
    command's signature declares one option a line (after the formatter) and is not counted."""
    lines = set(range(node.body[0].lineno, node.end_lineno + 1))
    for child in ast.walk(node):
        if child is not node and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines -= set(range(child.lineno, child.end_lineno + 1))
    return len(lines)


def test_functions_stay_short():
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _own_lines(node) > MAX_FUNCTION_LINES:
                long.append(f"{path.relative_to(PACKAGE)}: {node.name} ({_own_lines(node)} lines)")
    assert not long


MAX_ROOT_MODULES = 6  # the rest of the ground floor lives in named packages (files, costs, settings, records)


def _twin_key(name: str) -> tuple[str, ...]:
    """A name's words, unordered and singular: ``settings_flags`` and ``flag_settings`` share one."""
    return tuple(sorted(word.removesuffix("s") for word in name.split("_")))


def test_at_most_a_few_modules_stay_at_the_root():
    loose = sorted(path.name for path in PACKAGE.glob("*.py") if path.name != "__init__.py")
    assert len(loose) <= MAX_ROOT_MODULES, loose


def test_no_module_name_is_another_with_its_words_swapped_or_pluralised():
    names = {path.stem for path in PACKAGE.rglob("*.py") if path.name != "__init__.py"}
    names |= {path.parent.name for path in PACKAGE.rglob("__init__.py") if path.parent != PACKAGE}
    by_key: dict[tuple[str, ...], set[str]] = {}
    for name in names:
        by_key.setdefault(_twin_key(name), set()).add(name)
    twins = [sorted(group) for group in by_key.values() if len(group) > 1]
    assert not twins


@pytest.mark.parametrize("a, b, twins", [
    ("settings_flags", "flag_settings", True), ("records", "record", True), ("fit_record", "records_fit", True),
    ("cost_curve", "curves", False), ("sweep_flags", "from_flags", False),
])
def test_the_twin_rule_sees_swaps_and_plurals(a, b, twins):
    assert (_twin_key(a) == _twin_key(b)) is twins
