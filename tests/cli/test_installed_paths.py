"""Valid input through the INSTALLED ``kvcal`` script, in paths that rich would read as markup.

``[run]`` is a style tag to rich and ``[/x]`` a closing tag it cannot match: a path holding
them once printed with the tag gone, or ended a finished fit with an internal error.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(sys.executable).with_name("kvcal")
pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason=f"no installed kvcal script at {SCRIPT}")


def _kvcal(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)


@pytest.mark.timeout(600)
def test_paths_that_look_like_markup_print_as_they_are(tmp_path):
    runs, out_dir = tmp_path / "[run] é", tmp_path / "[/x]"
    out_dir.mkdir(parents=True)
    sweep = _kvcal("sweep", "--engine", "sim", "--output-dir", str(runs), "--name", "a", "--prefix-lengths",
                   "256,1024,4096", "--reps", "2")
    assert sweep.returncode == 0, sweep.stderr
    fit_json = out_dir / "fit.json"
    fit = _kvcal("fit", str(runs / "a"), "--output", str(fit_json))
    assert fit.returncode == 0, fit.stderr
    assert f"wrote {fit_json}" in fit.stdout and f"kvcal fit: {runs / 'a'}" in fit.stdout
    assert fit_json.is_file()
    plot = _kvcal("plot", str(fit_json), "-o", str(out_dir / "[b].png"))
    assert plot.returncode == 0, plot.stderr
    assert f"wrote {out_dir / '[b].png'}" in plot.stdout
