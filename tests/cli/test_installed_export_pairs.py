"""`kvcal export` of a campaign over pairs keeps each row's pair and link class, and `kvcal fit` reads them back
(issue 55, item 8), through the INSTALLED script: the README's `export -o - | fit -` pipeline fits per class as
fitting the run folder does. Before, the export dropped both columns and the pipeline fitted every class as one."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(sys.executable).with_name("kvcal")
pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason=f"no installed kvcal script at {SCRIPT}")
PAIRS = """pairs:
  - {name: a, class: near, sim: {pull_intercept_ms: 20.0, pull_per_token_us: 3.0}}
  - {name: b, class: near, sim: {pull_intercept_ms: 20.0, pull_per_token_us: 3.0}}
  - {name: c, class: far, sim: {pull_intercept_ms: 30.0, pull_per_token_us: 12.0, session_ms: 400}}
"""


def _kvcal(*args: str | Path, cwd: Path, **kw) -> subprocess.CompletedProcess:
    if "input" not in kw:
        kw["stdin"] = subprocess.DEVNULL
    return subprocess.run([str(SCRIPT), *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=300, **kw)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("export-pairs")
    (root / "pairs.yaml").write_text(PAIRS)
    done = _kvcal("sweep", "--engine", "sim", "--pairs", "pairs.yaml", "--prefix-lengths", "256,512,1024,2048,4096",
                  "--reps", "3", "--output-dir", "runs", "--name", "r", cwd=root)
    assert done.returncode == 0, done.stderr
    return root


def test_the_export_of_a_pairs_run_keeps_pair_and_link_class(run):
    done = _kvcal("export", "runs/r", "-o", "-", cwd=run)
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert list(rows[0])[-2:] == ["pair", "link_class"]
    assert {(r["pair"], r["link_class"]) for r in rows} == {("a", "near"), ("b", "near"), ("c", "far")}


def test_export_piped_into_fit_fits_each_class_as_the_run_folder_does(run):
    folder = _kvcal("fit", "runs/r", "--resamples", "200", "-o", "folder.json", cwd=run)
    assert folder.returncode == 0, folder.stderr
    exported = _kvcal("export", "runs/r", "-o", "-", cwd=run)
    piped = _kvcal("fit", "-", "--resamples", "200", "-o", "piped.json", cwd=run, input=exported.stdout)
    assert piped.returncode == 0, piped.stderr
    mine, theirs = (json.loads((run / name).read_text()) for name in ("piped.json", "folder.json"))
    assert set(mine["classes"]) == set(theirs["classes"]) == {"near", "far"}
    for name, fit in theirs["classes"].items():
        assert mine["classes"][name]["break_even_tokens"] == fit["break_even_tokens"]
        assert mine["classes"][name]["break_even_ci"] == fit["break_even_ci"]
        assert mine["classes"][name]["pairs"] == fit["pairs"]
        assert mine["classes"][name]["session_cost_ms"] is None  # the export leaves the cold pulls out
    assert mine["class_difference"]["differ"] and theirs["class_difference"]["differ"]


def test_a_class_column_blank_in_some_rows_is_refused_by_row(run):
    exported = _kvcal("export", "runs/r", "-o", "-", cwd=run).stdout.splitlines()
    exported[3] = exported[3].rsplit(",", 1)[0] + ","
    (run / "holes.csv").write_text("\n".join(exported) + "\n")
    done = _kvcal("fit", "holes.csv", "--resamples", "100", "-o", "holes.json", cwd=run)
    assert done.returncode == 2 and "holes.csv row 4: link_class is empty" in done.stderr, done.stderr
    assert not (run / "holes.json").exists()
