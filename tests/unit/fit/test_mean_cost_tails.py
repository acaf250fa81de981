"""Each leg's tail its own, and the scales' own uncertainty (issue 50, items 2 and 3): kvcal.fit.mean_cost and tails."""

from __future__ import annotations

import math

import numpy as np
import pytest

from factories import make_fit
from kvcal.emit.draw_costs import draws
from kvcal.fit import fit_table
from kvcal.fit.curves import LegData
from kvcal.fit.mean_cost import reps_to_settle, scale_draws, scale_rel_sd, summarise
from kvcal.fit.tables import from_rows
from kvcal.fit.tails import LegTail, charge
from kvcal.fit_record import FitSettings
from kvcal.records import RunSetup
from kvcal.records_cost import MeanCostSummary, ScaleParts

LENGTHS = (256, 512, 1024, 2048, 4096, 8192)
COSTS = {"recompute": lambda n: 5 + 0.025 * n, "pull": lambda n: 20 + 0.003 * n}


def _rows(seed: int, reps: int = 3, sigma: float = 0.04, stalls: dict[str, tuple[int, ...]] | None = None,
          factor: float = 5.0) -> list[dict]:
    """Lognormal noise about straight legs; ``stalls`` slows the given probes (index within the leg) ``factor``x."""
    rng = np.random.default_rng(seed)
    rows, index = [], {"recompute": 0, "pull": 0}
    for n in LENGTHS:
        for rep in range(reps):
            for leg, cost in COSTS.items():
                y = cost(n) * math.exp(sigma * rng.normal())
                if index[leg] in (stalls or {}).get(leg, ()):
                    y *= factor
                index[leg] += 1
                rows.append({"prefix_tokens": n, "leg": leg, "ttft_ms": y, "rep": rep})
    return rows


def _fit(rows):
    return fit_table(from_rows(rows, setup=RunSetup(engine="sim", model="sim", block_size=64)),
                     FitSettings(n_resamples=100))


def test_stalls_drawn_on_one_leg_move_only_that_legs_scale():
    """2 stalls of 18 pulls and none on recompute: Fisher's test could not tell them apart and charged half the
    pull's stalls to recompute; each leg's own tail charges the pull alone."""
    clean = _fit(_rows(1)).mean_cost
    stalled = _fit(_rows(1, stalls={"pull": (3, 11)})).mean_cost
    assert stalled.recompute_scale == pytest.approx(clean.recompute_scale, rel=0.01)
    assert stalled.pull_scale > clean.pull_scale * 1.3  # 2 of 18 at 5x: 1 + 2/18 x 4 = 1.44
    assert not stalled.pull_parts.shrunk and stalled.pull_parts.tail_probes == 2
    assert stalled.recompute_parts.tail_probes == 0


def test_stalls_that_hit_both_legs_alike_move_both_alike():
    mc = _fit(_rows(1, stalls={"recompute": (2, 9), "pull": (3, 11)})).mean_cost
    assert mc.recompute_scale > 1.3 and mc.pull_scale > 1.3
    assert mc.recompute_scale == pytest.approx(mc.pull_scale, rel=0.05)  # the mean costs' crossing does not move
    assert mc.recompute_parts.shrunk and mc.pull_parts.shrunk


def test_a_leg_with_many_more_stalls_than_the_other_keeps_most_of_its_own():
    """Both legs show a tail, but 6 of 60 against 1 of 60 is beyond binomial noise: shrunk little."""
    a, b = LegTail(60, np.full(6, 3.0)), LegTail(60, np.full(1, 3.0))
    t_a, t_b = charge(a, b)
    assert t_a.shrunk and t_a.rate > 0.07 and t_b.rate < 0.04
    alike_a, alike_b = charge(LegTail(60, np.full(3, 3.0)), LegTail(60, np.full(2, 3.0)))
    assert alike_a.rate == pytest.approx(alike_b.rate, rel=0.05)  # within binomial noise: pooled


def test_a_leg_whose_slow_mode_was_found_keeps_its_own_tail():
    rows = _rows(1, stalls={"recompute": (2, 9), "pull": (3, 11)})
    table = from_rows(rows, setup=RunSetup(engine="sim", model="sim", block_size=64))
    n_ref = float(max(LENGTHS))
    legs = {leg: LegData.from_frame(leg, table.leg(leg), n_ref) for leg in COSTS}
    coefs = {"recompute": np.array([5.0, 25.0, 0.0]), "pull": np.array([20.0, 3.0, 0.0])}
    shared = summarise(legs, coefs)
    kept = summarise(legs, coefs, own_tails=frozenset({"pull"}))
    assert shared.pull_parts.shrunk and not kept.pull_parts.shrunk and not kept.recompute_parts.shrunk
    assert kept.pull_parts.tail_rate == pytest.approx(2 / 18)


def _with_parts(sd: float, df: int, **tail) -> object:
    parts = ScaleParts(bulk_log_mean=0.0, bulk_sd=sd, bulk_df=df, n_probes=df + 6, **tail)
    scale = math.exp(sd * sd / 2)
    return make_fit().model_copy(update={"mean_cost": MeanCostSummary(
        recompute_scale=1.0, pull_scale=scale, recompute_scale_se=0.01, pull_scale_se=0.01,
        recompute_parts=ScaleParts(bulk_log_mean=0.0, bulk_sd=0.03, bulk_df=30, n_probes=36), pull_parts=parts)})


def test_a_few_reps_of_sigma_0_9_do_not_pin_the_scale():
    """exp(sigma^2 / 2) at sigma 0.9 is 1.50; from 4 df of pure error its draws span a wide range, from 40 df a
    narrow one, and the old lognormal(se) draws would have pinned it at +-1 %."""
    rng = np.random.default_rng(0)
    few = np.log(scale_draws(_with_parts(0.9, 4), 20_000, rng)[1])
    many = np.log(scale_draws(_with_parts(0.9, 40), 20_000, rng)[1])
    assert np.std(few) > 0.2 and np.std(many) < 0.12 and np.std(few) > 2.5 * np.std(many)
    assert np.std(few) == pytest.approx(scale_rel_sd(_with_parts(0.9, 4).mean_cost.pull_parts), rel=0.25)
    low, high = np.exp(np.percentile(few, [5, 95]))
    assert low < 1.2 and high > 2.0


def test_tail_draws_carry_the_rate_and_size_uncertainty():
    one = _with_parts(0.03, 30, tail_probes=1, tail_rate=1 / 36, tail_weight=36, tail_size=4.0, tail_size_sd=4.0)
    four = _with_parts(0.03, 30, tail_probes=4, tail_rate=4 / 36, tail_weight=36, tail_size=1.0, tail_size_sd=0.1)
    rng = np.random.default_rng(1)
    d_one, d_four = (scale_draws(f, 20_000, rng)[1] for f in (one, four))
    assert d_one.mean() == pytest.approx(1 + 4 / 36, rel=0.03) and d_four.mean() == pytest.approx(1 + 4 / 36, rel=0.03)
    assert np.std(np.log(d_one)) > 1.5 * np.std(np.log(d_four))  # one stall: its rate and size barely known


def test_an_older_fit_json_draws_as_before():
    fit = make_fit().model_copy(update={"mean_cost": MeanCostSummary(
        recompute_scale=1.1, pull_scale=1.2, recompute_scale_se=0.05, pull_scale_se=0.1)})
    m_r, m_p = scale_draws(fit, 5000, np.random.default_rng([0, 38]))
    rng = np.random.default_rng([0, 38])
    assert m_r == pytest.approx(1.1 * np.exp(rng.normal(0, 0.05, 5000)))
    assert m_p == pytest.approx(1.2 * np.exp(rng.normal(0, 0.1, 5000)))
    assert all(np.all(d == 1.0) for d in scale_draws(make_fit(), 10, np.random.default_rng(0)))


def test_emit_draws_use_the_scale_draws():
    fit = _fit(_rows(3, reps=2, sigma=0.6))
    rec, pull = draws(fit)
    m_r, m_p = scale_draws(fit, len(rec), np.random.default_rng([fit.bootstrap.seed, 38]))
    base_p = np.array([fit.bootstrap.pull_samples[c] for c in ("intercept_ms", "per_token_us", "per_token2_ns")]).T
    assert pull == pytest.approx(base_p * m_p[:, None], rel=1e-9)


def test_reps_to_settle_names_more_probes_for_a_noisier_leg_and_none_when_settled():
    noisy = _with_parts(0.9, 4)
    n = reps_to_settle(noisy, "pull", 0.05)
    assert n > 50 and scale_rel_sd(noisy.mean_cost.pull_parts, n) <= 0.05 < scale_rel_sd(noisy.mean_cost.pull_parts, n - 1)
    assert reps_to_settle(noisy, "recompute", 0.05) == 0
    assert reps_to_settle(_with_parts(0.9, 40), "pull", 0.05) < n
    assert reps_to_settle(make_fit(), "pull", 0.05) == 0  # nothing recorded to tell
    with pytest.raises(ValueError):
        reps_to_settle(noisy, "both", 0.05)
