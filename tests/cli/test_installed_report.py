"""`kvcal report`'s interface contract through the installed script (issue 44): one file, exit codes, one line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kvcal.costs.simulated import SimCosts
from factories import sim_run

SCRIPT = Path(os.environ.get("KVCAL_CLI") or Path(sys.executable).with_name("kvcal"))
BASELINE = Path(__file__).resolve().parents[2] / "results" / "baselines" / "cpu-tiny"
pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason=f"no installed kvcal script at {SCRIPT}")


def _kvcal(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=300, cwd=cwd)


def _figure(html: str, key: str, run: str | None = None) -> str:
    where = f' data-kvcal-run="{run}"' if run else ""
    found = re.search(rf'data-kvcal="{key}"{where}[^>]*>([^<]*)<', html)
    assert found, key
    return found.group(1)


def test_a_runs_report_is_one_file_whose_threshold_is_emit_configs(tmp_path):
    done = _kvcal("report", str(BASELINE), "-o", "report.html", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]
    html = (tmp_path / "report.html").read_text()
    emitted = json.loads(_kvcal("emit-config", str(BASELINE), "--format", "json", cwd=tmp_path).stdout)
    fit = json.loads((BASELINE / "fit.json").read_text())
    assert _figure(html, "minCachedTokenDelta") == str(emitted["minCachedTokenDelta"])
    assert float(_figure(html, "break_even_tokens")) == fit["break_even_tokens"]
    assert _figure(html, "status") == fit["status"]


def test_compare_html_writes_the_page_report_compare_writes(tmp_path):
    fit = str(BASELINE / "fit.json")
    assert _kvcal("compare", str(BASELINE), fit, "--html", "c.html", cwd=tmp_path).returncode == 0
    assert _kvcal("report", "--compare", str(BASELINE), fit, "-o", "r.html", cwd=tmp_path).returncode == 0
    one, other = ((tmp_path / name).read_text() for name in ("c.html", "r.html"))
    for html in (one, other):
        assert _figure(html, "status", "current") == json.loads((BASELINE / "fit.json").read_text())["status"]
    assert one == other


@pytest.mark.parametrize(
    "args, says",
    [
        (["report", "no-such-run", "-o", "r.html"], "no such file"),
        (["report", "--fleet", str(BASELINE / "fit.json"), "-o", "r.html"], "not a kvcal fleet result"),
        (["report", "--compare", str(BASELINE), "-o", "r.html"], "--compare takes two inputs"),
        (["report", "--history", "--fleet", str(BASELINE), "-o", "r.html"], "not --history and --fleet"),
        (["report", str(BASELINE / "probes.jsonl"), "-o", "r.html"], str(BASELINE / "probes.jsonl")),
    ],
)
def test_an_input_kvcal_cannot_read_is_exit_2_with_one_line(tmp_path, args, says):
    done = _kvcal(*args, cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and says in done.stderr, done.stderr
    assert not (tmp_path / "r.html").exists()


def test_a_regression_still_writes_the_compare_page_for_the_job_to_publish(tmp_path):
    base = sim_run(tmp_path / "base")
    slower = sim_run(tmp_path / "slower", costs=SimCosts(pull_intercept_ms=30.0), seed=1)
    done = _kvcal("compare", str(base), str(slower), "--html", "c.html", cwd=tmp_path)
    assert done.returncode == 1 and "REGRESSION" in done.stderr + done.stdout
    html = (tmp_path / "c.html").read_text()
    assert "REGRESSION" in html and _figure(html, "status", "current") == "crossover"
