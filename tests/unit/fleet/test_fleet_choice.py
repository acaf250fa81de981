"""kvcal fleet's recommendation (issue 39): the best simulated threshold, ties by a paired comparison, no margin.

The example workload's tests run on the committed CPU baseline with 4 pods, as the issue's
done-when states, with few seeds and thresholds so that they stay cheap.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvcal.emit.formats import load_input
from kvcal.threshold.choose import compute_threshold
from kvcal.fleet.choose import Candidate, choose, ties
from kvcal.fleet.run import FleetConfig, run_fleet
from kvcal.fleet.study import RunSpec, Study, block_of, cost_sets, plan_runs, policies, run_all, run_one
from kvcal.fleet.workload import load_workload

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "docs" / "examples" / "fleet-workload.yaml"
BASELINE = ROOT / "results" / "baselines" / "cpu-tiny"


def _c(threshold: int, goodput: list[float], p90: list[float]) -> Candidate:
    return Candidate(threshold, np.array(goodput), np.array(p90))


def test_a_consistent_small_loss_is_not_a_tie_but_a_noisy_larger_one_is():
    best = np.array([10.0, 12.0, 9.0, 11.0])
    assert not ties(best - 0.05, best, 0.9)  # every run 0.05 lower: paired, that is a real difference
    assert ties(best + np.array([0.5, -0.6, 0.4, -0.5]), best, 0.9)  # larger, but inside the runs' noise
    assert ties(best, best.copy(), 0.9) and not ties(best[:1] - 1e-3, best[:1], 0.9)  # one run: only equal ties


def test_the_recommendation_is_the_tied_threshold_nearest_the_idle_one_and_never_outside_the_tie():
    runs = [10.0, 12.0, 9.0, 11.0]
    noisy = [0.3, -0.5, 0.3, -0.3]  # a little lower on average, inside the noise
    cands = [_c(128, runs, [80] * 4),
             _c(256, [g + d for g, d in zip(runs, noisy)], [80.2, 79.8, 80.1, 79.9]),
             _c(512, [g - 1 for g in runs], [70] * 4),  # faster, but measurably less goodput: out
             _c(1024, [g - 0.1 for g in runs], [80] * 4)]  # always 0.1 lower: out
    choice = choose(cands, idle=896, confidence=0.9)
    assert choice.best == 128 and choice.tied_span == (128, 256)
    assert choice.recommended == 256  # tied on goodput and TTFT p90; nearest 896; no margin takes it past the tie
    assert choose(cands, idle=None, confidence=0.9).recommended == 128  # no idle threshold: the lowest tied one
    assert "paired comparison over 4 run(s)" in choice.steps[0]


def test_ttft_p90_decides_among_thresholds_tied_on_goodput():
    g = [5.0, 5.0, 5.0]
    choice = choose([_c(128, g, [90, 91, 92]), _c(640, g, [80, 81, 80]), _c(896, g, [95, 96, 94])], 896, 0.9)
    assert choice.recommended == 640 and choice.tied_span == (128, 896)


def _study(rate: float, thresholds: list[int], seeds: int, duration: float = 180.0):
    fit = load_input(BASELINE)
    config = FleetConfig(fit_path=BASELINE, workload_path=EXAMPLE, pods=4, thresholds=thresholds, rate=rate,
                         duration_s=duration, seeds=seeds)
    return fit, run_fleet(config, fit, lambda *a: None)


def test_the_example_shows_the_threshold_mattering_at_its_own_rate():
    fit, result = _study(load_workload(EXAMPLE).arrival.rate, [384, 2816], seeds=4)
    rows = {(r.policy, r.threshold): r for r in result.rows}
    assert rows["always-pull", None].pull_share.value > 0.02
    # TTFT p90 of no-p2p against always-pull, seed by seed: the difference is outside the runs' noise.
    study = Study([load_workload(EXAMPLE)], 4, block_of(fit), cost_sets(fit, 0))
    chosen = policies(fit, [])
    p90 = {p.name: np.array([run_one(study, RunSpec(0, p, s, 0))["ttft_p90_ms"] for s in range(4)]) for p in chosen}
    assert p90["always-pull"].mean() < p90["no-p2p"].mean() and not ties(p90["always-pull"], p90["no-p2p"], 0.9)
    assert result.recommended_threshold in (384, 2816) and "no policy differs" not in " ".join(result.notes)


@pytest.mark.parametrize("rate", [3.0, 6.0])
def test_under_load_the_recommendation_is_no_larger_than_the_largest_threshold_tied_with_the_best(rate):
    _, result = _study(rate, [128, 640, 896, 2816], seeds=2, duration=120)
    assert result.best_threshold_ci[0] <= result.best_threshold <= result.best_threshold_ci[1]
    assert result.recommended_threshold <= result.best_threshold_ci[1]
    assert result.recommended_rule.startswith("recommended_threshold is the simulated threshold")


def test_near_idle_nothing_differs_and_the_idle_threshold_is_recommended():
    fit, result = _study(0.05, [128, 640, 2816], seeds=2, duration=120)
    assert result.idle_threshold == compute_threshold(fit).min_cached_token_delta  # what emit-config emits
    assert result.recommended_threshold == result.idle_threshold
    assert any("no policy differs" in n for n in result.notes) and result.recommended_reason is None


def test_the_runs_are_listed_once_and_each_result_depends_on_its_identity_not_its_place():
    fit = load_input(BASELINE)
    workload = load_workload(EXAMPLE).with_overrides(duration_s=60.0)
    study = Study([workload], 2, block_of(fit), cost_sets(fit, 0))
    specs = plan_runs(1, policies(fit, [640]), seeds=2, cost_sets=1)
    assert [(s.policy.name, s.seed) for s in specs] == [("no-p2p", 0), ("no-p2p", 1), ("always-pull", 0),
                                                        ("always-pull", 1), ("threshold", 0), ("threshold", 1)]
    calls = []
    forward = run_all(study, specs, lambda done, total, label: calls.append((done, total)))
    assert calls == [(k, 6) for k in range(1, 7)]
    assert run_all(study, specs[::-1], lambda *a: None) == forward[::-1]
