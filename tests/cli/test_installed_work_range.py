"""``kvcal emit-config --format work-range`` and its two flags through the INSTALLED ``kvcal`` script.

The exit codes a user meets: 2 without ``--ttft-penalty-ms``, 2 for ``--ttft-penalty-ms`` or
``--max-model-len`` on a format that does not read them, 2 without a max model length, 3 on an
empty band (with the guide's advice), 0 for ``--format json`` on an empty band (boundary null).
Every refusal is one line on stderr and nothing on stdout.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

SCRIPT = Path(sys.executable).with_name("kvcal")
GLM = Path(__file__).resolve().parents[1] / "fixtures" / "llmd" / "glm-5.2-h200-upstream-tier.log"
pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason=f"no installed kvcal script at {SCRIPT}")


def _kvcal(*args: object, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=300, cwd=cwd,
                          stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def fit(tmp_path_factory) -> Path:
    """llm-d's GLM-5.2 H200 table, fitted once by the installed script (it records no max model length)."""
    where = tmp_path_factory.mktemp("glm")
    done = _kvcal("fit", GLM, "--block-size", "64", "--resamples", "400", "-o", "fit.json", cwd=where)
    assert done.returncode == 0, done.stderr
    return where / "fit.json"


def _refused(done: subprocess.CompletedProcess, code: int, *phrases: str) -> None:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == code, done.stdout + done.stderr
    assert done.stdout == "" and len(lines) == 1 and lines[0].startswith("kvcal: error: "), done.stderr
    for phrase in phrases:
        assert phrase in lines[0], lines[0]


def test_work_range_without_the_budget_is_exit_2(fit, tmp_path) -> None:
    _refused(_kvcal("emit-config", fit, "--format", "work-range", "--max-model-len", "120000", cwd=tmp_path), 2,
             "--format work-range needs --ttft-penalty-ms")


@pytest.mark.parametrize("fmt", ["plugin", "affinity", "costmodel", "vllm", "env"])
def test_the_work_range_flags_on_another_format_are_exit_2(fmt, fit, tmp_path) -> None:
    for flag, value in (("--ttft-penalty-ms", "3500"), ("--max-model-len", "120000")):
        _refused(_kvcal("emit-config", fit, "--format", fmt, flag, value, cwd=tmp_path), 2,
                 f"{flag} applies only to --format helm, json and work-range")


def test_no_max_model_len_anywhere_is_exit_2_naming_the_flag(fit, tmp_path) -> None:
    _refused(_kvcal("emit-config", fit, "--format", "work-range", "--ttft-penalty-ms", "3500", cwd=tmp_path), 2,
             "pass --max-model-len")


def test_an_empty_band_is_exit_3_with_the_guides_advice(fit, tmp_path) -> None:
    done = _kvcal("emit-config", fit, "--format", "work-range", "--ttft-penalty-ms", "1000", "--max-model-len",
                  "120000", cwd=tmp_path)
    _refused(done, 3, "band is empty", "raise the budget", "do not split the prefill pool")


def test_json_on_an_empty_band_is_exit_0_with_a_null_boundary(fit, tmp_path) -> None:
    done = _kvcal("emit-config", fit, "--format", "json", "--ttft-penalty-ms", "1000", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["work_range"]["boundary"] is None


def test_work_range_prints_the_set_and_the_alpha_note(fit, tmp_path) -> None:
    done = _kvcal("emit-config", fit, "--format", "work-range", "--ttft-penalty-ms", "3500", "--max-model-len",
                  "120000", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = yaml.safe_load(done.stdout)
    assert set(out) == {"labels", "plugins"} and out["labels"]["context_length_range"] == "0-120000"
    assert "--allow-experimental-plugins" in done.stderr
