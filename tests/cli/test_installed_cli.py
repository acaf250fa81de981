"""The corpus of bad inputs (tests/cli_corpus.py) through the INSTALLED ``kvcal`` console script.

What a user runs: the entry point pip wrote, in a fresh process, with whatever typer/click
pair that environment resolved. One case per (command, class) runs here (every class of
every command; tests/unit/cli/test_cli_corpus.py runs every case in-process; the newest-dependencies
job samples one case per class and per command: KVCAL_CORPUS_SAMPLE=class). As root, each
process runs with CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH dropped (``setpriv``) so unreadable
files are unreadable. Cases run in parallel; each in its own copy of the workspace.

``KVCAL_CLI`` names the script to test (default: ``kvcal`` beside this Python).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from cli_corpus import build_workspace, generated_cases, problems, snapshot
from kvcal.cli.app import app

# A hang is minutes; a loaded 2-core CI machine takes up to ~40 s to import the fit stack (scipy.stats).
CASE_TIMEOUT_S = int(os.environ.get("KVCAL_CASE_TIMEOUT_S", "120"))
SCRIPT = Path(os.environ.get("KVCAL_CLI") or Path(sys.executable).with_name("kvcal"))
DROP_DAC = (["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]
            if os.geteuid() == 0 and shutil.which("setpriv") else [])


def _sample():
    """One case per (command, class); with KVCAL_CORPUS_SAMPLE=class, one per class and one per command."""
    per_class = os.environ.get("KVCAL_CORPUS_SAMPLE") == "class"
    seen, chosen = set(), []
    for case in generated_cases(app):
        if case.needs_dropped_dac and os.geteuid() == 0 and not DROP_DAC:
            continue
        keys = {("class", case.cls), ("command", case.command.name)} if per_class else {(case.command.name, case.cls)}
        if keys <= seen:
            continue
        seen |= keys
        chosen.append(case)
    return chosen


CASES = _sample()
pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason=f"no installed kvcal script at {SCRIPT}")


def run_script(args: list[str], cwd: Path) -> tuple[int, str, str]:
    try:
        done = subprocess.run([*DROP_DAC, str(SCRIPT), *args], capture_output=True, text=True, errors="replace",
                              timeout=CASE_TIMEOUT_S, cwd=cwd, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return -1, "", f"timed out after {CASE_TIMEOUT_S} s"
    return done.returncode, done.stdout, done.stderr


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    """Every case run once, in parallel: id -> (args, problems)."""
    root = tmp_path_factory.mktemp("installed")
    master = build_workspace(root / "master", lambda args: run_script(args, root)[0])
    os.chmod(root, 0o755)

    def one(index_case):
        index, case = index_case
        ws = root / f"case{index}"
        shutil.copytree(master, ws, symlinks=True)
        args = case.prepare(ws)
        before = snapshot(ws)
        code, out, err = run_script(args, ws)
        found = problems(code, out, err, before, snapshot(ws))
        if code == -1:
            found.append("did not finish")
        return case.id, (args, code, found, (out + err)[-600:])

    with ThreadPoolExecutor(max_workers=max(2, min(8, os.cpu_count() or 2))) as pool:
        return dict(pool.map(one, enumerate(CASES)))


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_installed_script_refuses_bad_input_cleanly(case, outcomes):
    args, code, found, tail = outcomes[case.id]
    assert not found, f"kvcal {' '.join(args)} -> exit {code}: {found}\n{tail}"
