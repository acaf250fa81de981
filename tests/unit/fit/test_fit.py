"""The fit: constrained curves, selection, break-even, bootstrap, fit.json - against known truths."""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from scipy import optimize

from kvcal.engines.sim import SimCosts
from kvcal.errors import InputError
from kvcal.fit import curve_ms, fit_table, load_fit, load_or_fit, write_fit
from kvcal.fit.bootstrap import t_expansion
from kvcal.fit.breakeven import break_even_tokens, classify, interval
from kvcal.fit.curves import LegData, fit_leg, solve_nnls
from kvcal.records.fit import FitResult
from kvcal.records.fit import FitSettings
from kvcal.fit.tables import from_rows, load_probe_table
from factories import sim_table
from kvcal.records.fit import FitSource
from kvcal.records.run import RunSetup
from kvcal.records.manifest import RunManifest

import factories

SETUP_KEYS = {"model", "engine", "transport", "block_size", "kv_bytes_per_token", "kv_dtype", "accelerator",
              "device_count", "python_hash_seed", "kv_transfer_config", "created_at"}

CPU = SimCosts()  # break-even ~682 tokens
CONVEX = SimCosts(recompute_intercept_ms=2.0, recompute_per_token_us=12.0, recompute_per_token2_ns=0.4,
                  pull_intercept_ms=150.0, pull_per_token_us=8.0)  # break-even ~14.9K tokens
CPU_LADDER = [256, 512, 1024, 2048, 4096, 8192]
CONVEX_LADDER = [1024, 2048, 4096, 8192, 16384, 32768, 49152]
GPT_OSS = {  # the published gpt-oss-120b ladder (5-rep medians, H200, RDMA)
    2048: (70.6, 49.0), 8192: (205.4, 120.1), 16384: (426.3, 196.2), 32768: (983.0, 376.3), 49152: (1695.0, 550.5),
}


def ladder_table(points: dict[int, tuple[float, float]]):
    rows = []
    for n, (rec, pull) in points.items():
        rows.append({"prefix_tokens": n, "leg": "recompute", "ttft_ms": rec, "rep": 0, "bytes_moved": None})
        rows.append({"prefix_tokens": n, "leg": "pull", "ttft_ms": pull, "rep": 0, "bytes_moved": None})
    return from_rows(rows, origin=FitSource(kind="test"))


# --- non-negative least squares and curves ------------------------------------------------------


def test_solve_nnls_matches_scipy_nnls_batched():
    rng = np.random.default_rng(3)
    for _ in range(20):
        x = rng.normal(size=(12, 3))
        y = rng.normal(size=(4, 12))
        gram = x.T @ x
        beta, obj = solve_nnls(gram, y @ x)
        for b in range(4):
            expected, _ = optimize.nnls(x, y[b])
            np.testing.assert_allclose(beta[b], expected, atol=1e-9)
            assert obj[b] == pytest.approx(np.sum((y[b] - x @ expected) ** 2) - np.sum(y[b] ** 2), abs=1e-9)


def test_noise_free_data_recovers_the_true_curves_and_break_even():
    costs = CONVEX.model_copy(update=dict(noise_cv=0.0))
    fit = fit_table(sim_table(costs, CONVEX_LADDER, 2, seed=0), settings=FitSettings(n_resamples=200))
    assert fit.recompute.model == "quadratic" and fit.pull.model == "affine"
    assert fit.recompute.intercept_ms == pytest.approx(2.0, abs=1e-6)
    assert fit.recompute.per_token_us == pytest.approx(12.0, rel=1e-7)
    assert fit.recompute.per_token2_ns == pytest.approx(0.4, rel=1e-7)
    assert fit.pull.intercept_ms == pytest.approx(150.0, rel=1e-9)
    assert fit.break_even_tokens == pytest.approx(costs.true_break_even(), abs=0.1)
    assert fit.status == "crossover" and not fit.extrapolated


def test_curve_ms_units():
    fit = fit_table(sim_table(CPU.model_copy(update=dict(noise_cv=0.0)), CPU_LADDER, 2), settings=FitSettings(n_resamples=0))
    n = np.array([0.0, 1000.0, 8192.0])
    np.testing.assert_allclose(curve_ms(fit.pull, n), CPU.pull_ms(n), rtol=1e-9)


def test_coefficients_are_never_negative_even_when_a_line_would_want_it():
    # A convex curve through few points: an unconstrained straight line has a negative intercept.
    table = ladder_table({n: (0.001 * n + 2e-6 * n * n, 50 + 0.002 * n) for n in (4096, 8192, 16384, 32768)})
    line = np.polyfit(table.lengths, [0.001 * n + 2e-6 * n * n for n in table.lengths], 1)
    assert line[1] < 0  # the naive fit would go negative
    fit = fit_table(table, settings=FitSettings(n_resamples=300))
    for curve in (fit.recompute, fit.pull):
        assert min(curve.intercept_ms, curve.per_token_us, curve.per_token2_ns) >= 0
        for model in curve.alternatives.values():
            assert min(model["intercept_ms"], model["per_token_us"], model["per_token2_ns"]) >= 0
    for name in ("recompute_samples", "pull_samples"):
        for values in fit.bootstrap.leg_samples(name.removesuffix("_samples")).values():
            assert min(values) >= 0


# --- robust loss ------------------------------------------------------------------------------


FLAT_PULL_REPS = {  # a GLM-like flat pull (two reps a length; simulated) whose first fit puts the pull's slope at 0
    256: ((57.201593106002214, 58.29321079261743), (392.60387845169146, 413.7274758869632)),
    512: ((80.0159803164773, 81.52973928023042), (426.02317774190556, 426.3403567423084)),
    2048: ((211.0513708261067, 201.508759591914), (394.51023015441484, 393.33153211069686)),
    8192: ((722.1915863821097, 732.8236376897132), (394.9251866749119, 391.73700761290235)),
}


def test_a_flat_pull_with_a_zero_slope_fits_instead_of_crashing_the_robust_solver():
    # scipy's bounded least squares raised "`x` is not within the trust region" from a start on the bound.
    rows = [{"prefix_tokens": n, "leg": leg, "ttft_ms": value, "rep": rep, "bytes_moved": None}
            for n, legs in FLAT_PULL_REPS.items() for leg, values in zip(("recompute", "pull"), legs)
            for rep, value in enumerate(values)]
    fit = fit_table(from_rows(rows, origin=FitSource(kind="test")), settings=FitSettings(n_resamples=300))
    assert fit.pull.per_token_us == pytest.approx(0.0, abs=1e-6)
    assert 2048 < fit.break_even_tokens < 8192
    low, high = fit.break_even_ci
    assert low < fit.break_even_tokens < high


def _huber_direct(data: LegData, p: int, f_scale: float) -> np.ndarray:
    x = data.basis(p)[data.group]
    s = data.scale_ms[data.group]
    sol = optimize.least_squares(lambda b: (data.ttft_ms - x @ b) / s, np.ones(p), bounds=(0, np.inf), loss="huber",
                                 f_scale=f_scale, xtol=1e-14, ftol=1e-14, gtol=1e-14)
    return sol.x


def test_refit_with_converged_huber_weights_is_the_huber_solution():
    table = sim_table(CPU.model_copy(update=dict(outlier_rate=0.05)), CPU_LADDER, 5, seed=11)
    data = LegData.from_frame("recompute", table.leg("recompute"), max(table.lengths))
    leg = fit_leg(data, ("affine", "quadratic"))
    assert leg.f_scale is not None
    direct = _huber_direct(leg.data, 3, leg.f_scale)
    from kvcal.fit.curves import to_physical
    np.testing.assert_allclose(leg.fits["quadratic"].coef, to_physical(direct, data.n_ref), rtol=1e-4, atol=1e-6)


def test_a_single_wild_probe_barely_moves_the_break_even_and_is_reported():
    table = sim_table(CPU, CPU_LADDER, 5, seed=4)
    clean = fit_table(table, settings=FitSettings(n_resamples=200))
    probes = table.probes.copy()
    wild = probes.index[(probes["leg"] == "pull") & (probes["prefix_tokens"] == 512)][2]
    probes.loc[wild, "ttft_ms"] *= 6.0  # a scheduler hiccup
    dirty = fit_table(replace(table, probes=probes), settings=FitSettings(n_resamples=200))
    assert dirty.break_even_tokens == pytest.approx(clean.break_even_tokens, rel=0.02)
    assert [(d["prefix_tokens"], d["rep"]) for d in dirty.pull.downweighted] == [(512, int(probes.loc[wild, "rep"]))]
    assert any("down-weighted 1 probe" in w for w in dirty.warnings)
    # Plain least squares would have been dragged: the robust loss is doing the work.
    plain = np.polyfit(probes[probes["leg"] == "pull"]["prefix_tokens"], probes[probes["leg"] == "pull"]["ttft_ms"], 1)
    assert plain[1] > 1.1 * dirty.pull.intercept_ms


# --- model selection ------------------------------------------------------------------------------


def test_convex_recompute_selects_quadratic_and_reports_both():
    fit = fit_table(sim_table(CONVEX, CONVEX_LADDER, 3, seed=2), settings=FitSettings(n_resamples=200))
    assert fit.recompute.model == "quadratic"
    assert set(fit.recompute.alternatives) == {"affine", "quadratic"}
    assert fit.recompute.alternatives["quadratic"]["wsse"] < fit.recompute.alternatives["affine"]["wsse"]
    assert "F-test" in fit.recompute.selection and "quadratic" in fit.recompute.selection
    assert fit.pull.model == "affine" and set(fit.pull.alternatives) == {"affine"}


def test_linear_recompute_mostly_selects_affine():
    linear = CPU.model_copy(update=dict(recompute_per_token2_ns=0.0))
    chosen = [fit_table(sim_table(linear, CPU_LADDER, 3, seed=s), settings=FitSettings(n_resamples=0)).recompute.model for s in range(20)]
    assert chosen.count("affine") >= 17  # a level-0.05 test keeps the false-curvature rate low


# --- break-even: exact roots and status ---------------------------------------------------------


@pytest.mark.parametrize("costs", [CPU, CONVEX, CPU.model_copy(update=dict(recompute_per_token2_ns=0.0)),
                                   SimCosts(recompute_intercept_ms=0.0, recompute_per_token_us=1.0,
                                            recompute_per_token2_ns=2.0, pull_intercept_ms=500.0, pull_per_token_us=30.0)])
def test_break_even_matches_the_simulators_exact_root(costs):
    rec = [costs.recompute_intercept_ms, costs.recompute_per_token_us, costs.recompute_per_token2_ns]
    pull = [costs.pull_intercept_ms, costs.pull_per_token_us, 0.0]
    assert float(break_even_tokens(rec, pull)) == pytest.approx(costs.true_break_even(), rel=1e-10)


def test_break_even_edge_cases_vectorised():
    rec = np.array([[10.0, 5.0, 0.0],   # floor above the pull's: pull wins from 0
                    [1.0, 2.0, 0.0],    # slope below the pull's: the pull never wins
                    [1.0, 3.0, 0.0],    # parallel, pull dearer: never
                    [5.0, 3.0, 0.0],    # parallel, pull cheaper: always
                    [1.0, 1.0, 1.0]])   # convex: crosses eventually
    pull = np.array([[5.0, 3.0, 0.0]] * 5)
    out = break_even_tokens(rec, pull)
    assert out[0] == 0.0 and math.isinf(out[1]) and math.isinf(out[2]) and out[3] == 0.0
    n = out[4]
    assert curve_poly(rec[4], n) == pytest.approx(curve_poly(pull[4], n), abs=1e-9)


def curve_poly(coef, n):
    return coef[0] + coef[1] * n / 1e3 + coef[2] * n * n / 1e6


def test_break_even_is_the_last_crossing_when_recompute_dips_below_then_wins():
    # The pull wins below ~550 tokens (its floor is lower), loses between the roots, and wins again
    # beyond ~18.5K: the threshold a router needs is the larger root, from which on the pull keeps winning.
    rec = np.array([30.0, 1.0, 1.0])
    pull = np.array([20.0, 20.0, 0.0])
    be = float(break_even_tokens(rec, pull))
    n = np.linspace(be * 1.0001, be * 10, 50)
    assert np.all(curve_poly(rec, n) >= curve_poly(pull, n))
    assert curve_poly(rec, be * 0.99) < curve_poly(pull, be * 0.99)


@pytest.mark.parametrize("be, status, extrapolated", [
    (1500.0, "crossover", False), (800.0, "pull-always-wins", True), (0.0, "pull-always-wins", True),
    (1000.0, "pull-always-wins", False), (9000.0, "recompute-always-wins", True), (math.inf, "recompute-always-wins", False),
])
def test_classify(be, status, extrapolated):
    assert classify(be, 1000, 8192) == (status, extrapolated)


def test_ladder_above_the_truth_is_pull_always_wins_with_advice_to_go_shorter():
    fit = fit_table(sim_table(CPU, [2048, 4096, 8192, 16384], 3, seed=1), settings=FitSettings(n_resamples=300))
    assert fit.status == "pull-always-wins" and fit.extrapolated
    assert fit.break_even_tokens is not None and fit.break_even_tokens < 2048
    advice = next(w for w in fit.warnings if "add shorter lengths" in w)
    lengths = [int(n) for n in advice.split("--prefix-lengths ")[1].split()[0].split(",")]
    assert lengths[-1] == 1536 and min(lengths) <= fit.break_even_tokens / 2 and all(n % 64 == 0 for n in lengths)
    assert fit.smallest_pull_win_tokens == 2048


def test_ladder_below_the_truth_is_recompute_always_wins_with_advice_to_go_longer():
    fit = fit_table(sim_table(CONVEX, [1024, 2048, 4096, 6144], 3, seed=1), settings=FitSettings(n_resamples=300))
    assert fit.status == "recompute-always-wins"
    assert fit.smallest_pull_win_tokens is None
    advice = next(w for w in fit.warnings if "add longer lengths" in w or "never catches up" in w)
    if "--prefix-lengths" in advice:
        lengths = [int(n) for n in advice.split("--prefix-lengths ")[1].split()[0].split(",")]
        assert lengths[0] > 6144 and all(n % 64 == 0 for n in lengths)


# --- the published gpt-oss-120b ladder --------------------------------------------------------------


def test_published_gpt_oss_ladder_never_places_a_crossover_above_2048():
    fit = fit_table(ladder_table(GPT_OSS), settings=FitSettings(n_resamples=2000))
    assert fit.recompute.model == "quadratic"  # recompute is convex here
    assert fit.status == "pull-always-wins"
    assert fit.break_even_tokens is not None and fit.break_even_tokens < 2048
    assert fit.break_even_ci is not None and fit.break_even_ci[1] < 2048
    assert fit.bootstrap.status_shares["crossover"] < 0.05
    assert fit.smallest_pull_win_tokens == 2048
    # Straight lines would cross near 4.3K tokens, contradicting the 2048-token measurement.
    n = np.array(list(GPT_OSS), dtype=float)
    rec_line = np.polyfit(n, [r for r, _ in GPT_OSS.values()], 1)
    pull_line = np.polyfit(n, [p for _, p in GPT_OSS.values()], 1)
    assert (pull_line[1] - rec_line[1]) / (rec_line[0] - pull_line[0]) > 2048 and rec_line[1] < 0
    # The fit honours every measurement: at each length the fitted pull is faster, as measured.
    for n, (rec, pull) in GPT_OSS.items():
        assert curve_ms(fit.pull, n) < curve_ms(fit.recompute, n)
        assert float(curve_ms(fit.recompute, n)) == pytest.approx(rec, rel=0.05)


# --- bootstrap ----------------------------------------------------------------------------------


def test_interval_covers_the_truth_near_its_nominal_rate_and_error_is_small():
    truth = CPU.true_break_even()
    errors, covered, seeds = [], 0, 40
    for seed in range(seeds):
        fit = fit_table(sim_table(CPU, CPU_LADDER, 3, seed=700 + seed), settings=FitSettings(n_resamples=500, seed=seed))
        errors.append(abs(fit.break_even_tokens - truth) / truth)
        covered += fit.break_even_ci[0] <= truth <= fit.break_even_ci[1]
    assert float(np.median(errors)) < 0.05
    assert 0.75 <= covered / seeds <= 1.0  # nominal 0.9; 40 seeds leave a standard error near 0.05


def test_same_seed_same_result_other_seed_other_samples():
    table = sim_table(CPU, CPU_LADDER, 3, seed=5)
    a, b, c = fit_table(table, settings=FitSettings(seed=1)), fit_table(table, settings=FitSettings(seed=1)), fit_table(table, settings=FitSettings(seed=2))
    assert a.bootstrap.break_even_samples == b.bootstrap.break_even_samples
    assert a.break_even_ci == b.break_even_ci and a.recompute.ci == b.recompute.ci
    assert a.bootstrap.break_even_samples != c.bootstrap.break_even_samples


def test_bootstrap_summary_fields_and_sizes():
    fit = fit_table(sim_table(CPU, CPU_LADDER, 3, seed=5), settings=FitSettings(n_resamples=400, seed=3))
    boot = fit.bootstrap
    assert boot.n_resamples == 400 and boot.seed == 3 and boot.method == "pooled-reps"
    assert 0.0 <= boot.no_crossover_share <= 1.0
    assert sum(boot.status_shares.values()) == pytest.approx(1.0)
    assert len(boot.break_even_samples) == 400
    for leg in ("recompute", "pull"):
        assert set(boot.leg_samples(leg)) == {"intercept_ms", "per_token_us", "per_token2_ns"}
        assert all(len(v) == 400 for v in boot.leg_samples(leg).values())
        lo, hi = getattr(fit, leg).ci["per_token_us"]
        assert lo <= getattr(fit, leg).per_token_us <= hi
    lo, hi = fit.break_even_ci
    assert lo <= fit.break_even_tokens <= hi


def test_higher_confidence_gives_a_wider_interval():
    table = sim_table(CPU, CPU_LADDER, 3, seed=8)
    narrow, wide = fit_table(table, settings=FitSettings(confidence=0.5)), fit_table(table, settings=FitSettings(confidence=0.95))
    assert wide.break_even_ci[1] - wide.break_even_ci[0] > 1.5 * (narrow.break_even_ci[1] - narrow.break_even_ci[0])


def test_one_rep_per_length_uses_the_residual_bootstrap():
    fit = fit_table(sim_table(CPU, [128, 256, 512, 1024, 2048, 4096, 8192], 1, seed=3), settings=FitSettings(n_resamples=500))
    assert fit.bootstrap.method == "residual"
    assert fit.break_even_ci is not None
    assert any("single probe" in w for w in fit.warnings)


def test_no_residual_df_means_no_interval():
    table = ladder_table({1024: (30.0, 25.0), 4096: (100.0, 35.0)})
    fit = fit_table(table)
    assert fit.break_even_tokens is not None and fit.break_even_ci is None
    assert any("no interval" in w for w in fit.warnings)


def test_interval_handles_never_crossing_samples():
    low, high = interval(np.array([100.0, 200.0, 300.0, np.inf, np.inf]), 0.9)
    assert low == 100.0 and math.isinf(high)


def test_t_expansion_shrinks_to_one_with_many_df():
    assert t_expansion(10_000, 0.9) == pytest.approx(1.0, abs=1e-3)
    assert t_expansion(7, 0.9) == pytest.approx(1.152, abs=0.01)


def test_fit_plus_2000_resamples_on_500_probes_is_fast():
    table = sim_table(CPU, [256, 512, 1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384], 25, seed=1)
    assert len(table.probes) == 500
    fit_table(table, settings=FitSettings(n_resamples=2000))  # warm caches
    start = time.process_time()  # CPU time: other work on a shared machine does not count
    fit_table(table, settings=FitSettings(n_resamples=2000))
    assert time.process_time() - start < 1.0  # typically ~0.1-0.3 s


# --- bad settings and insufficient data -------------------------------------------------------------


@pytest.mark.parametrize("kw, message", [({"confidence": 1.0}, "between 0 and 1"), ({"confidence": 0.0}, "between 0 and 1"),
                                         ({"seed": -1}, "non-negative"), ({"n_resamples": 10}, "too few")])
def test_bad_settings(kw, message):
    """The settings are refused when they are built, before a table is fitted (their bounds are FitSettings')."""
    from kvcal.fit.settings import fit_settings

    with pytest.raises(InputError, match=message):
        fit_table(sim_table(CPU, CPU_LADDER, 2), fit_settings(**kw))


def test_one_length_only_and_missing_leg():
    with pytest.raises(InputError, match="one prefix length only"):
        fit_table(ladder_table({2048: (70.0, 49.0)}))
    rows = [{"prefix_tokens": n, "leg": "recompute", "ttft_ms": n / 10, "rep": 0, "bytes_moved": None} for n in (1024, 2048)]
    with pytest.raises(InputError, match="no pull probes"):
        fit_table(from_rows(rows))


def test_zero_resamples_gives_no_intervals():
    fit = fit_table(sim_table(CPU, CPU_LADDER, 2), settings=FitSettings(n_resamples=0))
    assert fit.break_even_ci is None and fit.recompute.ci == {}
    assert any("no bootstrap" in w for w in fit.warnings)


# --- fit.json ---------------------------------------------------------------------------------------


def test_fit_json_round_trips_with_schema_key(tmp_path):
    fit = fit_table(sim_table(CPU, CPU_LADDER, 3, seed=1), settings=FitSettings(n_resamples=300))
    path = write_fit(fit, tmp_path / "fit.json")
    raw = json.loads(path.read_text())
    assert raw["schema"] == "kvcal.fit/2"
    for key in ("status", "break_even_tokens", "break_even_ci", "confidence", "extrapolated", "measured_range",
                "recompute", "pull", "block_size", "warnings", "n_probes", "n_invalid_excluded", "smallest_pull_win_tokens",
                "pull_bandwidth_gbps", "bootstrap", "source", "kvcal_version", "created_at", "setup"):
        assert key in raw
    assert set(raw["setup"]) >= SETUP_KEYS
    assert set(raw["recompute"]) >= {"model", "intercept_ms", "per_token_us", "per_token2_ns"}
    assert FitResult.model_validate_json(path.read_text()) == fit
    assert load_fit(path) == fit


def test_pull_bandwidth_and_counts_from_a_run_with_bytes():
    fit = fit_table(sim_table(CPU, CPU_LADDER, 3, seed=1, kv_bytes_per_token=2048), settings=FitSettings(n_resamples=0))
    assert fit.n_probes == 36 and fit.n_invalid_excluded == 0 and fit.block_size == 64
    # 8192 tokens x 2048 B moved in ~ CPU.pull_ms(8192) ms
    expected = 8192 * 2048 / (CPU.pull_ms(8192) / 1e3) / 1e9
    assert fit.pull_bandwidth_gbps == pytest.approx(expected, rel=0.1)


def test_load_fit_rejects_other_json(tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"schema": "kvcal.run/1"}))
    with pytest.raises(InputError, match="not a kvcal fit.json"):
        load_fit(path)
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(InputError, match="not a kvcal fit.json"):
        load_fit(tmp_path / "broken.json")


def write_sim_run(folder: Path, table) -> Path:
    """A run folder as a sweep would leave it, from a synthetic table."""
    return factories.write_run_folder(folder, table, manifest=factories.make_manifest(name="sim"))


def test_load_or_fit_prefers_a_run_folders_fit_json(tmp_path):
    folder = write_sim_run(tmp_path / "run", sim_table(CPU, CPU_LADDER, 2, seed=1))
    on_the_fly = load_or_fit(folder, settings=FitSettings(n_resamples=200))
    assert on_the_fly.source.kind == "run-folder" and on_the_fly.setup.model == "tiny"
    assert on_the_fly.setup == RunManifest.model_validate_json((folder / "run.json").read_text()).setup
    assert not (folder / "fit.json").exists()  # fitting on the fly writes nothing
    stored = fit_table(sim_table(CPU, CPU_LADDER, 2, seed=99), settings=FitSettings(n_resamples=0))
    write_fit(stored, folder / "fit.json")
    assert load_or_fit(folder) == stored


def test_load_or_fit_kinds(tmp_path: Path):
    table = sim_table(CPU, CPU_LADDER, 2, seed=1)
    csv = tmp_path / "probes.csv"
    table.probes.to_csv(csv, index=False)
    fitted = load_or_fit(csv, settings=FitSettings(n_resamples=200))
    assert fitted.source.kind == "probe-csv" and fitted.setup == RunSetup()
    written = write_fit(fitted, tmp_path / "fit.json")
    assert load_or_fit(written) == fitted
    assert load_probe_table(csv).lengths == CPU_LADDER
