"""Adaptive sweeps: the width contract through the CLI, the stop rules, resume, the record fields, the design."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kvcal.engines.sim import SimCosts
from kvcal.errors import InputError
from factories import sim_table
from kvcal.fit import fit_table
from kvcal.records.run import Leg
from kvcal.sweep.lengths import adaptive_design as design
from kvcal.records.fit import FitSettings
from kvcal.sweep.adaptive_run import read_state
from kvcal.settings.sweep import SweepConfig
from kvcal.records.run_folder import RunFolder
from kvcal.sweep.runner import run_sweep

from tests.unit.sweep.test_sweep import Crash, crashing_factory

TRUTH = SimCosts().true_break_even()


def adaptive_config(tmp_path, **overrides) -> SweepConfig:
    base = dict(engine="sim", adaptive=True, target_width=0.10, output_dir=tmp_path, name="run", seed=1)
    base.update(overrides)
    return SweepConfig.model_validate(base)


@pytest.mark.parametrize("width, seed", [(0.08, 3), (0.12, 11)])
def test_cli_adaptive_reaches_the_target_and_kvcal_fit_agrees(tmp_path, kvcal, width, seed):
    done = kvcal("sweep", "--engine", "sim", "--adaptive", "--target-width", width, "--seed", seed,
                 "--output-dir", tmp_path, "--name", "a")
    assert done.code == 0, done.err
    assert "round 1:" in done.err and f"stop at width <= {width:g}" in done.err  # the live display
    assert "adaptive stop: target-width" in done.err
    run = RunFolder(tmp_path / "a")
    state = read_state(run)
    assert state.stop_reason == "target-width" and state.final_width <= width
    fitted = kvcal("fit", tmp_path / "a", "--json")
    assert fitted.code == 0
    fit = json.loads(fitted.out)
    low, high = fit["break_even_ci"]
    assert (high - low) / fit["break_even_tokens"] <= width
    assert [low, high] == state.final_break_even_ci
    assert low <= TRUTH <= high
    valid = [r for r in run.read_probes() if r.valid and r.session != "cold"]  # cold: the session cost's samples
    assert fit["n_probes"] == len(valid) == state.n_probes


def test_every_probe_says_which_round_chose_it_and_why(tmp_path):
    outcome = run_sweep(adaptive_config(tmp_path, target_width=0.15))
    run = RunFolder(outcome.run_dir)
    records = [r for r in run.read_probes() if r.session != "cold"]
    assert all(r.adaptive_round is not None and r.adaptive_reason for r in records)
    assert {r.adaptive_round for r in records} == set(range(outcome.rounds))
    assert all(r.adaptive_reason.startswith("seed") for r in records if r.adaptive_round == 0)
    assert any("cuts the break-even's variance" in r.adaptive_reason for r in records)
    low, high = read_state(run).allowed_range
    assert all(r.prefix_tokens % 64 == 0 and low <= r.prefix_tokens <= high for r in records)
    plan = run.manifest().plan
    assert len(plan) == len(records) and all(p.adaptive_round is not None for p in plan)
    assert len({r.probe_id for r in records}) == len(records)


def test_max_probes_stops_the_campaign_within_the_budget(tmp_path):
    outcome = run_sweep(adaptive_config(tmp_path, target_width=0.01, max_probes=20))
    state = read_state(RunFolder(outcome.run_dir))
    assert outcome.stop_reason == state.stop_reason == "max-probes"
    assert state.n_probes == 20 and state.final_width > 0.01


def test_engine_seconds_stop_the_campaign_after_the_probe_that_spent_them(tmp_path):
    outcome = run_sweep(adaptive_config(tmp_path, target_width=0.01, max_engine_seconds=0.5))
    run = RunFolder(outcome.run_dir)
    spent = sum(r.ttft_ms for r in run.read_probes()) / 1e3
    assert outcome.stop_reason == "max-engine-seconds"
    assert 0.5 <= spent < 0.5 + 0.1  # the last probe (tens of ms) may carry it over, nothing more
    assert outcome.engine_seconds == pytest.approx(spent, rel=1e-6)


def test_a_pull_that_wins_at_the_shortest_length_settles_the_campaign(tmp_path):
    config = adaptive_config(tmp_path, sim={"pull_intercept_ms": 2.0, "pull_per_token_us": 1.0})
    outcome = run_sweep(config)
    assert outcome.stop_reason == "pull-wins-at-shortest" and outcome.status == "pull-always-wins"
    assert read_state(RunFolder(outcome.run_dir)).n_probes < 60


def test_a_pull_that_never_wins_settles_the_campaign_at_the_longest_length(tmp_path):
    config = adaptive_config(tmp_path, prefix_lengths=[256, 8192], sim={"pull_per_token_us": 30.0})
    outcome = run_sweep(config)
    run = RunFolder(outcome.run_dir)
    assert outcome.stop_reason == "recompute-wins-to-longest" and outcome.status == "recompute-always-wins"
    assert max(r.prefix_tokens for r in run.read_probes()) == 8192


def test_resume_finishes_the_round_then_carries_on_without_repeating_a_probe(tmp_path):
    config = adaptive_config(tmp_path)
    with pytest.raises(Crash):
        run_sweep(config, pair_factory=crashing_factory(2 + 13))  # 2: the opening calls (kvcal.sweep.coldstart)
    run = RunFolder(tmp_path / "run")
    before = run.read_probes()
    assert len(before) == 1 + 13 and read_state(run).stop_reason is None
    outcome = run_sweep(config, resume=True)
    after = run.read_probes()
    assert after[:14] == before and outcome.done_before == 13 and outcome.resumed
    assert len({r.probe_id for r in after}) == len(after)
    assert outcome.stop_reason == "target-width"


def test_resume_with_a_larger_budget_continues_a_stopped_run(tmp_path):
    first = run_sweep(adaptive_config(tmp_path, target_width=0.05, max_probes=16))
    assert first.stop_reason == "max-probes"
    # Resume uses the stored settings; only the stop rules given now override the stored ones.
    flags = SweepConfig.model_validate(dict(engine="sim", output_dir=tmp_path, name="run", max_probes=400))
    again = run_sweep(flags, resume=True)
    assert again.stop_reason == "target-width"
    state = read_state(RunFolder(first.run_dir))
    assert state.rules.target_width == 0.05 and state.n_probes > 16 and state.final_width <= 0.05


def test_design_grid_and_range_are_block_multiples_within_the_limit():
    grid = design.candidate_lengths(256, 65472, 64)
    assert grid[0] == 256 and grid[-1] == 65472 and all(n % 64 == 0 for n in grid)
    assert all(b / a <= 1.3 for a, b in zip(grid, grid[1:]))
    assert design.allowed_range(None, 64, 65536) == (128, 65472)  # from the floor: two blocks
    assert design.allowed_range([512, 4096, 1024], 16, 8192) == (512, 4096)
    with pytest.raises(InputError, match="range of lengths"):
        design.allowed_range([512], 64, 8192)


def test_design_spends_its_probes_near_the_break_even():
    table = sim_table(SimCosts(), [256, 1024, 4096], reps=2, seed=5)
    fit = fit_table(table, settings=FitSettings(n_resamples=200))
    measured = {leg: {n: 2 for n in (256, 1024, 4096)} for leg in (Leg.RECOMPUTE, Leg.PULL)}
    choices = design.choose_batch(fit, measured, design.candidate_lengths(256, 65472, 64), 24, 1)
    lengths = np.repeat([c.prefix_tokens for c in choices], [c.count for c in choices])
    assert sum(c.count for c in choices) == 24 and all(c.count % 2 == 0 for c in choices)
    # Within LOCAL_SPAN of the current interval, which holds the truth: no probe far from the crossover.
    assert TRUTH / 2.5 <= min(lengths) and max(lengths) <= 2.5 * TRUTH


def _round_probes(**stop_early) -> int:
    """Probes a 40-probe design round on the sim default's seed-like table takes, given its early-end rules."""
    table = sim_table(SimCosts(), [256, 1024, 4096], reps=2, seed=5)
    fit = fit_table(table, settings=FitSettings(n_resamples=200))
    measured = {leg: {n: 2 for n in (256, 1024, 4096)} for leg in (Leg.RECOMPUTE, Leg.PULL)}
    grid = design.candidate_lengths(256, 65472, 64)
    return sum(c.count for c in design.choose_batch(fit, measured, grid, 40, 1, **stop_early))


def test_a_round_ends_once_the_design_predicts_the_target_width():
    def probes(enough):
        return _round_probes(enough=enough)

    assert probes(None) == 40  # no width to aim at: the size batch_size allowed
    assert probes(1e-9) == 40  # a target out of this round's reach: the whole allowance
    assert probes(0.999) == design.MIN_ROUND_PAIRS * design.PAIR  # nearly there: the least round
    assert design.MIN_ROUND_PAIRS * design.PAIR < probes(0.3) < 40  # in between: as many pairs as the model needs
    assert probes(0.3) <= probes(0.1)


def test_a_round_also_ends_once_the_models_own_width_reaches_the_target():
    def probes(target_width):
        return _round_probes(target_width=target_width)

    assert probes(None) == probes(1e-6) == 40  # no target, or one out of this round's reach: the whole allowance
    assert probes(10.0) == design.MIN_ROUND_PAIRS * design.PAIR  # already there by the model: the least round
    assert design.MIN_ROUND_PAIRS * design.PAIR < probes(0.08) < 40
    assert probes(0.08) <= probes(0.04)


def test_the_share_of_variance_a_round_may_leave_is_the_squared_width_ratio():
    assert design.variance_share_to_target(0.2, 0.1) == pytest.approx(0.25)
    assert design.variance_share_to_target(None, 0.1) is None
    assert design.variance_share_to_target(float("inf"), 0.1) is None
    assert design.variance_share_to_target(0.0, 0.1) is None


def test_batch_size_aims_at_the_target_between_four_and_doubling():
    assert design.batch_size(40, None, 0.1) == 20
    assert design.batch_size(40, 0.4, 0.1) == 40
    assert design.batch_size(100, 0.12, 0.1) == 16  # 100 x (1.44 x ROUND_AIM 0.8 - 1) = 15.2, in pairs
    assert design.batch_size(100, 0.15, 0.1) == 80  # 100 x (2.25 x 0.8 - 1)
    assert design.batch_size(100, 0.101, 0.1) == 4  # aiming short: just over the target gets the least round
    assert design.batch_size(100, 0.09, 0.1) == 4


def test_the_seed_measures_both_legs_at_the_shortest_length_and_twice_it():
    grid = design.candidate_lengths(256, 65472, 64)
    seed = design.seed_design(grid)
    assert {(c.prefix_tokens, c.leg) for c in seed} == {(n, leg) for n in (256, 512) for leg in (Leg.RECOMPUTE, Leg.PULL)}
    assert all(c.count == design.PAIR for c in seed)
    narrow = design.candidate_lengths(1024, 1088, 64)  # no 2x inside the range: the next grid length
    assert sorted({c.prefix_tokens for c in design.seed_design(narrow)}) == [1024, 1088]


def test_a_pair_is_worth_what_it_takes_off_the_width_the_fit_reports_t_included():
    cut = np.array([1.0, 1.0])
    gained = np.array([2, 1])  # the same variance cut at a length the leg has measured, and at a new one
    weaker = design.t_weighted_cut(10.0, cut, 3, 20, gained, 0.9)
    assert weaker[0] > weaker[1] > 0  # the weaker leg's df set the t factor: the repeat buys more of it
    stronger = design.t_weighted_cut(10.0, cut, 20, 3, gained, 0.9)
    assert stronger[0] == stronger[1] == pytest.approx(1.0 * (2.353363 ** 2), rel=1e-4)  # t_3 either way
    assert design.t_weighted_cut(10.0, np.array([0.0]), 10**6, 10**6, np.array([2]), 0.9)[0] == pytest.approx(0.0)


@pytest.mark.parametrize("costs", [SimCosts(), SimCosts(recompute_intercept_ms=40.0, recompute_per_token_us=80.0,
                                                        recompute_per_token2_ns=0.6, pull_intercept_ms=350.0,
                                                        pull_per_token_us=0.8)], ids=["sim-default", "glm-like"])
def test_counting_t_leaves_the_weaker_leg_more_degrees_of_freedom(costs, monkeypatch):
    fit = fit_table(sim_table(costs, [256, 1024, 4096], reps=2, seed=5), settings=FitSettings(n_resamples=200))
    measured = {leg: {n: 2 for n in (256, 1024, 4096)} for leg in (Leg.RECOMPUTE, Leg.PULL)}
    grid = design.candidate_lengths(256, 65472, 64)

    def weakest_df(choices):  # pure error: 2 a pair at a measured length, 1 for a new length's first pair
        return min(3 + sum(c.count - (c.prefix_tokens not in measured[leg]) for c in choices if c.leg is leg)
                   for leg in measured)

    counted = weakest_df(design.choose_batch(fit, measured, grid, 24, 1))
    monkeypatch.setattr(design, "t_weighted_cut", lambda variance, cut, *rest: cut)  # Var(n*) alone
    assert counted > weakest_df(design.choose_batch(fit, measured, grid, 24, 1))


def test_the_climb_leaves_a_near_tie_at_the_top_to_the_design():
    grid = design.candidate_lengths(256, 131008, 64)
    tipped = {256: (62.0, 351.0), 1024: (122.0, 351.0), 4096: (340.0, 360.0)}  # the pull lost at 4K by 6%
    climb = design.extension(grid, tipped, None)
    assert {(c.prefix_tokens, c.leg, c.count) for c in climb} == {(16384, Leg.RECOMPUTE, 1), (16384, Leg.PULL, 1)}
    assert design.extension(grid, tipped, 20000.0) == climb  # the fit puts the crossover far beyond: climb on
    assert design.extension(grid, tipped, 4400.0) == []  # within LOCAL_SPAN of 4096: the design's job
    assert design.extension(grid, {**tipped, 4096: (380.0, 360.0)}, None) == []  # the pull won at the top


def test_the_controller_designs_around_a_fitted_near_tie_instead_of_climbing():
    from kvcal.fit.tables import from_rows
    from kvcal.records.run import RunSetup
    from kvcal.sweep.adaptive import Controller, StopRules

    ttft = {("recompute", 256): (61, 63), ("recompute", 1024): (120, 124), ("recompute", 4096): (338, 342),
            ("pull", 256): (350, 352), ("pull", 1024): (351, 353), ("pull", 4096): (359, 361)}
    rows = [{"prefix_tokens": n, "leg": leg, "ttft_ms": ms, "rep": rep, "bytes_moved": 1 if leg == "pull" else 0}
            for (leg, n), pair in ttft.items() for rep, ms in enumerate(pair)]
    table = from_rows(rows, setup=RunSetup(engine="sim", model="sim", block_size=64))
    controller = Controller(256, 131008, 64, StopRules(target_width=0.05), screen_resamples=200)
    step = controller.step(table, engine_seconds=3.0, round_index=2)
    assert step.stop is None and step.fit is not None and 4096 < step.fit.break_even_tokens < 8192
    assert step.kind == "design" and max(c.prefix_tokens for c in step.choices) < 16384


def test_cli_adaptive_dry_run_shows_the_seed_round_and_the_rules(tmp_path, kvcal):
    out = kvcal("sweep", "--engine", "sim", "--adaptive", "--target-width", "0.07", "--max-probes", "90",
                "--prefix-lengths", "256,8192", "--output-dir", tmp_path, "--dry-run")
    assert out.code == 0
    assert "lengths 256-8192" in out.out and "width <= 0.07 or 90 probes" in out.out
    assert "256\trecompute\tx2" in out.out and "512\tpull\tx2" in out.out
    assert not any(tmp_path.iterdir())


def test_no_interval_from_the_seeds_two_reps_may_stop_a_campaign(tmp_path):
    # A pull far ahead: the seed's fit already puts the interval below 256, but with 2 reps a length.
    config = adaptive_config(tmp_path, sim={"pull_intercept_ms": 1.0, "pull_per_token_us": 0.5, "noise_cv": 0.02})
    outcome = run_sweep(config)
    state = read_state(RunFolder(outcome.run_dir))
    assert outcome.stop_reason == "pull-wins-at-shortest" and state.n_probes > 8 and len(state.rounds) >= 2


GLM_LIKE_QUIET = SimCosts(recompute_intercept_ms=40.0, recompute_per_token_us=80.0, recompute_per_token2_ns=0.6,
                          pull_intercept_ms=350.0, pull_per_token_us=0.8, noise_cv=0.01)


def _pure_error_df(counts: dict[int, int]) -> int:
    return sum(counts.values()) - len(counts)


@pytest.mark.parametrize("costs, lengths", [(SimCosts(noise_cv=0.01), [256, 512, 1024]),
                                            (GLM_LIKE_QUIET, [256, 1024, 4096, 8192])], ids=["sim-default", "glm-like"])
def test_a_thin_interval_buys_its_missing_df_at_lengths_already_measured(costs, lengths):
    from kvcal.sweep.adaptive import MIN_STOP_DF

    fit = fit_table(sim_table(costs, lengths, reps=2, seed=5), settings=FitSettings(n_resamples=500))
    measured = {leg: {n: 2 for n in lengths} for leg in (Leg.RECOMPUTE, Leg.PULL)}
    choices = design.df_top_up(fit, measured, design.candidate_lengths(256, 131008, 64), MIN_STOP_DF, 3)
    assert choices and all(c.prefix_tokens in lengths and c.count % design.PAIR == 0 for c in choices)
    assert all("df to 6" in c.reason for c in choices)
    for leg in measured:
        after = dict(measured[leg])
        for c in (c for c in choices if c.leg is leg):
            after[c.prefix_tokens] += c.count
        bought = sum(after.values()) - sum(measured[leg].values())
        assert MIN_STOP_DF <= _pure_error_df(after) < MIN_STOP_DF + design.PAIR  # the floor, and no pair past it
        assert bought == design.PAIR * -(-(MIN_STOP_DF - _pure_error_df(measured[leg])) // design.PAIR)


def test_the_top_up_prefers_a_cheap_short_recompute_to_one_at_the_crossover():
    lengths = [256, 1024, 4096, 8192]
    fit = fit_table(sim_table(GLM_LIKE_QUIET, lengths, reps=2, seed=5), settings=FitSettings(n_resamples=500))
    measured = {leg: {n: 2 for n in lengths} for leg in (Leg.RECOMPUTE, Leg.PULL)}
    choices = design.df_top_up(fit, measured, design.candidate_lengths(256, 131008, 64), 6, 3)
    recompute = [c.prefix_tokens for c in choices if c.leg is Leg.RECOMPUTE]
    assert recompute and max(recompute) < fit.break_even_tokens / 2  # ~120 ms a probe, not ~350 at 3.8K
    pulls_enough = {leg: {n: 4 for n in lengths} for leg in (Leg.RECOMPUTE, Leg.PULL)}
    assert design.df_top_up(fit, pulls_enough, design.candidate_lengths(256, 131008, 64), 6, 3) == []


def test_a_campaign_tops_up_a_thin_interval_instead_of_stopping_or_designing_afresh():
    from kvcal.sweep.adaptive import Controller, StopRules

    lengths = [256, 1024, 4096, 8192]
    controller = Controller(256, 131008, 64, StopRules(target_width=0.2))
    thin = controller.step(sim_table(GLM_LIKE_QUIET, lengths, reps=2, seed=5), engine_seconds=1.0, round_index=3)
    assert thin.stop is None and thin.kind == "design" and thin.choices
    assert all(c.prefix_tokens in lengths and "df to 6" in c.reason for c in thin.choices)
    assert sum(c.count for c in thin.choices) <= 8  # only the df: not a design round of new lengths
    enough = controller.step(sim_table(GLM_LIKE_QUIET, lengths, reps=3, seed=5), engine_seconds=1.0, round_index=4)
    assert enough.stop == "target-width"  # 8 df a leg: the same interval may stop


def test_the_width_monte_carlo_error_matches_the_spread_over_bootstrap_seeds():
    from kvcal.sweep.adaptive import relative_width
    from kvcal.sweep.regret_stop import MC_Z, width_mc_error

    table = sim_table(SimCosts(), [256, 512, 1024, 2048, 4096], 3, seed=2)
    widths = [relative_width(fit_table(table, settings=FitSettings(seed=seed, n_resamples=2000))) for seed in range(6)]
    error = width_mc_error(fit_table(table, settings=FitSettings(seed=0, n_resamples=2000)), 0.9)  # MC_Z standard errors
    assert error is not None and 0.4 < error / MC_Z / float(np.std(widths, ddof=1)) < 2.5


def test_a_width_that_meets_the_target_only_within_its_monte_carlo_error_does_not_stop():
    from kvcal.sweep.adaptive import StopRules, relative_width, settled_reason
    from kvcal.sweep.regret_stop import width_mc_error

    table = sim_table(SimCosts(), [256, 512, 1024, 2048, 4096], 4, seed=2)
    fit = fit_table(table)
    width, error = relative_width(fit), width_mc_error(fit, 0.9)
    assert width is not None and error and error > 0
    at = StopRules(target_width=width + 0.5 * error)
    clear = StopRules(target_width=width + 1.01 * error)
    measured = set(table.lengths)
    assert settled_reason(fit, at, 256, 4096, measured) is None
    assert settled_reason(fit, clear, 256, 4096, measured) == "target-width"
