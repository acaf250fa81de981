"""The fit moved to production costs (kvcal.observe.adjust): the pull's mean curve by exactly the transfer time's
change a token, recompute's per-token terms by the prefill ratio, the draws alike, what was measured per length
dropped, and the result a valid fit.json emit-config decides on."""

from __future__ import annotations

import numpy as np
import pytest

import fake_costs_fleet
from kvcal.costs.cost_curve import break_even_tokens, cost_ms
from kvcal.threshold.choose import compute_threshold
from kvcal.fit.io import dumps
from kvcal.fit.mean_cost import mean_curves
from kvcal.records.fit import FitResult
from kvcal.observe.adjust import Move, adjusted
from kvcal.records.fit_engine import EngineSide, ProposedFrom

SIDE = EngineSide(pull_ms_per_token=None, prefill_ms_per_token=None)
FROM = ProposedFrom(prometheus="http://p:9090", selector=None, window_start="a", window_end="b", base_fit=None,
                    pull_ms_per_token_delta=0.0, prefill_ratio=1.0)


@pytest.fixture(scope="module")
def fit():
    return fake_costs_fleet.calibration_fit()


def test_nothing_moved_is_the_same_decision(fit):
    same = adjusted(fit, Move(0.0, 1.0), SIDE, FROM)
    assert same.recompute.coefficients == fit.recompute.coefficients and same.pull.coefficients == fit.pull.coefficients
    assert compute_threshold(same).min_cached_token_delta == compute_threshold(fit).min_cached_token_delta
    assert same.per_length == [] and (same.mean_cost is None or same.mean_cost.per_length == [])


def test_the_pulls_mean_curve_moves_by_the_delta_and_recompute_by_the_ratio(fit):
    moved = adjusted(fit, Move(0.010, 1.5), SIDE, FROM)  # 10 us a token more on the wire, prefill 1.5x
    rec0, pull0 = mean_curves(fit)
    rec1, pull1 = mean_curves(moved)
    n = np.array([512.0, 4096.0])
    assert cost_ms(pull1, n) - cost_ms(pull0, n) == pytest.approx(0.010 * n)
    assert moved.pull.intercept_ms == fit.pull.intercept_ms and moved.recompute.intercept_ms == fit.recompute.intercept_ms
    assert moved.recompute.per_token_us == pytest.approx(1.5 * fit.recompute.per_token_us)
    assert moved.recompute.per_token2_ns == pytest.approx(1.5 * fit.recompute.per_token2_ns)
    # the draws alike: each draw's per-token terms moved the same way
    before, after = fit.bootstrap.pull_samples["per_token_us"], moved.bootstrap.pull_samples["per_token_us"]
    shift = 10.0 / fit.mean_cost.pull_scale
    assert np.allclose(np.array(after) - np.array(before), shift)
    assert np.allclose(moved.bootstrap.recompute_samples["per_token2_ns"],
                       1.5 * np.array(fit.bootstrap.recompute_samples["per_token2_ns"]))
    assert moved.break_even_tokens == pytest.approx(
        float(break_even_tokens(moved.recompute.coefficients, moved.pull.coefficients)), abs=0.1)
    base = compute_threshold(fit).min_cached_token_delta
    dearer_pull, dearer_prefill = adjusted(fit, Move(0.010, 1.0), SIDE, FROM), adjusted(fit, Move(0.0, 1.5), SIDE, FROM)
    assert dearer_pull.break_even_tokens > fit.break_even_tokens > dearer_prefill.break_even_tokens
    assert compute_threshold(dearer_pull).min_cached_token_delta > base
    assert compute_threshold(dearer_prefill).min_cached_token_delta < base


def test_the_moved_fit_is_a_valid_fit_json_that_says_where_it_came_from(fit):
    moved = adjusted(fit, Move(0.002, 0.8), SIDE, FROM)
    again = FitResult.model_validate_json(dumps(moved))
    assert again.proposed_from.prometheus == "http://p:9090"
    assert any("kvcal observe --propose" in w for w in again.warnings)
    assert again.cost_model is None and again.classes is None
