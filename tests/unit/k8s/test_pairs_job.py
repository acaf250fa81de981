"""kvcal k8s-job --pairs (an Indexed Job, one pod a pair) and the fit that merges its folders."""

from __future__ import annotations

import json

import yaml

from kvcal.fit import fit_input
from kvcal.settings.sweep import SweepConfig
from kvcal.sweep.runner import run_sweep
from kvcal.records.fit import FitSettings

PAIRS = """pairs:
  - {name: n1, class: same-node, producer_url: "http://10.0.3.17:8200", consumer_url: "http://10.0.3.18:8200"}
  - {name: x1, class: tcp, producer_url: "http://10.0.3.17:8200", consumer_url: "http://10.0.4.9:8200"}
"""
BASE = ("k8s-job", "--image", "ghcr.io/e/kvcal:0.1", "--model", "m")


def test_each_pod_sweeps_its_pair_into_its_folder_and_the_last_fits_them_all(tmp_path, kvcal):
    pairs = tmp_path / "pairs.yaml"
    pairs.write_text(PAIRS)
    result = kvcal(*BASE, "--pairs", pairs, "--pvc", "res", "--name", "calib", "--transport", "p2p-tier")
    assert result.code == 0, result.err
    config, job = [d for d in yaml.safe_load_all(result.out) if d]
    files = {key: json.loads(text)["pairs"] for key, text in config["data"].items()}
    assert files["pair-0.yaml"][0]["class"] == "same-node" and files["pair-1.yaml"][0]["consumer_url"].endswith("4.9:8200")
    assert files["pair-1.yaml"][0]["producer_p2p_host"] == "10.0.3.17"  # p2p-tier: the producer pod's own address
    assert job["spec"]["completions"] == 2 and job["spec"]["parallelism"] == 1
    args = job["spec"]["template"]["spec"]["containers"][0]["args"][0]
    assert "$JOB" not in args.replace("$$", "")  # every $ doubled: Kubernetes expands $(VAR) in args, $$ is one $
    script = args.replace("$$", "$")  # what the pod's shell runs
    assert '--pairs "/pairs/pair-$JOB_COMPLETION_INDEX.yaml"' in script and "--producer-url" not in script
    assert '--name "pair-$JOB_COMPLETION_INDEX"' in script and "kvcal fit /results/calib\n" in script
    # the final step is claimed after it succeeded (tests/cli/test_installed_k8s_rerun.py runs the script)
    assert script.index("emit-config") < script.index("touch /results/calib/final.done")


def test_bad_pairs_jobs_exit_2(tmp_path, kvcal):
    pairs = tmp_path / "pairs.yaml"
    pairs.write_text(PAIRS)
    cases = [((*BASE, "--pairs", pairs, "--producer-url", "http://10.0.0.1:1"), "drop --producer-url"),
             ((*BASE, "--pairs", pairs), "--pairs needs --pvc"),
             ((*BASE,), "or --pairs FILE"),
             ((*BASE, "--pairs", pairs, "--pvc", "r", "--parallelism", "3"), "--parallelism must be 1-2")]
    for args, says in cases:
        result = kvcal(*args)
        assert result.code == 2 and says in result.err and not result.out, (args, result.err)
    pairs.write_text(PAIRS.replace("10.0.3.18", "127.0.0.1"))
    result = kvcal(*BASE, "--pairs", pairs, "--pvc", "r")
    assert result.code == 2 and "pair n1" in result.err and "own pod" in result.err


def test_a_folder_of_one_pair_runs_is_fitted_as_one_campaign_per_class(tmp_path):
    root = tmp_path / "calib"
    curves = {"near": {"pull_intercept_ms": 20.0, "pull_per_token_us": 3.0},
              "far": {"pull_intercept_ms": 30.0, "pull_per_token_us": 12.0, "session_ms": 300.0}}
    for index, (name, sim) in enumerate(curves.items()):  # what the Indexed Job's pods leave on the volume
        config = SweepConfig.model_validate(dict(engine="sim", prefix_lengths=[256, 1024, 4096], reps=3, seed=index,
                                                 output_dir=root, name=f"pair-{index}",
                                                 pairs=[{"name": name, "class": f"{name}-class", "sim": sim}]))
        run_sweep(config)
    (root / "pair-0.done").touch()
    fit = fit_input(root, settings=FitSettings(n_resamples=100))
    assert set(fit.classes) == {"near-class", "far-class"} and fit.classes["far-class"].pairs == ["far"]
    assert fit.classes["far-class"].break_even_tokens > fit.classes["near-class"].break_even_tokens
    assert fit.n_duplicates_collapsed == 0 and fit.classes["far-class"].fit.session_cost.n_cold == 1


def _many_pairs(n: int) -> str:
    return "pairs:\n" + "".join(
        f'  - {{name: pair-{i:05d}, class: c{i % 3}, producer_url: "http://10.{i // 65536}.{i // 256 % 256}.{i % 256}:8200",'
        f' consumer_url: "http://10.200.{i // 256 % 256}.{i % 256}:8200"}}\n' for i in range(n))


def test_pairs_past_one_configmap_are_split_into_configmaps_that_each_fit(tmp_path, kvcal):
    """Before, 5,600+ pairs rendered one ConfigMap past Kubernetes' 1 MiB (and kubectl apply's 256 KiB annotation)."""
    pairs = tmp_path / "pairs.yaml"
    pairs.write_text(_many_pairs(6000))
    result = kvcal(*BASE, "--pairs", pairs, "--pvc", "res", "--name", "calib")
    assert result.code == 0, result.err
    docs = [d for d in yaml.safe_load_all(result.out) if d]
    configs, job = docs[:-1], docs[-1]
    assert len(configs) >= 5 and job["kind"] == "Job" and job["spec"]["completions"] == 6000
    keys = [key for c in configs for key in c["data"]]
    assert sorted(keys) == sorted(f"pair-{i}.yaml" for i in range(6000))  # every pair once
    for config in configs:
        assert len(json.dumps(config, separators=(",", ":"))) < 256 * 1024  # kubectl apply's last-applied annotation
        assert sum(len(k) + len(v) for k, v in config["data"].items()) < 1024 * 1024  # a ConfigMap's data
    (volume,) = [v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == "pairs"]
    assert [s["configMap"]["name"] for s in volume["projected"]["sources"]] == [c["metadata"]["name"] for c in configs]
    assert configs[0]["metadata"]["name"] == "calib-pairs" and configs[1]["metadata"]["name"] == "calib-pairs-1"


def test_a_pair_too_big_for_any_configmap_is_refused_with_the_limit_named(tmp_path, kvcal, monkeypatch):
    """A pair's own keys are bounded (names of 63 characters, URLs as long as the HTTP client takes), so no real
    pair fills a ConfigMap: the refusal is held at a lowered fill."""
    from kvcal.k8s import pairs_job as k8s_pairs

    monkeypatch.setattr(k8s_pairs, "CONFIGMAP_FILL_BYTES", 100)
    pairs = tmp_path / "pairs.yaml"
    pairs.write_text(PAIRS)
    result = kvcal(*BASE, "--pairs", pairs, "--pvc", "res")
    assert result.code == 2 and not result.out
    assert "pair n1: its file takes" in result.err and "256 KiB" in result.err and "1 MiB" in result.err