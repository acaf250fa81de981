"""The in-cluster Jobs' scripts run for real, here (issue 55, item 7): safe to rerun, a refused emit destroys nothing.

``kvcal k8s-job`` renders the manifest through the INSTALLED script; the container's script is taken
out of it as Kubernetes hands it to ``/bin/sh -c`` (``$$`` is one ``$``), its /results and /pairs moved
into a temporary folder, and run with ``sh``. A stand-in ``kvcal`` first on PATH plays the steps
that need a cluster: ``sweep`` lays down a simulated run folder made beforehand (the engines are
not here), ``fit`` fails once when told to, or leaves a fit whose emit is refused; every other
call (``fit`` otherwise, ``emit-config``) is the real kvcal.

Before: the ``--pairs`` pod script claimed the final step (``mkdir .final``) before fitting, so a
rerun after a failed fit never fitted again, and both scripts wrote ``emit-config > emit.json``, so
a refused emit (exit 3) left an empty emit.json in place of the last good one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

SCRIPT = Path(sys.executable).with_name("kvcal")
pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason=f"no installed kvcal script at {SCRIPT}")
PAIRS = """pairs:
  - {name: near, class: same-node, producer_url: "http://10.0.3.17:8200", consumer_url: "http://10.0.3.18:8200"}
  - {name: far, class: tcp, producer_url: "http://10.0.3.17:8200", consumer_url: "http://10.0.4.9:8200"}
"""
STAND_IN = r"""#!/bin/sh
# kvcal as the pod runs it, with the steps that need a cluster played from $STATE (see the test's docstring).
set -eu
echo "$*" >> "$STATE/calls"
case "$1" in
sweep)
  out= name= resume=
  while [ $# -gt 0 ]; do
    case "$1" in --output-dir) out=$2; shift ;; --name) name=$2; shift ;; --resume) resume=1 ;; esac
    shift
  done
  if [ -n "$resume" ]; then [ -d "$out/$name" ]; exit 0; fi
  if [ -e "$out/$name" ]; then echo "kvcal: error: run folder exists; add --resume" >&2; exit 2; fi
  mkdir -p "$out" && cp -R "$STATE/runs/$name" "$out/$name" ;;
fit)
  if [ -e "$STATE/fail-fit" ]; then rm "$STATE/fail-fit"; echo "kvcal: error: the fit failed (stand-in)" >&2; exit 4; fi
  if [ -e "$STATE/refusing-fit.json" ]; then cp "$STATE/refusing-fit.json" "$2/fit.json"; exit 0; fi
  exec "$KVCAL_REAL" "$@" ;;
*)
  exec "$KVCAL_REAL" "$@" ;;
esac
"""


def _kvcal(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)


def _sim_run(root: Path, name: str, *extra: str) -> Path:
    done = _kvcal("sweep", "--engine", "sim", "--prefix-lengths", "256,1024,4096", "--reps", "3", "--output-dir", root,
                  "--name", name, *extra, cwd=root)
    assert done.returncode == 0, done.stderr
    return root / name


@pytest.fixture(scope="module")
def state(tmp_path_factory) -> Path:
    """The stand-in's folder: the run folders its sweep lays down, the refusing fit, the stand-in itself."""
    root = tmp_path_factory.mktemp("k8s-rerun")
    runs = root / "runs"
    runs.mkdir()
    for index, (name, link) in enumerate((("near", "same-node"), ("far", "tcp"))):
        (root / f"{name}.yaml").write_text(f"pairs:\n  - {{name: {name}, class: {link}}}\n")
        _sim_run(runs, f"pair-{index}", "--pairs", str(root / f"{name}.yaml"), "--seed", str(index))
    _sim_run(runs, "calib")
    (root / "slow.yaml").write_text("sim:\n  pull_intercept_ms: 40\n  pull_per_token_us: 30\n")
    slow = _sim_run(root, "slow", "--config", str(root / "slow.yaml"))
    assert _kvcal("fit", slow, "--resamples", "100", cwd=root).returncode == 0
    shutil.copy(slow / "fit.json", root / "slow-fit.json")  # recompute wins everywhere: emit-config exits 3
    bin_dir = root / "bin"
    bin_dir.mkdir()
    (bin_dir / "kvcal").write_text(STAND_IN)
    (bin_dir / "kvcal").chmod(0o755)
    return root


@pytest.fixture
def pod(state, tmp_path):
    """Run the rendered script as pod ``index`` would: (exit code, stdout, stderr)."""
    (tmp_path / "state").mkdir()
    shutil.copytree(state / "runs", tmp_path / "state" / "runs")
    results = tmp_path / "results"

    def run(manifest: str, index: int = 0) -> subprocess.CompletedProcess:
        docs = [d for d in yaml.safe_load_all(manifest) if d]
        job = next(d for d in docs if d["kind"] == "Job")
        script = job["spec"]["template"]["spec"]["containers"][0]["args"][0].replace("$$", "$")  # Kubernetes' $$
        script = script.replace("/results", str(results)).replace("/pairs/", f"{tmp_path}/pairs/")
        for config in (d for d in docs if d["kind"] == "ConfigMap"):
            (tmp_path / "pairs").mkdir(exist_ok=True)
            for key, text in config["data"].items():
                (tmp_path / "pairs" / key).write_text(text)
        env = {**os.environ, "PATH": f"{state / 'bin'}:{os.environ['PATH']}", "STATE": str(tmp_path / "state"),
               "KVCAL_REAL": str(SCRIPT), "JOB_COMPLETION_INDEX": str(index)}
        return subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, timeout=600,
                              cwd=tmp_path, stdin=subprocess.DEVNULL)

    run.results = results
    run.state = tmp_path / "state"
    return run


def _pairs_job(state: Path) -> str:
    (state / "pairs.yaml").write_text(PAIRS)
    done = _kvcal("k8s-job", "--image", "img", "--model", "m", "--pairs", state / "pairs.yaml", "--pvc", "res",
                  "--name", "calib", cwd=state)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _one_pair_job(state: Path) -> str:
    done = _kvcal("k8s-job", "--image", "img", "--model", "m", "--producer-url", "http://10.0.3.17:8200",
                  "--consumer-url", "http://10.0.3.18:8200", "--pvc", "res", "--name", "calib", cwd=state)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _log_json(log: str) -> dict:
    """The JSON the pod's log ends in (kvcal fit's report may come before it)."""
    start = log.rfind("\n{\n")
    return json.loads(log[start + 1:] if start >= 0 else log)


def _calls(pod, step: str) -> int:
    return sum(1 for line in (pod.state / "calls").read_text().splitlines() if line.split()[0] == step)


def test_a_pairs_pod_rerun_after_a_failed_fit_fits_again(state, pod):
    manifest = _pairs_job(state)
    assert pod(manifest, 0).returncode == 0  # pair 0 swept; pair 1 not yet: no final step
    (pod.state / "fail-fit").touch()
    failed = pod(manifest, 1)
    assert failed.returncode == 4 and "the fit failed" in failed.stderr
    run_dir = pod.results / "calib"
    assert not (run_dir / "emit.json").exists() and not (run_dir / "final.done").exists()
    rerun = pod(manifest, 0)  # the Job applied again: pod 0 finds every pair done and fits, again
    assert rerun.returncode == 0, rerun.stderr
    assert _calls(pod, "fit") == 2 and "sweep" in (pod.state / "calls").read_text().splitlines()[-3]
    emitted = json.loads((run_dir / "emit.json").read_text())
    assert emitted["minCachedTokenDelta"] > 0 and _log_json(rerun.stdout) == emitted
    assert set(json.loads((run_dir / "fit.json").read_text())["classes"]) == {"same-node", "tcp"}
    last = pod(manifest, 1)  # done once: no third fit; its log still ends in the result
    assert last.returncode == 0 and _calls(pod, "fit") == 2 and _log_json(last.stdout) == emitted


def test_a_refused_emit_leaves_the_last_emit_json_of_a_pairs_job_intact(state, pod):
    manifest = _pairs_job(state)
    assert pod(manifest, 0).returncode == 0 and pod(manifest, 1).returncode == 0
    run_dir = pod.results / "calib"
    good = (run_dir / "emit.json").read_bytes()
    (run_dir / "final.done").unlink()  # a new final step, over a fit whose emit is refused
    shutil.copy(state / "slow-fit.json", pod.state / "refusing-fit.json")
    refused = pod(manifest, 0)
    assert refused.returncode == 3 and "P2P is not recommended" in refused.stderr
    assert (run_dir / "emit.json").read_bytes() == good and not (run_dir / "final.done").exists()


def test_the_one_pair_job_reruns_into_its_folder_and_a_refused_emit_leaves_emit_json(state, pod):
    manifest = _one_pair_job(state)
    first = pod(manifest)
    assert first.returncode == 0, first.stderr
    emit_json = pod.results / "calib" / "emit.json"
    good = emit_json.read_bytes()
    assert _log_json(first.stdout) == json.loads(good)
    shutil.copy(state / "slow-fit.json", pod.state / "refusing-fit.json")
    rerun = pod(manifest)  # before: the sweep refused the existing folder, so a rerun never fitted
    assert rerun.returncode == 3 and "P2P is not recommended" in rerun.stderr, rerun.stderr
    assert "--resume" in (pod.state / "calls").read_text() and emit_json.read_bytes() == good


BAD_PAIRS = [
    ('producer_p2p_host: "127.0.0.1"', "pair near: producer_p2p_host: 127.0.0.1 inside the Job is the Job's own pod"),
    ('producer_p2p_host: "bad host!"', "pair near: producer_p2p_host: 'bad host!' is not a host name or IP address"),
    ('producer_p2p_port: 70000', "pair near: producer_p2p_port"),
    ('producer-url: "http://10.0.3.19:8200"', "pair near: 'producer_url' and 'producer-url' are one setting"),
    ('link_class: tcp', "pair near: 'class' and 'link_class' are one setting"),
]


@pytest.mark.parametrize("key, says", BAD_PAIRS, ids=[k.split(":")[0] for k, _ in BAD_PAIRS])
def test_a_pair_key_meets_the_check_its_flag_meets(tmp_path, key, says):
    """Before, a pair's producer_p2p_host skipped the flag's check, and of two spellings of a key one was kept."""
    pairs = tmp_path / "pairs.yaml"
    pairs.write_text(PAIRS.replace('consumer_url: "http://10.0.3.18:8200"', f'consumer_url: "http://10.0.3.18:8200", {key}'))
    done = _kvcal("k8s-job", "--image", "img", "--model", "m", "--pairs", pairs, "--pvc", "res", cwd=tmp_path)
    assert done.returncode == 2 and says in done.stderr and not done.stdout, done.stderr
    assert len(done.stderr.splitlines()) == 1


def test_a_pair_side_channel_is_refused_for_a_transport_whose_pull_never_names_it(tmp_path):
    """The flag `--producer-p2p-host` with nixl-pd is refused by sweep; the pair's key was ignored silently."""
    pairs = tmp_path / "pairs.yaml"
    pairs.write_text(PAIRS.replace('"http://10.0.3.18:8200"', '"http://10.0.3.18:8200", producer_p2p_host: 10.0.3.17'))
    for args in (["k8s-job", "--image", "img", "--model", "m", "--pvc", "res"],
                 ["sweep", "--dry-run", "--model", "m", "--max-model-len", "8192", "--prefix-lengths", "256,512"]):
        done = _kvcal(*args, "--pairs", pairs, "--transport", "nixl-pd", cwd=tmp_path)
        assert done.returncode == 2 and "pair near: producer_p2p_host apply to --transport p2p-tier only" in done.stderr
    flag = _kvcal("k8s-job", "--image", "img", "--model", "m", "--pvc", "res", "--pairs", pairs, "--producer-p2p-port",
                  "7000", cwd=tmp_path)
    assert flag.returncode == 2 and "--pairs names each pair's side channel" in flag.stderr


def test_emit_config_output_is_replaced_whole_and_a_refused_emit_leaves_it(state, tmp_path):
    """`emit-config -o FILE`: the artifact written whole; exit 3 (nothing to emit) leaves the previous file as it was."""
    good = _kvcal("emit-config", state / "runs" / "calib", "--format", "json", "-o", tmp_path / "emit.json", cwd=tmp_path)
    assert good.returncode == 0 and not good.stdout and "wrote" in good.stderr, good.stderr
    before = (tmp_path / "emit.json").read_bytes()
    assert json.loads(before)["minCachedTokenDelta"] > 0
    refused = _kvcal("emit-config", state / "slow-fit.json", "--format", "json", "-o", tmp_path / "emit.json",
                     cwd=tmp_path)
    assert refused.returncode == 3 and (tmp_path / "emit.json").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["emit.json"]  # no temporary file left behind
    onto_input = _kvcal("emit-config", state / "slow-fit.json", "-o", state / "slow-fit.json", cwd=tmp_path)
    assert onto_input.returncode == 2 and "is an input of this command" in onto_input.stderr
