"""The router's cost model under load: designed fit, observational inputs, records, emit, plot."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from kvcal.emit.costmodel_block import LABEL as COSTMODEL_LABEL
from kvcal.emit.formats import EmitOptions, emit
from kvcal.engines.sim import SimCosts
from kvcal.engines.sim_fleet import FleetShape, write_production
from kvcal.errors import InputError
from kvcal.fit import fit_input, load_fit
from kvcal.fit.costmodel import fit_cost_model
from kvcal.fit.costmodel_inputs import IdleCurves, LoadedProbes
from kvcal.fit.observational import join, parse_epp_log, parse_per_request
from kvcal.records.fit import FitSettings
from kvcal.records.run import ProbeRecord
from kvcal.settings.sweep import SweepConfig
from kvcal.sweep.load import LOAD_STATES
from kvcal.sweep.runner import run_sweep

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "llmd" / "loaded" / "completion"
DELAYS = {"source_wait_ms": 30.0, "requeue_ms": 50.0, "busy_computing_ms": 80.0}
KEYS = ("transferFixedMs", "sourceWaitMs", "requeueMs", "prefillMicrosecondsPerToken", "transferMicrosecondsPerToken")


@pytest.fixture(scope="module")
def loaded_run(tmp_path_factory):
    """One designed sim run (affine recompute so P has one true value) and its fit."""
    folder = tmp_path_factory.mktemp("loaded")
    sim = {**DELAYS, "recompute_per_token2_ns": 0.0}
    config = SweepConfig.model_validate(dict(engine="sim", prefix_lengths=[256, 1024, 4096], reps=3, seed=3,
                                             output_dir=folder, name="run", load_states=list(LOAD_STATES), sim=sim))
    outcome = run_sweep(config)
    return outcome.run_dir, fit_input(outcome.run_dir, settings=FitSettings(n_resamples=1000))


def test_designed_fit_holds_the_truth_in_most_seeds(tmp_path):
    costs = SimCosts()
    truth = {"transferFixedMs": costs.pull_intercept_ms - costs.recompute_intercept_ms, "sourceWaitMs": 30.0,
             "requeueMs": 50.0, "prefillMicrosecondsPerToken": costs.recompute_per_token_us,
             "transferMicrosecondsPerToken": costs.pull_per_token_us, "busy_computing_ms": 80.0}
    held = {key: 0 for key in truth}
    seeds = range(6)
    for seed in seeds:
        config = SweepConfig.model_validate(dict(engine="sim", prefix_lengths=[256, 1024, 4096], reps=3, seed=seed,
                                                 output_dir=tmp_path, name=f"s{seed}", load_states=list(LOAD_STATES),
                                                 sim={**DELAYS, "recompute_per_token2_ns": 0.0}))
        cm = fit_input(run_sweep(config).run_dir, settings=FitSettings(n_resamples=500, seed=seed)).cost_model
        for key, value in truth.items():
            low, high = getattr(cm, key).ci
            held[key] += low <= value <= high
    assert all(count >= 4 for count in held.values()), held


def test_designed_fit_reports_its_design(loaded_run):
    _, fit = loaded_run
    cm = fit.cost_model
    assert cm.design == "designed" and cm.busyQueueThreshold == 1 and cm.n_requests == 72
    assert cm.diagnostics.n_pull_sizes == 3 and cm.diagnostics.busy_source_pull_share == 0.5
    assert cm.diagnostics.condition_number < 100
    assert not [w for w in cm.warnings if "cannot be separated" in w]


def test_the_idle_curves_use_only_probes_measured_idle(loaded_run):
    _, fit = loaded_run
    assert fit.n_probes == 18  # the idle state's 3 lengths x 2 legs x 3 reps
    assert 500 < fit.break_even_tokens < 1000  # the busy states would drag it if mixed in


def test_fit_json_carries_the_contract_keys(loaded_run, kvcal):
    run, _ = loaded_run
    res = kvcal("fit", run, "--json", "--resamples", "200")
    assert res.code == 0, res.err
    cm = json.loads(res.out)["cost_model"]
    for key in KEYS:
        assert isinstance(cm[key]["value"], float)
        low, high = cm[key]["ci"]
        assert low <= cm[key]["value"] <= high
    assert cm["busyQueueThreshold"] == 1 and isinstance(cm["busyQueueThreshold"], int)


def test_a_fit_without_cost_model_still_loads(tmp_path, loaded_run):
    _, fit = loaded_run
    data = json.loads(fit.model_dump_json(by_alias=True))
    del data["cost_model"]
    (tmp_path / "old.json").write_text(json.dumps(data))
    assert load_fit(tmp_path / "old.json").cost_model is None
    old_probe = {"schema": "kvcal.probe/1", "probe_id": "L256-pull-r0", "plan_index": 0, "attempt": 0, "prefix_tokens": 256,
                 "leg": "pull", "rep": 0, "ttft_ms": 20.0, "bytes_moved": 5, "valid": True, "started_at": "x"}
    record = ProbeRecord.model_validate(old_probe)
    assert (record.load_state, record.source_waiting, record.computing_waiting) == (None, None, None)


def synthetic(threshold_truth: int = 1, n: int = 400, seed: int = 0, intent_lies: bool = False):
    """Requests whose TTFT follows the model with busy decided by the MEASURED queues."""
    rng = np.random.default_rng(seed)
    pulled = rng.random(n) < 0.5
    length = rng.choice([256.0, 1024.0, 4096.0], n)
    sw = rng.integers(0, 3, n)
    cw = rng.integers(0, 3, n)
    bs, bc = sw >= threshold_truth, cw >= threshold_truth
    ttft = (5 + np.where(pulled, 15 + 3 * length / 1e3, 25 * length / 1e3)) * rng.lognormal(0, 0.03, n)
    ttft += 80 * bc + pulled * (30 * bs + 50 * bc)
    return LoadedProbes(pulled=pulled, uncached=np.where(pulled, 0, length), delta=np.where(pulled, length, 0),
                        ttft_ms=ttft, source_waiting=sw, computing_waiting=cw, stratum=pulled.astype(int) * 10 + (length == 1024),
                        design="designed")


def idle_truth():
    rec, pull = np.array([5.0, 25.0, 0.0]), np.array([20.0, 3.0, 0.0])
    return IdleCurves(rec, pull, rec[None, :], pull[None, :], 700.0)


def test_busy_is_classified_from_measured_queues_against_the_threshold():
    data = synthetic(threshold_truth=2)
    right = fit_cost_model(data, idle_truth(), threshold=2, settings=FitSettings(n_resamples=200))
    wrong = fit_cost_model(data, idle_truth(), threshold=1, settings=FitSettings(n_resamples=200))
    assert right.sourceWaitMs.ci[0] <= 30 <= right.sourceWaitMs.ci[1]
    assert right.requeueMs.ci[0] <= 50 <= right.requeueMs.ci[1]
    assert not wrong.sourceWaitMs.ci[0] <= 30 <= wrong.sourceWaitMs.ci[1]
    assert right.busyQueueThreshold == 2


def test_an_unexercised_constant_is_named_not_invented():
    data = synthetic()
    quiet = LoadedProbes(**{**data.__dict__, "source_waiting": np.zeros_like(data.source_waiting)})
    cm = fit_cost_model(quiet, idle_truth(), settings=FitSettings(n_resamples=200))
    assert cm.sourceWaitMs.value == 0.0 and cm.sourceWaitMs.ci is None
    assert any("sourceWaitMs cannot be separated" in w for w in cm.warnings)
    with pytest.raises(InputError, match="threshold"):
        fit_cost_model(data, idle_truth(), threshold=0)


def test_per_request_parser_reads_ttft_ids_and_skips_errors():
    read = parse_per_request(FIXTURES / "per_request_lifecycle_metrics.json")  # real inference-perf 0.7.0 output
    assert read.skipped["an error"] == 1 and len(read.requests) == 13
    first = json.loads((FIXTURES / "per_request_lifecycle_metrics.json").read_text())[0]
    expected = (first["info"]["response_metrics"]["output_token_times"][0] - first["start_time"]) * 1e3
    assert read.requests[0].ttft_ms == pytest.approx(expected)
    assert read.requests[0].request_id == json.loads(first["info"]["response_metrics"]["response_chunks"][0])["id"][5:]


def test_epp_parser_takes_only_decision_lines_and_join_counts_the_unmatched(tmp_path):
    read = parse_per_request(FIXTURES / "per_request_lifecycle_metrics.json")
    lines = [line for line in (FIXTURES / "epp.log").read_text().splitlines() if read.requests[0].request_id not in line]
    log = tmp_path / "epp.log"
    log.write_text("\n".join(lines + ['{"level":"info","msg":"picked endpoint","requestID":"x"}']) + "\n")
    decisions = parse_epp_log(log)
    assert len(decisions) == 15 and "x" not in decisions
    data, stats = join(read.requests, decisions, sum(read.skipped.values()))
    assert (stats.n_joined, stats.n_unmatched, stats.n_skipped) == (12, 1, 3)
    d = decisions[read.requests[1].request_id]
    assert data.pulled[0] == (d.outcome == "pulled") and data.delta[0] == (d.delta_tokens if d.outcome == "pulled" else 0)
    assert data.uncached[0] == read.requests[1].input_tokens - (d.best_cached_tokens if d.outcome == "pulled"
                                                                 else d.computing_cached_tokens)
    assert data.computing_waiting[0] == d.computing_waiting


@pytest.mark.parametrize("text, message", [
    ('{"msg":"p2p decision","requestID":"a","outcome":"maybe"}', "outcome"),
    ('{"msg":"p2p decision","outcome":"self"}', "requestID"),
    ('{"msg":"p2p decision","requestID":"a","outcome":"self","sourceWaiting":"lots"}', "sourceWaiting"),
    ('{"msg":"hello"}', "no 'p2p decision' lines"),
])
def test_bad_epp_lines_are_one_line_errors(tmp_path, text, message):
    log = tmp_path / "epp.log"
    log.write_text(text + "\n")
    with pytest.raises(InputError, match=message):
        parse_epp_log(log)


def test_per_request_without_ids_is_an_error(tmp_path):
    path = tmp_path / "pr.json"
    path.write_text(json.dumps([{"start_time": 1.0, "error": None, "info": {"input_tokens": 5, "response_metrics": {
        "output_token_times": [1.1, 1.2], "response_chunks": ["not json"]}}}]))
    with pytest.raises(InputError, match="JSON id"):
        parse_per_request(path)


def test_cli_observational_fit_says_one_pull_size_cannot_separate_f_from_t(tmp_path, loaded_run, kvcal):
    run, _ = loaded_run
    costs = SimCosts(**DELAYS)
    per_request, epp = write_production(tmp_path / "prod", costs, 150, shape=FleetShape(prefix_tokens=2048), seed=1)
    out = tmp_path / "obs.fit.json"
    res = kvcal("fit", "--per-request", per_request, "--epp-log", epp, "--idle", run, "--resamples", "200", "-o", out)
    assert res.code == 0, res.err
    cm = load_fit(out).cost_model
    assert cm.design == "observational" and cm.n_requests == 150
    assert cm.diagnostics.n_pull_sizes == 1 and cm.diagnostics.condition_number > 1e6
    assert any("same 2048 tokens" in w for w in cm.warnings)
    assert "F cannot be told apart" in res.out
    bad = kvcal("fit", "--per-request", per_request, "--idle", run)
    assert bad.code != 0 and "--epp-log" in bad.err


def test_emit_costmodel_fills_every_calibrated_key(loaded_run):
    run, fit = loaded_run
    res = emit(fit, EmitOptions(format="costmodel"))
    lines = res.stdout.splitlines()
    assert lines[0] == COSTMODEL_LABEL  # the "needs a router build with costModel" label stays first
    block = yaml.safe_load(res.stdout)["costModel"]
    for key in KEYS:
        assert block[key] == pytest.approx(round(max(getattr(fit.cost_model, key).value, 0.0), 3))
    assert block["busyQueueThreshold"] == 1 and "fleetWeight" not in block
    assert any(line.strip().startswith("# fleetWeight:") for line in lines)
    low, high = fit.cost_model.sourceWaitMs.ci
    assert f"90% {low:.4g} to {high:.4g}" in res.stdout


def test_emit_of_an_idle_fit_keeps_the_label_and_the_uncalibrated_keys(tmp_path):
    outcome = run_sweep(SweepConfig.model_validate(dict(engine="sim", prefix_lengths=[256, 1024, 4096], reps=2,
                                                        output_dir=tmp_path, name="idle")))
    res = emit(outcome.run_dir, EmitOptions(format="costmodel"))
    assert res.stdout.splitlines()[0] == COSTMODEL_LABEL
    assert "# sourceWaitMs:" in res.stdout and "sourceWaitMs:" not in yaml.safe_load(res.stdout)["costModel"]


def test_plot_of_a_loaded_run_draws_ttft_by_state(tmp_path, loaded_run, kvcal):
    run, _ = loaded_run
    res = kvcal("plot", run, "-o", tmp_path / "loaded.png")
    assert res.code == 0, res.err
    assert (tmp_path / "loaded.png").stat().st_size > 10_000


def test_a_loaded_run_without_idle_probes_says_what_is_missing(tmp_path, kvcal):
    config = SweepConfig.model_validate(dict(engine="sim", prefix_lengths=[256, 1024], reps=1, output_dir=tmp_path,
                                             name="busy", load_states=["source-busy", "both-busy"], sim=DELAYS))
    run_sweep(config)
    res = kvcal("fit", tmp_path / "busy")
    assert res.code != 0 and "including idle" in res.err and "Traceback" not in res.err


def test_the_cost_model_bootstrap_in_slices_keeps_its_intervals(monkeypatch):
    """Sliced like the main bootstrap (memory bounded by resamples x requests per slice); one slice is the draw whole."""
    import kvcal.fit.costmodel_bootstrap as costmodel

    data = synthetic(threshold_truth=2, n=400)
    whole = fit_cost_model(data, idle_truth(), threshold=2, settings=FitSettings(n_resamples=2000, seed=3))
    calls = []
    original = costmodel._bootstrap_slice
    monkeypatch.setattr(costmodel, "_bootstrap_slice", lambda *a: calls.append(a[-2]) or original(*a))
    monkeypatch.setattr(costmodel, "CHUNK_ELEMENTS", 400 * 300)
    sliced = fit_cost_model(data, idle_truth(), threshold=2, settings=FitSettings(n_resamples=2000, seed=3))
    assert calls == [300] * 6 + [200]
    for name in ("transferFixedMs", "sourceWaitMs", "requeueMs"):
        a, b = getattr(whole, name), getattr(sliced, name)
        assert a.value == b.value
        width = a.ci[1] - a.ci[0]
        assert abs(a.ci[0] - b.ci[0]) < 0.1 * width and abs(a.ci[1] - b.ci[1]) < 0.1 * width
