"""Adaptive stops that serve the threshold: the regret target, a threshold at every target stop, the MC error."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kvcal.sweep.judge import emit_judge
from kvcal.threshold.choose import compute_threshold
from kvcal.engines.sim import SimCosts
from kvcal.fit import fit_table
from kvcal.fit.tables import load_probe_table
from kvcal.records.fit import FIT_DEFAULTS
from kvcal.records.fit import FitSettings
from kvcal.records.run_folder import RunFolder
from kvcal.settings.sweep import SweepConfig
from kvcal.sweep.adaptive import Controller, StopRules, relative_width
from kvcal.sweep.adaptive_run import read_state
from kvcal.sweep.regret_stop import MC_Z, meets, regret_mc_error, width_mc_error
from kvcal.sweep.runner import run_sweep

NEAR_290 = SimCosts(pull_intercept_ms=11.381)  # the default curves with the pull's floor moved: they cross at 290


def config(tmp_path, **overrides) -> SweepConfig:
    base = dict(engine="sim", adaptive=True, output_dir=tmp_path, name="run", seed=0, sim=NEAR_290.model_dump())
    return SweepConfig.model_validate({**base, **overrides})


def refit(run_dir, seed: int = 0):
    return fit_table(load_probe_table(run_dir), FitSettings(seed=seed))


def test_the_truth_sits_near_290_tokens():
    assert NEAR_290.true_break_even() == pytest.approx(290, abs=1)


def test_a_regret_stopped_campaign_near_290_tokens_ends_with_a_threshold_and_records_each_round(tmp_path):
    outcome = run_sweep(config(tmp_path, target_regret=0.005), judge=emit_judge)
    state = read_state(RunFolder(outcome.run_dir))
    assert outcome.stop_reason == state.stop_reason == "target-regret"
    threshold = compute_threshold(refit(outcome.run_dir))  # emit-config on kvcal fit's own fit: no refusal
    assert threshold.min_cached_token_delta == state.final_threshold
    assert state.final_regret + state.final_regret_mc_error <= 0.005
    assert threshold.figures.expected_regret_pct == pytest.approx(100 * state.final_regret, rel=1e-3)
    judged = [r for r in state.rounds if r.status is not None]
    assert judged and all(r.regret is not None or r.threshold is None for r in judged)
    assert state.rules.target_regret == 0.005
    for seed in (1, 2, 3):  # the stop holds under other bootstrap seeds: the MC error was cleared
        verdict = emit_judge(refit(outcome.run_dir, seed))
        assert verdict.threshold == state.final_threshold and verdict.regret <= 0.005
    raw = json.loads((outcome.run_dir / "adaptive.json").read_text())
    assert raw["stop_reason"] == "target-regret" and "regret" in raw["rounds"][-1]


def test_a_width_stop_near_290_tokens_waits_for_the_win_emit_config_needs(tmp_path):
    # Before the judge, seed 0 at a 10 % width stopped on an interval emit-config refused ("the legs tie"): both legs
    # were never measured at one length above the crossover. With it, the stop waits for that win.
    judged = run_sweep(config(tmp_path / "judged", target_width=0.10), judge=emit_judge)
    assert judged.stop_reason == "target-width"
    fit = refit(judged.run_dir)
    assert compute_threshold(fit).min_cached_token_delta == read_state(RunFolder(judged.run_dir)).final_threshold
    assert any(r.pull_won_measurably and r.prefix_tokens > 290 for r in fit.per_length)


def test_a_width_stop_holds_under_other_bootstrap_seeds(tmp_path):
    outcome = run_sweep(config(tmp_path, target_width=0.10, sim=SimCosts().model_dump(), seed=4), judge=emit_judge)
    state = read_state(RunFolder(outcome.run_dir))
    assert state.stop_reason == "target-width"
    assert state.final_width + state.final_width_mc_error <= 0.10
    widths = [relative_width(refit(outcome.run_dir, seed)) for seed in range(1, 6)]
    assert max(widths) <= 0.10


def test_the_monte_carlo_errors_shrink_with_the_draws():
    rng = np.random.default_rng(0)
    assert regret_mc_error(rng.exponential(size=400)) == pytest.approx(MC_Z * 1.0 / 20, rel=0.2)  # sd 1, sqrt(400)
    assert regret_mc_error(rng.exponential(size=40000)) < regret_mc_error(rng.exponential(size=400)) / 5
    assert meets(0.09, 0.01, 0.10) and not meets(0.095, 0.01, 0.10) and not meets(None, 0.0, 0.1)


def test_the_width_error_is_that_of_the_intervals_ends(tmp_path):
    outcome = run_sweep(config(tmp_path, target_width=0.10, sim=SimCosts().model_dump()))
    fit = refit(outcome.run_dir)
    error = width_mc_error(fit, 0.9)
    assert 0 < error < relative_width(fit) / 3
    spread = np.std([relative_width(refit(outcome.run_dir, seed)) for seed in range(1, 9)])
    assert 0.5 * spread < error < 4 * MC_Z * spread  # MC_Z standard errors, read off one bootstrap


def test_a_regret_target_needs_the_judge():
    with pytest.raises(ValueError, match="judge"):
        Controller(256, 8192, 64, StopRules(target_width=0.1, target_regret=0.01))


@pytest.mark.parametrize("args, message", [
    (["--adaptive", "--target-regret", "0"], "target"),
    (["--adaptive", "--target-regret", "-0.1"], "target"),
    (["--adaptive", "--target-regret", "1"], "target"),
    (["--target-regret", "0.01"], "--adaptive"),
])
def test_cli_target_regret_bounds_are_input_errors(tmp_path, kvcal, args, message):
    done = kvcal("sweep", "--engine", "sim", "--output-dir", tmp_path, *args)
    assert done.code == 2 and message in done.err and "Traceback" not in done.err
    assert not any(tmp_path.iterdir())


def test_cli_adaptive_dry_run_states_the_regret_target(tmp_path, kvcal):
    done = kvcal("sweep", "--engine", "sim", "--adaptive", "--target-regret", "0.002", "--dry-run",
                 "--output-dir", tmp_path)
    assert done.code == 0 and "regret <= 0.002 of TTFT" in done.out
