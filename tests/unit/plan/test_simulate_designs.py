"""kvcal plan: each design's campaigns simulated on a prior's curves, through the library and the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kvcal.sweep.judge import emit_judge
from kvcal.engines.sim import SimCosts
from kvcal.plan.priors import Prior
from kvcal.plan.simulate_designs import plan_campaigns
from kvcal.settings.sweep import SweepConfig
from kvcal.sweep.runner import run_sweep

from tests.unit.sweep.test_adaptive_regret import NEAR_290


def test_cli_plan_compares_adaptive_with_the_ladder_on_a_fitted_prior(tmp_path, kvcal):
    run_sweep(SweepConfig.model_validate(dict(engine="sim", prefix_lengths=[256, 512, 1024, 2048], reps=3,
                                              output_dir=tmp_path, name="prior")))
    out = kvcal("plan", "--from", tmp_path / "prior", "--campaigns", "2", "--target-width", "0.2", "--json")
    assert out.code == 0, out.err
    plan = json.loads(out.out)
    designs = {d["design"]: d for d in plan["designs"]}
    assert set(designs) == {"adaptive", "ladder", "ladder-3", "oracle"}
    assert plan["target_width"] == 0.2 and plan["allowed_range"] == [128, 65472]
    assert designs["adaptive"]["stop_reasons"] == {"target-width": 1.0}
    assert designs["adaptive"]["engine_s_median"] < designs["ladder"]["engine_s_median"]
    assert designs["oracle"]["engine_s_median"] <= designs["adaptive"]["engine_s_median"] * 1.5
    text = kvcal("plan", "--from", tmp_path / "prior", "--campaigns", "1", "--target-width", "0.2")
    assert text.code == 0 and "adaptive" in text.out and "engine time" in text.out and "prior: fit of" in text.out



@pytest.mark.parametrize("noise, target", [(0.05, 0.10), (0.10, 0.05), (0.02, 0.20)])
def test_the_oracle_that_estimates_its_noise_pays_for_students_t(noise, target):
    from scipy import stats

    from kvcal.plan.priors import Prior
    from kvcal.plan.simulate_designs import oracle

    costs = SimCosts(recompute_intercept_ms=40.0, recompute_per_token_us=80.0, recompute_per_token2_ns=0.6,
                     pull_intercept_ms=350.0, pull_per_token_us=0.8, noise_cv=noise)
    prior = Prior(costs, "glm-like", 256, 131008, 64)
    known, estimated = oracle(prior, target), oracle(prior, target, noise_known=False)
    assert estimated.design == "oracle-t" and estimated.n_probes > known.n_probes >= 2
    assert estimated.engine_s / estimated.n_probes == pytest.approx(known.engine_s / known.n_probes)  # all at n*
    # The oracle's m per leg meets its own interval: z for the known noise, t on m - 1 df for the estimated.
    n, t_star = prior.truth, costs.pull_ms(prior.truth)
    slope = (80.0 - 0.8) / 1e3 + 2 * 0.6 * n / 1e6
    width = lambda m, q: 2 * q * noise * t_star * np.sqrt(2 / m) / slope / n  # noqa: E731
    m_known, m_est = known.n_probes // 2, estimated.n_probes // 2
    assert width(m_known, stats.norm.ppf(0.95)) <= target
    assert m_known == 1 or target < width(m_known - 1, stats.norm.ppf(0.95))  # one probe a leg is the least
    assert width(m_est, stats.t.ppf(0.95, m_est - 1)) <= target
    assert m_est == 2 or target < width(m_est - 1, stats.t.ppf(0.95, m_est - 2))  # t needs 2 probes a leg



def test_cli_plan_shows_no_relative_width_when_the_break_even_is_below_the_range(tmp_path, kvcal):
    run_sweep(SweepConfig.model_validate(dict(engine="sim", prefix_lengths=[256, 1024, 4096], reps=2, output_dir=tmp_path,
                                              name="fast", sim={"pull_intercept_ms": 7.0})))  # break-even near 80
    out = kvcal("plan", "--from", tmp_path / "fast", "--campaigns", "1")
    assert out.code == 0, out.err
    lines = out.out.splitlines()
    header = next(line for line in lines if line.strip().startswith("design"))
    start, end = header.index("width"), header.index("regret")  # the columns between
    widths = {line.split()[0]: line[start:end].strip() for line in lines if line.startswith(("  adaptive ", "  ladder-3 "))}
    assert widths == {"adaptive": "-", "ladder-3": "-"}  # a width relative to a break-even near 0 says nothing
    assert "below the shortest" in out.out



def test_plan_on_a_prior_whose_pull_always_wins_says_so(tmp_path):
    from kvcal.plan.priors import Prior
    from kvcal.plan.simulate_designs import plan_campaigns

    prior = Prior(SimCosts(pull_intercept_ms=2.0, pull_per_token_us=1.0), "fast pull", 256, 8192, 64)
    plan = plan_campaigns(prior, 0.1, campaigns=2)
    assert [d.design for d in plan.designs] == ["adaptive", "ladder-3"]
    assert plan.designs[0].stop_reasons == {"pull-wins-at-shortest": 1.0}
    assert any("below the shortest" in note for note in plan.notes)
    assert any("2 campaign(s) is uncertain" in note for note in plan.notes)



def test_plan_on_equal_flat_curves_divides_by_no_zero():
    import warnings

    from kvcal.plan.priors import Prior
    from kvcal.plan.simulate_designs import plan_campaigns

    flat = SimCosts(recompute_intercept_ms=20.0, recompute_per_token_us=0.0, recompute_per_token2_ns=0.0,
                    pull_intercept_ms=20.0, pull_per_token_us=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a screen of numpy warnings before the plan, once
        plan = plan_campaigns(Prior(flat, "a tie", 256, 8192, 64), 0.1, campaigns=1)
    assert plan.designs[0].design == "adaptive"



def test_plan_warns_that_a_few_campaigns_cannot_read_coverage():
    from kvcal.plan.simulate_designs import COVERAGE_CAMPAIGNS, coverage_note

    few = coverage_note(10, 0.9)
    assert few is not None and "10 campaign(s)" in few and "+-16%" in few and "nominal 90%" in few
    assert coverage_note(COVERAGE_CAMPAIGNS, 0.9) is None and coverage_note(400, 0.9) is None
    rare = coverage_note(1, 0.999)  # the spread follows the nominal level: 1.645 x sqrt(0.999 x 0.001)
    assert "+-5%" in rare and "nominal 99.9%" in rare



@pytest.mark.parametrize("args, message", [
    ([], "no prior"),
    (["--from", "x", "--model", "m", "--hardware", "h"], "not both"),
    (["--model", "llama-3.1-8b", "--hardware", "h100", "--noise-cv", "3"], "--noise-cv"),
    (["--from", "/nonexistent"], "no such file"),
])
def test_cli_plan_mistakes_are_one_line(kvcal, args, message):
    out = kvcal("plan", *args)
    assert out.code != 0 and message in out.err and "Traceback" not in out.err



def test_adaptive_spends_under_forty_percent_of_the_ladder_to_a_five_percent_interval():
    from kvcal.plan.priors import Prior
    from kvcal.plan.simulate_designs import simulate_adaptive, simulate_ladder

    prior = Prior(SimCosts(), "sim default", 256, 65472, 64)
    adaptive = simulate_adaptive(prior, 0.05, seed=2)
    ladder = simulate_ladder(prior, 0.05, seed=2)
    assert adaptive.stop == ladder.stop == "target-width" and adaptive.width <= 0.05 and ladder.width <= 0.05
    assert adaptive.engine_s <= 0.4 * ladder.engine_s  # simulated TTFTs summed: deterministic, not a timing
    assert abs(adaptive.break_even - prior.truth) <= 0.05 * prior.truth  # one 90% interval may miss; not by far



def test_the_planned_ladder_grows_below_256_as_a_sweeps_default_design_does():
    """Before, plan's ladder never grew: a limit of 257-320 tokens left it 256 alone, which no fit can use."""
    from kvcal.plan.priors import Prior
    from kvcal.plan.simulate_designs import default_ladder

    short = SimCosts(recompute_intercept_ms=2.0, recompute_per_token_us=100.0, recompute_per_token2_ns=0.0,
                     pull_intercept_ms=20.0, pull_per_token_us=0.0)  # crossing at 180 tokens
    assert default_ladder(Prior(short, "short", 128, 256, 64)) == [128, 192, 256]
    assert default_ladder(Prior(short, "short", 128, 960, 64)) == [128, 192, 256, 384, 512, 768, 960]
    assert default_ladder(Prior(short, "short", 256, 960, 64)) == [256, 384, 512, 768, 960]  # never below the range
    # Recompute wins at 256, but one length is no curve: the ladder grows an octave all the same, and stops there.
    assert default_ladder(Prior(SimCosts(), "sim default", 128, 256, 64)) == [128, 192, 256]
    assert default_ladder(Prior(SimCosts(), "sim default", 128, 960, 64)) == [256, 384, 512, 768, 960]
    assert default_ladder(Prior(SimCosts(), "sim default", 256, 300, 64)) == [256]  # no room below within the range



def test_a_simulated_campaign_counts_what_its_search_cost_apart():
    from kvcal.plan.priors import Prior
    from kvcal.plan.simulate_designs import simulate_adaptive

    # GLM-like curves: the seed (256, 512) and a climb to 2K find the crossover near 3.8K, then rounds narrow it.
    costs = SimCosts(recompute_intercept_ms=40.0, recompute_per_token_us=80.0, recompute_per_token2_ns=0.6,
                     pull_intercept_ms=350.0, pull_per_token_us=0.8, noise_cv=0.05)
    campaign = simulate_adaptive(Prior(costs, "glm-like", 256, 131008, 64), 0.05, seed=1)
    seed_and_climb_floor = 2 * 3 * 350.0 / 1e3  # a pair of pulls at each of three lengths, 350 ms apiece at least
    assert seed_and_climb_floor < campaign.search_s < campaign.engine_s



def test_stopping_on_the_width_keeps_most_intervals_on_the_truth():
    from kvcal.plan.priors import Prior
    from kvcal.plan.simulate_designs import simulate_adaptive

    prior = Prior(SimCosts(noise_cv=0.05), "sim default", 256, 65472, 64)
    campaigns = [simulate_adaptive(prior, 0.10, seed) for seed in range(12)]
    assert all(c.stop == "target-width" and c.width <= 0.10 for c in campaigns)
    # Nominal 0.90: 12 campaigns cover at least 9 times unless the stop rule shrinks the intervals (P < 0.03 if not).
    assert sum(c.covered for c in campaigns) >= 9



def test_plan_from_a_fit_with_a_negative_coefficient_says_why_it_cannot(tmp_path, kvcal):
    import factories
    from kvcal.fit.io import write_fit

    fit = factories.make_fit(recompute=factories.make_curve(-75.0, 30.0, 0.5))  # as the gpt-oss ladder's affine fit
    path = write_fit(fit, tmp_path / "fit.json")
    result = kvcal("plan", "--from", path, "--campaigns", "1")
    assert result.code == 2 and result.err.count("\n") == 1
    assert "recompute_intercept_ms -75: the simulator takes coefficients of 0 or more" in result.err



def test_plan_simulates_the_regret_stop():
    plan = plan_campaigns(Prior(NEAR_290, "near 290", 128, 8192, 64), 0.10, campaigns=1, target_regret=0.005,
                          judge=emit_judge)
    adaptive = plan.designs[0]
    assert adaptive.design == "adaptive" and adaptive.stop_reasons == {"target-regret": 1.0}
    assert adaptive.regret_median is not None and adaptive.regret_median <= 0.005 and plan.target_regret == 0.005
    assert adaptive.reached_target_share == 1.0



def test_cli_plan_refuses_a_regret_target_out_of_bounds(kvcal):
    done = kvcal("plan", "--model", "glm-4.5", "--hardware", "h200", "--target-regret", "0")
    assert done.code == 2 and "--target-regret" in done.err
