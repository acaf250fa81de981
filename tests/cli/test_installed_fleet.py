"""`kvcal fleet`'s interface contract through the installed script (issue 31): keys, shapes, exit codes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import typing
from pathlib import Path

import psutil
import pytest
from pydantic import BaseModel

from kvcal.fleet.workload import Dist, Workload

SCRIPT = Path(os.environ.get("KVCAL_CLI") or Path(sys.executable).with_name("kvcal"))
EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "fleet-workload.yaml"
pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason=f"no installed kvcal script at {SCRIPT}")
FIGURES = ("goodput_rps", "ttft_p50_ms", "ttft_p90_ms", "prefill_queue_p90", "pull_share")


def _kvcal(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=300, cwd=cwd, env=env)


@pytest.fixture(scope="module")
def fit(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fleet")
    assert _kvcal("sweep", "--engine", "sim", "--prefix-lengths", "256,512,1024,2048", "--reps", "2",
                  "--output-dir", str(root), "--name", "r", cwd=root).returncode == 0
    assert _kvcal("fit", str(root / "r"), "--resamples", "200", cwd=root).returncode == 0
    return root / "r" / "fit.json"


def test_the_json_contract_at_a_near_idle_rate(fit, tmp_path):
    done = _kvcal("fleet", str(fit), "--workload", str(EXAMPLE), "--pods", "2", "--thresholds", "auto", "--rate", "0.05",
                  "--duration", "120", "--seeds", "1", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    emitted = json.loads(_kvcal("emit-config", str(fit), "--format", "json", cwd=tmp_path).stdout)
    assert out["idle_threshold"] == emitted["minCachedTokenDelta"] and out["idle_threshold_reason"] is None
    assert isinstance(out["best_threshold"], int) and isinstance(out["recommended_threshold"], int)
    # Near idle the fleet cannot tell thresholds apart: emit-config's own threshold comes back, with nothing to explain.
    assert abs(out["recommended_threshold"] - out["idle_threshold"]) <= out["block_size"]
    assert out["recommended_reason"] is None
    policies = {row["policy"] for row in out["rows"]}
    assert {"no-p2p", "always-pull", "threshold"} <= policies
    for row in out["rows"]:
        assert (row["threshold"] is None) == (row["policy"] != "threshold")
        for key in FIGURES:
            figure = row[key]
            assert isinstance(figure["value"], float) and len(figure["ci"]) == 2
            assert figure["ci"][0] <= figure["value"] <= figure["ci"][1]


def test_an_unknown_workload_key_is_exit_2(fit, tmp_path):
    bad = tmp_path / "w.yaml"
    bad.write_text(EXAMPLE.read_text() + "\nsessionz: 3\n")
    done = _kvcal("fleet", str(fit), "--workload", str(bad), "--json", cwd=tmp_path)
    assert done.returncode == 2 and "sessionz" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def _fields(model, prefix: str = ""):
    """(dotted key, description) of every field of the workload records, nested records walked, distributions leaves."""
    for name, field in model.model_fields.items():
        yield prefix + name, field.description
        sub = next((a for a in (field.annotation, *typing.get_args(field.annotation))
                    if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if sub is not None and sub is not Dist:
            yield from _fields(sub, f"{prefix}{name}.")


def test_the_help_lists_every_workload_key_with_its_description(tmp_path):
    done = _kvcal("fleet", "--help", cwd=tmp_path)
    assert done.returncode == 0
    shown = " ".join(done.stdout.split())
    for key, description in [*_fields(Workload), *(("dist", f.description) for f in Dist.model_fields.values())]:
        assert " ".join(description.split()).rstrip(".") in shown, key
    for key, _ in _fields(Workload):
        assert f"{key}:" in shown, key


def test_cheap_arguments_are_checked_before_the_fit_is_read(tmp_path):
    for flag, value in (("--pods", "0"), ("--seeds", "0"), ("--resamples", "-1")):
        done = _kvcal("fleet", str(tmp_path / "no-such-run"), "--workload", str(EXAMPLE), flag, value, cwd=tmp_path)
        assert done.returncode == 2 and flag in done.stderr and "no-such-run" not in done.stderr, done.stderr


def test_a_relative_trace_path_is_read_beside_the_workload_file(fit, tmp_path):
    folder = tmp_path / "work"
    folder.mkdir()
    records = [{"start_time": 100.0 + i, "error": None,
                "info": {"input_tokens": 1024, "response_metrics": {"output_token_times": [1.0]}}} for i in range(20)]
    (folder / "trace.json").write_text(json.dumps(records))
    (folder / "w.yaml").write_text("duration_s: 20\nwarmup_s: 1\ntrace:\n  per_request: trace.json\n")
    done = _kvcal("fleet", str(fit), "--workload", "work/w.yaml", "--pods", "2", "--thresholds", "256", "--seeds", "1",
                  "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rows"]


def test_json_keeps_stdout_for_the_data_and_prints_its_warnings_on_stderr(fit, tmp_path):
    """Issue 29, item 3: a fit without bootstrap samples is warned about on stderr, and the JSON keeps the warning."""
    bare = tmp_path / "bare.json"
    assert _kvcal("fit", str(fit.parent), "--resamples", "0", "-o", str(bare), cwd=tmp_path).returncode == 0
    done = _kvcal("fleet", str(bare), "--workload", str(EXAMPLE), "--pods", "2", "--thresholds", "auto", "--rate", "0.05",
                  "--duration", "60", "--seeds", "1", "--resamples", "4", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["resamples"] == 0
    assert any("no usable bootstrap samples" in w for w in out["warnings"])
    assert "kvcal: warning: --resamples 4: the fit kept no usable bootstrap samples" in done.stderr


@pytest.mark.parametrize("edit, says", [
    (("mean: 400, cv: 0.8", "mean: 1e300, cv: 0.8"), "less than or equal to"),
    (("mean: 8}", "mean: 1e400}"), "input_tokens"),  # YAML reads 1e400 as inf: refused by the reader or the model
])
def test_a_workload_number_no_simulation_could_hold_is_exit_2(edit, says, fit, tmp_path):
    bad = tmp_path / "w.yaml"
    bad.write_text(EXAMPLE.read_text().replace(*edit))
    done = _kvcal("fleet", str(fit), "--workload", str(bad), "--pods", "2", "--duration", "30", "--seeds", "1", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_trace_nested_too_deep_is_exit_2(fit, tmp_path):
    trace = tmp_path / "trace.json"
    trace.write_text("[" * 100_000 + "]" * 100_000)
    work = tmp_path / "w.yaml"
    work.write_text(f"duration_s: 30\nwarmup_s: 0\ntrace:\n  per_request: {trace}\n")
    done = _kvcal("fleet", str(fit), "--workload", str(work), "--pods", "2", "--seeds", "1", cwd=tmp_path)
    assert done.returncode == 2 and "nested too deep" in done.stderr, done.stderr


def test_the_study_says_its_size_before_the_first_run(fit, tmp_path):
    done = _kvcal("fleet", str(fit), "--workload", str(EXAMPLE), "--pods", "2", "--thresholds", "640", "--rate", "0.05",
                  "--duration", "60", "--seeds", "1", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith("kvcal: fleet study: 3 runs, about 45 simulated requests"), done.stderr
    assert "MiB of memory" in lines[0]
    out = json.loads(done.stdout)
    assert out["recommended_rule"].startswith("recommended_threshold is the simulated threshold")


def test_a_study_ten_times_the_cap_is_refused_naming_the_flag(fit, tmp_path):
    # The example at 1.5 sessions/s: 3 seeds x 3 policies x about 1,350 requests = 12,150; the cap at a tenth of that.
    args = ("fleet", str(fit), "--workload", str(EXAMPLE), "--pods", "2", "--thresholds", "640", "--seeds", "3")
    done = _kvcal(*args, "--max-simulated-requests", "1215", cwd=tmp_path)
    assert done.returncode == 2 and "--max-simulated-requests" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "fleet run" not in done.stderr
    huge = _kvcal("fleet", str(fit), "--workload", str(EXAMPLE), "--seeds", "1000", "--resamples", "1000", cwd=tmp_path)
    assert huge.returncode == 2 and "--max-simulated-requests" in huge.stderr, huge.stderr


@pytest.mark.parametrize("args, says", [
    (("--thresholds", "1" + "0" * 400), "--thresholds"),
    (("--plot", "x.txt"), "--plot"),
    (("--thresholds", "640,abc"), "--thresholds"),
])
def test_bad_flags_are_one_line_exit_2_before_the_fit_is_read(args, says, tmp_path):
    done = _kvcal("fleet", str(tmp_path / "no-such-run"), "--workload", str(EXAMPLE), *args, cwd=tmp_path)
    assert done.returncode == 2 and says in done.stderr and "no-such-run" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_runs_where_nothing_completes_are_refused_not_recommended_from(fit, tmp_path):
    bad = tmp_path / "w.yaml"
    bad.write_text(EXAMPLE.read_text().replace("{dist: lognormal, mean: 400, cv: 0.8}", "1000000000"))
    done = _kvcal("fleet", str(fit), "--workload", str(bad), "--pods", "2", "--thresholds", "640", "--rate", "0.2",
                  "--duration", "120", "--seeds", "1", "--json", cwd=tmp_path)
    assert done.returncode == 2 and "no request can complete" in done.stderr and not done.stdout, done.stderr


# --jobs and --ray (issue 45): the same JSON whoever runs the runs; Ctrl-C stops every worker.

def test_two_jobs_print_the_same_json_as_one(fit, tmp_path):
    study = ("fleet", str(fit), "--workload", str(EXAMPLE), "--pods", "2", "--thresholds", "256,1024", "--rate", "0.5",
             "--duration", "60", "--seeds", "2", "--resamples", "2", "--json")
    one, two = _kvcal(*study, "--jobs", "1", cwd=tmp_path), _kvcal(*study, "--jobs", "2", cwd=tmp_path)
    assert one.returncode == two.returncode == 0, one.stderr + two.stderr
    assert one.stdout == two.stdout and '"rows"' in one.stdout


def test_jobs_out_of_bounds_is_exit_2_before_the_fit_is_read(tmp_path):
    done = _kvcal("fleet", str(tmp_path / "no-such-run"), "--workload", str(EXAMPLE), "--jobs", "0", cwd=tmp_path)
    assert done.returncode == 2 and "--jobs" in done.stderr and "no-such-run" not in done.stderr, done.stderr


def test_without_ray_the_flag_is_one_line_naming_the_install(tmp_path):
    shadow = tmp_path / "shadow" / "ray"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('ray is not installed here')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shadow.parent), os.environ.get("PYTHONPATH", "")])}
    done = _kvcal("fleet", str(tmp_path / "no-such-run"), "--workload", str(EXAMPLE), "--ray", "local", cwd=tmp_path,
                  env=env)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "pip install 'kvcal[ray]'" in done.stderr


def test_ctrl_c_stops_every_worker(fit, tmp_path):
    # A study far longer than the test: it only has to start its workers before it is interrupted.
    proc = subprocess.Popen([str(SCRIPT), "fleet", str(fit), "--workload", str(EXAMPLE), "--pods", "8", "--rate", "4",
                             "--duration", "3000", "--seeds", "20", "--jobs", "2",
                             "--max-simulated-requests", "1000000000"], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        parent = psutil.Process(proc.pid)
        deadline = time.monotonic() + 120
        while len(parent.children(recursive=True)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        workers = parent.children(recursive=True)
        assert len(workers) >= 2, "the study never started its workers"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130, proc.stderr.read()
        _, alive = psutil.wait_procs(workers, timeout=10)
        assert not alive, f"workers outlived kvcal: {[p.pid for p in alive]}"
    finally:
        if proc.poll() is None:
            proc.kill()
