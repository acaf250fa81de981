"""The threshold rule end to end (fit then emit-config): never below the data, no threshold when the data cannot support one."""

from __future__ import annotations

import json
import math
import re

import pytest

from kvcal.threshold.choose import compute_threshold
from kvcal.engines.sim import SimCosts
from kvcal.errors import NoThreshold
from kvcal.fit import fit_table
from factories import sim_table
from kvcal.records.fit import CurveFit, FitResult, HostDisturbance, LengthSummary
from kvcal.records.fit import FitSettings

# gpt-oss-like: the pull wins at every measured length; the truth (~680) lies far below the ladder.
EXTRAPOLATED = SimCosts(recompute_intercept_ms=10.0, recompute_per_token_us=30.0, pull_intercept_ms=25.0, pull_per_token_us=8.0)
TIE = SimCosts(recompute_per_token2_ns=0.0, pull_intercept_ms=5.0, pull_per_token_us=25.0)
PARALLEL = SimCosts(recompute_intercept_ms=5.0, recompute_per_token_us=10.0, recompute_per_token2_ns=0.0,
                    pull_intercept_ms=17.0, pull_per_token_us=8.0)


def write_csv(tmp_path, costs, lengths, reps, seed=1, name="probes.csv"):
    path = tmp_path / name
    sim_table(costs, lengths, reps, seed=seed).probes.drop(columns=["order"]).to_csv(path, index=False)
    return path


@pytest.mark.parametrize("lengths", [[2048, 8192, 16384, 32768, 49152], [1000, 3000, 9000], [4160, 8192, 65536]])
@pytest.mark.parametrize("reps", [1, 3])
def test_env_is_at_least_the_shortest_length_the_pull_won_from(kvcal, tmp_path, lengths, reps):
    csv = write_csv(tmp_path, EXTRAPOLATED, lengths, reps)
    assert kvcal("fit", csv, "-o", tmp_path / "fit.json", "--resamples", "400").code == 0
    res = kvcal("emit-config", tmp_path / "fit.json", "--format", "env")
    assert res.code == 0, res.err
    value = int(re.fullmatch(r"MIN_CACHED_TOKEN_DELTA=(\d+)\n", res.out).group(1))
    assert value >= lengths[0] and value % 64 == 0
    low = kvcal("emit-config", tmp_path / "fit.json", "--format", "env", "--allow-extrapolation")
    assert low.code == 0 and int(low.out.split("=")[1]) <= value
    if int(low.out.split("=")[1]) < lengths[0]:
        assert "--allow-extrapolation" in low.err and "kvcal sweep --prefix-lengths" in low.err


def test_the_published_gpt_oss_log_gives_2048(kvcal, tmp_path):
    from pathlib import Path

    log = Path(__file__).parents[2] / "fixtures" / "llmd" / "gpt-oss-120b-job.log"
    assert kvcal("fit", log, "-o", tmp_path / "fit.json").code == 0
    res = kvcal("emit-config", tmp_path / "fit.json", "--format", "env")
    assert res.out == "MIN_CACHED_TOKEN_DELTA=2048\n"


def test_a_tie_exits_3_with_nothing_on_stdout(kvcal, tmp_path):
    csv = write_csv(tmp_path, TIE, [256, 512, 1024, 2048, 4096, 8192], 3, seed=3)
    for fmt in ("env", "plugin", "json"):
        res = kvcal("emit-config", csv, "--format", fmt)
        assert res.code == 3 and res.out == ""
        assert ("tie" in res.err or "not recommended" in res.err) and "kvcal sweep" in res.err  # either way, exit 3


def _fit(**overrides) -> FitResult:
    curve = CurveFit(model="affine", intercept_ms=5.0, per_token_us=10.0, per_token2_ns=0.0)
    pull = CurveFit(model="affine", intercept_ms=17.0, per_token_us=8.0, per_token2_ns=0.0)
    base = dict(status="crossover", break_even_tokens=6000.0, break_even_ci=None, confidence=0.9, extrapolated=False,
                measured_range=[1024, 16384], recompute=curve, pull=pull, block_size=64,
                bootstrap={"n_resamples": 2000, "break_even_ci_bounds": [3100.0, None], "no_crossover_share": 0.2},
                kvcal_version="test", created_at="2026-01-01T00:00:00Z")
    return FitResult(**{**base, **overrides})


def test_an_interval_open_above_exits_3_with_nothing_on_stdout(kvcal, tmp_path):
    path = tmp_path / "fit.json"
    path.write_text(_fit().model_dump_json(by_alias=True))
    res = kvcal("emit-config", path, "--format", "env", "--rule", "upper")
    assert res.code == 3 and res.out == ""
    assert "open above" in res.err and "kvcal sweep" in res.err
    # the default rule does not refuse an interval open above when the mean costs cross in range (at 6,000)
    default = kvcal("emit-config", path, "--format", "env")
    assert default.code == 0 and default.out == "MIN_CACHED_TOKEN_DELTA=6016\n"


def test_parallel_curves_never_emit_below_the_truth(tmp_path):
    truth = PARALLEL.true_break_even()
    for seed in range(6):
        fit = fit_table(sim_table(PARALLEL, [1024, 2048, 4096, 8192, 16384], 3, seed=seed), settings=FitSettings(n_resamples=500, seed=seed))
        try:
            assert compute_threshold(fit, rule="upper").min_cached_token_delta >= truth
        except NoThreshold as err:
            assert "open above" in str(err) or "tie" in str(err)


def test_near_shortest_truth_is_not_capped_below_the_interval():
    """Truth 1,126 just above the shortest length 1,024: the threshold follows the interval's raised upper end."""
    fit = _fit(status="crossover", break_even_tokens=900.0, break_even_ci=[658.0, 1166.0], measured_range=[1024, 16384],
               smallest_pull_win_tokens=1024, pull_won_from_tokens=1024, bootstrap={})
    t = compute_threshold(fit, rule="upper")
    assert t.min_cached_token_delta == 1472  # 1166 x 1.25 = 1457.5 -> 1472, not 1024
    assert t.min_cached_token_delta >= 1126


def test_the_floor_is_the_start_of_the_winning_tail():
    rows = [LengthSummary(prefix_tokens=n, recompute_ms=10.0, pull_ms=p, n_recompute=3, n_pull=3, pull_won=p < 10.0,
                          pull_won_measurably=p < 9.0) for n, p in ((512, 8.0), (1024, 11.0), (2048, 5.0), (4096, 4.0))]
    fit = _fit(status="crossover", break_even_tokens=300.0, break_even_ci=[200.0, 400.0], per_length=rows,
               pull_won_from_tokens=2048, bootstrap={}, measured_range=[512, 4096])
    assert compute_threshold(fit, rule="upper").min_cached_token_delta == 2048


@pytest.mark.parametrize("disturbed", [True, False])
def test_a_disturbed_run_is_refused_unless_allowed(kvcal, tmp_path, disturbed):
    host = HostDisturbance(resource="cpu cores 0,1", bound=0.15, run_bound=0.1, n_measured=20, median=0.45, max=0.6,
                           disturbed_probes=["p0001-L256-pull-r0 (60%)"] * (12 if disturbed else 1), disturbed=disturbed)
    path = tmp_path / "fit.json"
    path.write_text(_fit(break_even_ci=[5000.0, 7000.0], host_disturbance=host).model_dump_json(by_alias=True))
    res = kvcal("emit-config", path, "--format", "env")
    if not disturbed:
        assert res.code == 0 and res.out.startswith("MIN_CACHED_TOKEN_DELTA=")
        return
    assert res.code == 3 and res.out == "" and "disturbed host" in res.err and "60%" in res.err
    allowed = kvcal("emit-config", path, "--format", "env", "--allow-disturbed")
    assert allowed.code == 0 and allowed.out == "MIN_CACHED_TOKEN_DELTA=6016\n"  # the curves cross at 6,000
    assert "disturbed host" in allowed.err and "kvcal sweep" in allowed.err


def test_every_threshold_warning_says_what_to_run():
    cases = [
        _fit(status="pull-always-wins", break_even_tokens=0.0, break_even_ci=[0.0, 188.0], measured_range=[2048, 49152],
             smallest_pull_win_tokens=2048),
        _fit(break_even_tokens=15000.0, break_even_ci=[12000.0, 30000.0]),
        _fit(break_even_tokens=1000.0, break_even_ci=None, bootstrap={}),
    ]
    for fit in cases:
        for allow in (False, True):
            t = compute_threshold(fit, rule="upper", allow_extrapolation=allow)
            assert t.warnings
            assert all("`kvcal " in w for w in t.warnings), t.warnings


def test_threshold_json_keeps_the_contract_keys(kvcal, tmp_path):
    csv = write_csv(tmp_path, SimCosts(), [256, 512, 1024, 2048, 4096], 3)
    res = kvcal("emit-config", csv, "--format", "json")
    data = json.loads(res.out)
    # The threshold's keys, plus the affinity filter's constant (issue 12's contract).
    assert set(data) == {"minCachedTokenDelta", "break_even_tokens", "break_even_ci", "margin", "block_size", "status",
                         "peakPrefillThroughput", "peak_prefill_chunk_size", "peak_prefill_ci", "peak_prefill_extrapolated",
                         "rule", "expected_regret_ms", "expected_regret_pct", "p_break_even_above", "alternatives",
                         "decision"}
    truth = SimCosts().true_break_even()
    assert abs(data["minCachedTokenDelta"] - truth) <= max(0.15 * truth, 64)
    assert data["alternatives"]["upper"]["threshold"] >= math.ceil(truth)


def test_a_large_noisy_win_is_not_a_tie():
    """One rep at 20 % noise: the pull 3x faster at long lengths must not read as a tie (log-scale gaps, pooled test)."""
    noisy = EXTRAPOLATED.model_copy(update={"noise_cv": 0.2})
    for seed in range(8):
        fit = fit_table(sim_table(noisy, [2048, 8192, 16384, 32768, 49152], 1, seed=seed), settings=FitSettings(n_resamples=300, seed=seed))
        try:
            assert compute_threshold(fit).min_cached_token_delta >= 2048
        except NoThreshold as err:
            assert "tie" not in str(err)


def test_pull_always_wins_with_a_lost_median_at_the_longest_length_still_emits_from_the_data():
    rows = [LengthSummary(prefix_tokens=n, recompute_ms=10.0, pull_ms=p, n_recompute=3, n_pull=3, pull_won=p < 10.0,
                          pull_won_measurably=p < 9.0) for n, p in ((2048, 5.0), (8192, 6.0), (32768, 10.5))]
    fit = _fit(status="pull-always-wins", break_even_tokens=0.0, break_even_ci=[0.0, 300.0], per_length=rows,
               pull_won_from_tokens=None, smallest_pull_win_tokens=2048, bootstrap={}, measured_range=[2048, 32768])
    t = compute_threshold(fit, rule="upper")
    assert t.min_cached_token_delta == 2048
    assert any("lost at the longest measured length" in w and "`kvcal sweep" in w for w in t.warnings)


def test_advice_to_sweep_shorter_never_names_a_one_block_length():
    # a one-block pull moves nothing (kvcal.fit.ladder_steps): the advice once listed 64 at block size 64
    rows = [LengthSummary(prefix_tokens=n, recompute_ms=10.0, pull_ms=5.0, n_recompute=3, n_pull=3, pull_won=True,
                          pull_won_measurably=True) for n in (256, 512)]
    fit = _fit(status="pull-always-wins", break_even_tokens=0.0, break_even_ci=[0.0, 100.0], per_length=rows,
               pull_won_from_tokens=256, smallest_pull_win_tokens=256, bootstrap={}, measured_range=[256, 512])
    advice = next(w for w in compute_threshold(fit, rule="upper").warnings if "--prefix-lengths" in w)
    lengths = [int(n) for n in re.search(r"--prefix-lengths ([\d,]+)", advice).group(1).split(",")]
    assert lengths == [128, 256]
