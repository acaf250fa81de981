"""The default threshold rule (expected cost on mean costs), what a threshold costs, --deltas, and compare's judge."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from factories import make_curve, make_fit, sim_table
from kvcal.emit import formats as em
from kvcal.threshold.deltas import read_deltas
from kvcal.threshold.choose import compute_threshold, regret_model
from kvcal.engines.sim import SimCosts
from kvcal.errors import InputError, NoThreshold, NotRecommended
from kvcal.fit import fit_table
from kvcal.fit.io import write_fit
from kvcal.fit.mean_cost import mean_curves, mean_scales
from kvcal.records.fit import LengthSummary
from kvcal.records.fit import FitSettings
from kvcal.records.fit_mean_cost import MeanCostSummary, MeanLength
from kvcal.gate.deployed import deployed_check
from kvcal.fit.tables import from_rows
from kvcal.records.fit import FitSource
from kvcal.records.run import RunSetup

FIXTURES = Path(__file__).parents[2] / "fixtures" / "llmd"
LADDER = [256, 512, 1024, 2048, 4096, 8192]


def test_the_recipe_alternative_on_llm_ds_glm_table_is_what_llm_d_recommends(kvcal, tmp_path):
    """The upstream-tier GLM-5.2 H200 table: the recipe's rule (the shortest length whose median pull won) gives
    12,288, llm-d's recommendation; the default prices below it (the band test is tests/unit/emit/test_work_range.py)."""
    assert kvcal("fit", FIXTURES / "glm-5.2-h200-upstream-tier.log", "--block-size", "64", "-o", tmp_path / "fit.json").code == 0
    default = json.loads(kvcal("emit-config", tmp_path / "fit.json", "--format", "json").out)
    assert default["alternatives"]["recipe"]["threshold"] == 12_288
    assert default["expected_regret_pct"] < default["alternatives"]["recipe"]["expected_regret_pct"]


def test_the_gpt_oss_ladder_still_gives_2048_and_says_so_in_every_rule(kvcal, tmp_path):
    assert kvcal("fit", FIXTURES / "gpt-oss-120b-job.log", "-o", tmp_path / "fit.json").code == 0
    data = json.loads(kvcal("emit-config", tmp_path / "fit.json", "--format", "json").out)
    assert data["minCachedTokenDelta"] == 2048 and data["rule"] == "expected-cost" and data["margin"] is None
    assert {name: alt["threshold"] for name, alt in data["alternatives"].items()} == {"upper": 2048, "recipe": 2048}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_on_a_clean_campaign_the_default_sits_at_the_truth_and_costs_less_than_the_old_rule(seed):
    fit = fit_table(sim_table(SimCosts(), LADDER, 3, seed=seed), settings=FitSettings(seed=seed, n_resamples=400))
    t = compute_threshold(fit)
    truth = SimCosts().true_break_even()
    assert abs(t.min_cached_token_delta - truth) <= 0.15 * truth
    upper = t.alternatives["upper"]
    assert upper.threshold == compute_threshold(fit, rule="upper").min_cached_token_delta
    assert t.figures.expected_regret_pct < upper.figures.expected_regret_pct
    assert 0.0 <= t.figures.p_break_even_above <= 1.0


@pytest.mark.parametrize("seed", [5, 6, 7])
def test_a_skewed_pull_is_priced_above_its_robust_curve(seed):
    """Lognormal pulls (sigma 0.5, mean 1.13x the median): the robust fit sits between median and mean; the scale
    lifts the pull's curve towards its mean, recompute's (3 % normal noise) stays put."""
    rng = np.random.default_rng(seed)
    rows = []
    for rep in range(8):
        for n in LADDER:
            rows.append({"prefix_tokens": n, "leg": "recompute", "rep": rep,
                         "ttft_ms": (5 + 0.025 * n + 0.012e-6 * n * n) * (1 + 0.03 * rng.normal())})
            rows.append({"prefix_tokens": n, "leg": "pull", "rep": rep,
                         "ttft_ms": (20 + 0.003 * n) * math.exp(0.5 * rng.normal())})
    fit = fit_table(from_rows(rows, setup=RunSetup(block_size=64), origin=FitSource(kind="sim")), settings=FitSettings(n_resamples=0))
    m_r, m_p = mean_scales(fit)
    assert abs(m_r - 1.0) < 0.03 and 1.02 < m_p < 1.2
    rec, pull = mean_curves(fit)
    assert pull == pytest.approx(np.asarray(fit.pull.coefficients) * m_p)
    # the threshold follows the mean costs: above the robust curves' crossing
    assert compute_threshold(fit).min_cached_token_delta > fit.break_even_tokens


def test_an_older_fit_without_mean_costs_decides_on_its_curves():
    fit = make_fit()  # no mean_cost recorded: the curves are the means
    assert fit.mean_cost is None and mean_scales(fit) == (1.0, 1.0)
    assert compute_threshold(fit).min_cached_token_delta == 704  # the default curves cross at 682


def _with_means(fit, rows):
    return fit.model_copy(update={"mean_cost": MeanCostSummary(recompute_scale=1.0, pull_scale=1.0, per_length=rows)})


def test_a_misfit_length_is_decided_on_its_measured_means():
    """The curves cross at 682, but at 1,024 tokens the measured means say the pull loses (a misfit beyond the
    noise): the threshold moves above 1,024 instead of trusting the curve there."""
    base = make_fit(measured_range=[256, 4096])
    rows = [MeanLength(prefix_tokens=n, recompute_ms=r, pull_ms=p, pull_misfit=n == 1024)
            for n, r, p in ((256, 12.2, 20.8), (512, 20.0, 21.5), (1024, 35.0, 40.0), (2048, 61.0, 26.1),
                            (4096, 112.6, 32.3))]
    t = compute_threshold(_with_means(base, rows))
    assert 1024 < t.min_cached_token_delta < 2048
    assert any("at 1024 tokens the pull curve misfits: its measured mean is 40 ms" in s for s in t.steps)
    untouched = compute_threshold(_with_means(base, [r.model_copy(update={"pull_misfit": False}) for r in rows]))
    assert untouched.min_cached_token_delta == 704


def test_a_misfit_counts_even_where_it_does_not_flip_the_sign_at_its_length():
    """A pull measured 30 % slower than its curve at 2,048 tokens still wins there, but it costs more between 1,024
    and 4,096: the threshold the expected cost picks moves up (the earlier rule looked only where the sign flipped)."""
    base = make_fit(measured_range=[256, 4096])
    fitted = {n: (float(np.polyval([0.012e-6, 25e-3, 5.0], n)), 20.0 + 3e-3 * n) for n in (256, 512, 1024, 2048, 4096)}
    rows = [MeanLength(prefix_tokens=n, recompute_ms=r, pull_ms=p * (1.3 if n == 1024 else 1.0),
                       pull_misfit=n == 1024) for n, (r, p) in fitted.items()]
    moved = compute_threshold(_with_means(base, rows)).min_cached_token_delta
    assert moved > 704


def test_no_p2p_is_refused_with_the_costs_that_make_it_so_and_extrapolation_may_find_one():
    fit = make_fit(measured_range=[128, 512])  # the curves cross at 682, beyond the range
    with pytest.raises(NotRecommended, match=r"no P2P is cheapest \(recomputing costs [0-9.]+ ms a request"):
        compute_threshold(fit)
    t = compute_threshold(fit, allow_extrapolation=True)
    assert t.min_cached_token_delta == 704 and any("--allow-extrapolation: 704 lies beyond" in w for w in t.warnings)


def test_a_crossing_below_the_range_is_raised_to_its_shortest_length():
    fit = make_fit(measured_range=[2048, 16384])
    assert compute_threshold(fit).min_cached_token_delta == 2048
    assert compute_threshold(fit, allow_extrapolation=True).min_cached_token_delta == 704
    assert any("--prefix-lengths" in w and "lower this threshold" in w for w in compute_threshold(fit).warnings)


def test_a_crossing_below_the_floor_rests_there_without_asking_for_shorter_lengths():
    # the committed CPU baseline: the pull wins from 128 tokens (two blocks of 64), nothing shorter can be pulled
    fit = make_fit(measured_range=[128, 8192], block_size=64, recompute=make_curve(14.09, 17.2, 5.56),
                   pull=make_curve(14.94, 1.98))
    t = compute_threshold(fit)
    assert t.min_cached_token_delta == 128
    assert not any("lower this threshold" in w for w in t.warnings)
    assert any("which is the floor" in s for s in t.steps)


@pytest.mark.parametrize("text", ["1000\n2000\n3000\n", "delta,count\n1000,5\n2000,1\n", "[1000, 2000]",
                                  '{"1000": 3, "2000": 1}', "[[1000, 3], [2000, 1]]"])
def test_deltas_files_in_every_shape(tmp_path, text):
    path = tmp_path / "d.txt"
    path.write_text(text)
    deltas = read_deltas(path)
    assert list(deltas.points[:2]) == [1000.0, 2000.0] and deltas.weights.sum() == pytest.approx(1.0)


def test_deltas_from_a_router_decision_log(tmp_path):
    log = tmp_path / "epp.log"
    lines = [json.dumps({"msg": "p2p decision", "requestID": f"r{i}", "outcome": "pulled", "deltaTokens": d})
             for i, d in enumerate((512, 1024, 1024, 0))]
    log.write_text("\n".join(lines) + "\n")
    deltas = read_deltas(log)
    assert list(deltas.points) == [512.0, 1024.0] and list(deltas.weights) == pytest.approx([1 / 3, 2 / 3])


@pytest.mark.parametrize("text, match", [("-5\n", "whole number"), ("1000,abc\n", "count must be a number"),
                                         ("1000,-1\n", "a count must be a number from 0"), ("{bad json", "not valid JSON"),
                                         ("1 2 3\n", "a delta and a count"), ("nan\n", "finite")])
def test_bad_deltas_files_exit_2_with_one_line(tmp_path, kvcal, text, match):
    path = tmp_path / "d.txt"
    path.write_text(text)
    with pytest.raises(InputError, match=match):
        read_deltas(path)
    fit = tmp_path / "fit.json"
    write_fit(make_fit(), fit)
    res = kvcal("emit-config", fit, "--deltas", path)
    assert res.code == 2 and res.out == "" and res.err.count("\n") == 1


def test_deltas_weigh_the_decision_and_its_price(tmp_path):
    """The deltas a router saw decide which threshold costs least: with none between 300 and 6,000 tokens every
    threshold in between costs the same, and the highest of those ties wins (the crossing near 700 no longer
    matters); the price moves with them."""
    fit = fit_table(sim_table(SimCosts(), LADDER, 3, seed=4), settings=FitSettings(seed=4, n_resamples=300))
    path = tmp_path / "d.txt"
    path.write_text("300,10\n6000,1\n")
    plain, priced = compute_threshold(fit), compute_threshold(fit, deltas=read_deltas(path))
    assert abs(plain.min_cached_token_delta - SimCosts().true_break_even()) < 150
    assert priced.min_cached_token_delta == 5952  # the highest block multiple below 6,000: the tie's highest
    assert plain.figures != priced.figures
    dense = tmp_path / "dense.txt"
    dense.write_text("\n".join(str(n) for n in range(256, 8192, 64)))
    assert abs(compute_threshold(fit, deltas=read_deltas(dense)).min_cached_token_delta - plain.min_cached_token_delta) <= 128


def test_costmodel_and_vllm_carry_a_comment_line_with_the_rule():
    fit = fit_table(sim_table(SimCosts(), LADDER, 3, seed=2), settings=FitSettings(seed=2, n_resamples=200))
    for fmt in ("costmodel", "vllm"):
        options = em.EmitOptions(format=fmt, transport="nixl-pd" if fmt == "vllm" else None)
        lines = em.emit(fit, options).stdout.splitlines()
        assert lines[1].startswith("# kvcal: minCachedTokenDelta ") and "rule expected-cost" in lines[1]
        assert "expected regret" in lines[1]


def test_compare_judges_a_deployed_threshold_by_what_it_costs(tmp_path, kvcal):
    fit = fit_table(sim_table(SimCosts(), LADDER, 3, seed=6), settings=FitSettings(seed=6, n_resamples=400))
    best = compute_threshold(fit).min_cached_token_delta
    assert deployed_check(fit, fit, best, "--deployed").verdict == "safe"
    low = deployed_check(fit, fit, 128, "--deployed")
    assert low.verdict == "unsafe" and low.p_break_even_above > 0.9 and low.expected_regret_pct > 0.5
    high = deployed_check(fit, fit, 8192, "--deployed")
    assert high.verdict == "uncertain" and high.p_break_even_above < 0.1 and "lower it" in high.message
    assert regret_model(fit) is not None
    path = tmp_path / "fit.json"
    write_fit(fit, path)
    assert kvcal("compare", path, path, "--deployed", str(best), "--strict-deployed").code == 0
    assert kvcal("compare", path, path, "--deployed", "8192", "--strict-deployed").code == 1


def test_a_scale_that_dominates_the_choice_names_its_leg_and_the_reps_that_settle_it():
    """Tight curves but a pull whose bulk spread rests on 2 degrees of freedom (sigma 0.9: exp(s^2/2) anywhere from
    1.0 to 2.5): the pull's scale carries most of the expected regret, and the warning says how many more pulls
    would settle it; with the same spread on 400 degrees of freedom nothing is said."""
    fit = fit_table(sim_table(SimCosts(), LADDER, 5, seed=3), settings=FitSettings(seed=3, n_resamples=400))
    base = fit.mean_cost.pull_parts

    def with_df(df: int):
        parts = base.model_copy(update={"bulk_sd": 0.9, "bulk_df": df, "bulk_log_mean": -0.405})
        return fit.model_copy(update={"mean_cost": fit.mean_cost.model_copy(update={"pull_parts": parts})})

    loose = compute_threshold(with_df(2))
    advice = [w for w in loose.warnings if "the pull's mean cost over its curve" in w]
    assert len(advice) == 1 and "more probes of the pull" in advice[0]
    assert int(advice[0].split("about ")[1].split(" more probes")[0].replace(",", "")) > 0
    assert not any("mean cost over its curve" in w for w in compute_threshold(with_df(400)).warnings)
