"""Each leg's tail its own, and the scales' own uncertainty (issue 50, items 2 and 3): kvcal.fit.mean_cost and tails."""

from __future__ import annotations

import math

import numpy as np
import pytest

from factories import make_fit
from kvcal.costs.cost_curve import cost_ms
from kvcal.threshold.draw_costs import cost_draws, draws
from kvcal.fit import fit_table
from kvcal.fit.curves import LegData
from kvcal.fit.mean_cost import reps_to_settle, scale_draws, scale_rel_sd, summarise
from kvcal.fit.tables import from_rows
from kvcal.fit.tails import LegTail, charge, own
from kvcal.records.fit import FitSettings
from kvcal.records.run import RunSetup
from kvcal.records.fit_mean_cost import MeanCostSummary, ScaleParts

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


def test_stalls_drawn_on_one_leg_are_charged_mostly_to_that_leg():
    """2 stalls of 18 pulls and none on recompute: Fisher's test could not tell them apart and charged half the
    pull's stalls to recompute; the evidence leaves the shared hypothesis a weight under 0.2, recompute a fifth."""
    clean = _fit(_rows(1)).mean_cost
    stalled = _fit(_rows(1, stalls={"pull": (3, 11)})).mean_cost
    pull_move = stalled.pull_scale / clean.pull_scale - 1
    rec_move = stalled.recompute_scale / clean.recompute_scale - 1
    assert pull_move > 0.15 and 0 <= rec_move < 0.25 * pull_move
    assert stalled.pull_parts.shared < 0.2 and stalled.pull_parts.tail_probes == 2
    assert stalled.recompute_parts.tail_probes == 0


def test_more_evidence_charges_the_other_leg_less():
    few = charge(LegTail(18, np.zeros(0)), LegTail(18, np.full(2, 4.0)))
    many = charge(LegTail(60, np.zeros(0)), LegTail(60, np.full(6, 4.0)))
    assert many[0].excess / many[1].excess < 0.05 < few[0].excess / few[1].excess < 0.3
    assert many[0].shared < few[0].shared


def test_stalls_that_hit_both_legs_alike_move_both_alike():
    mc = _fit(_rows(1, stalls={"recompute": (2, 9), "pull": (3, 11)})).mean_cost
    assert mc.recompute_scale > 1.2 and mc.pull_scale > 1.2
    assert mc.recompute_scale == pytest.approx(mc.pull_scale, rel=0.05)  # the mean costs' crossing does not move
    assert mc.recompute_parts.shared > 0.5 and mc.pull_parts.shared > 0.5


def test_a_leg_with_many_more_stalls_than_the_other_keeps_most_of_its_own():
    """Both legs show a tail, but 6 of 60 against 1 of 60 is beyond what one shared share explains."""
    t_a, t_b = charge(LegTail(60, np.full(6, 3.0)), LegTail(60, np.full(1, 3.0)))
    assert t_a.shared < 0.5 and t_a.rate > 2 * t_b.rate
    alike_a, alike_b = charge(LegTail(60, np.full(3, 3.0)), LegTail(60, np.full(2, 3.0)))
    assert alike_a.shared > 0.5 and alike_a.rate == pytest.approx(alike_b.rate, rel=0.25)


def test_one_stall_in_a_few_probes_is_not_read_as_a_12_percent_share():
    tail = own(LegTail(8, np.full(1, 5.0)))
    assert tail.rate == pytest.approx(1.5 / 28)  # the rare prior's 0.5 stall in 20 probes
    assert own(LegTail(8, np.zeros(0))).excess == 0.0  # no tail probe: nothing charged


def test_a_leg_whose_slow_mode_was_found_keeps_its_own_tail():
    rows = _rows(1, stalls={"recompute": (2, 9), "pull": (3, 11)})
    table = from_rows(rows, setup=RunSetup(engine="sim", model="sim", block_size=64))
    n_ref = float(max(LENGTHS))
    legs = {leg: LegData.from_frame(leg, table.leg(leg), n_ref) for leg in COSTS}
    coefs = {"recompute": np.array([5.0, 25.0, 0.0]), "pull": np.array([20.0, 3.0, 0.0])}
    shared = summarise(legs, coefs)
    kept = summarise(legs, coefs, own_tails=frozenset({"pull"}))
    assert shared.pull_parts.shared > 0.5 and kept.pull_parts.shared == 0 and kept.recompute_parts.shared == 0
    assert kept.pull_parts.tail_rate == pytest.approx(2 / 18)  # a mode's share is its own, not a rare stall's


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


def test_a_misfit_lengths_measured_mean_is_drawn_about_itself_not_charged_the_tail_twice():
    """fit.json's measured mean per length already carries the leg's tail charge (its curve x its scale): the
    decision's draws at a misfit length scatter about it, not about it times the tail once more."""
    fit = _fit(_rows(1, stalls={"pull": (3, 11)}))
    summary = fit.mean_cost
    assert summary.pull_parts.tail_rate > 0
    rows = [r.model_copy(update={"pull_misfit": r.prefix_tokens == 2048}) for r in summary.per_length]
    fit = fit.model_copy(update={"mean_cost": summary.model_copy(update={"per_length": rows})})
    measured = next(r.pull_ms for r in rows if r.prefix_tokens == 2048)
    got = cost_draws(fit)
    k = list(got.knots).index(2048.0)
    drawn = cost_ms(got.pull, 2048.0).reshape(-1) + got.pull_correction[:, k]
    tail = summary.pull_scale / math.exp(summary.pull_parts.bulk_log_mean + summary.pull_parts.bulk_sd**2 / 2)
    assert tail > 1.1
    assert float(np.median(drawn)) == pytest.approx(measured, rel=0.05)
