"""kvcal k8s-job --pairs (an Indexed Job, one pod a pair) and the fit that merges its folders."""

from __future__ import annotations

import json

import yaml

from kvcal.fit import fit_input
from kvcal.settings import SweepConfig
from kvcal.sweep.runner import run_sweep
from kvcal.fit_record import FitSettings

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
    script = job["spec"]["template"]["spec"]["containers"][0]["args"][0]
    assert '--pairs "/pairs/pair-$JOB_COMPLETION_INDEX.yaml"' in script and "--producer-url" not in script
    assert '--name "pair-$JOB_COMPLETION_INDEX"' in script and "kvcal fit /results/calib\n" in script
    assert "-eq 2 ] && mkdir /results/calib/.final" in script


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
