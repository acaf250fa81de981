"""Run the fleet model for every policy, seed and calibration resample, and choose the threshold.

The best threshold (``BEST_RULE``) is read from the figures; ties (the fleet does not
tell thresholds apart) go to the calibration's own break-even, so that at a load where
the engines are idle the fleet optimum is the idle break-even and its interval the
calibration's. The recommended threshold is that optimum and its interval passed
through emit-config's own rule (:func:`kvcal.emit.threshold.compute_threshold`), as if
it were the break-even: the same interval bound, margin and block rounding.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kvcal.cost_curve import break_even_tokens
from kvcal.emit.costmodel import COSTMODEL_FLOOR_TOKENS
from kvcal.emit.threshold import compute_threshold, resolve_block_size, round_up
from kvcal.errors import InputError, KvcalError
from kvcal.fleet.costs import FleetCosts, cost_rule, resampled_costs
from kvcal.fleet.router import Policy
from kvcal.fleet.sim import FleetSim, RunStats
from kvcal.fleet.workload import Workload
from kvcal.records import FitResult

GOODPUT_TOLERANCE = 0.01
P90_TOLERANCE = 0.01
MEAN_TOLERANCE = 0.005
BEST_RULE = ("best_threshold: among the thresholds whose goodput is within 1% of the highest, those whose TTFT p90 "
             "is within 1% of the lowest and mean TTFT within 0.5% of the lowest tie; of the tied span the point "
             "nearest the calibration's break-even (each resample's own), rounded to a block; per run (seed x "
             "resample), the interval over runs")

Progress = Callable[[int, int, str], None]


@dataclass
class PolicyRuns:
    policy: Policy
    runs: list[dict[str, float]]  # one per (seed, cost set), in the same order for every policy


def _figures(stats: RunStats) -> dict[str, float]:
    ttft = np.asarray(stats.ttft_ms)
    window = stats.window_s
    return {
        "goodput_rps": stats.met_slo / window, "completed_rps": stats.completed / window,
        "input_tokens_per_s": stats.completed_prompt_tokens / window,
        "ttft_p50_ms": float(np.percentile(ttft, 50)), "ttft_p90_ms": float(np.percentile(ttft, 90)),
        "ttft_p99_ms": float(np.percentile(ttft, 99)), "ttft_mean_ms": float(ttft.mean()),
        "prefill_queue_p90": float(np.percentile(stats.queue_samples, 90)) if stats.queue_samples else 0.0,
        "pull_share": stats.pulled / stats.routed if stats.routed else 0.0,
        "tokens_moved_per_s": stats.tokens_moved / window, "busy_share": stats.busy_share,
    }


def break_even_of(costs: FleetCosts, fallback: float) -> float:
    roots = break_even_tokens(np.array(costs.recompute), np.array(costs.pull))
    value = float(np.asarray(roots).ravel()[0]) if np.size(roots) else math.nan
    return value if math.isfinite(value) and value >= 0 else fallback


def auto_thresholds(fit: FitResult, block: int, idle: int | None) -> list[int]:
    """Block multiples spread geometrically to 4x the break-even's upper bound, with the break-even and the idle threshold."""
    be = fit.break_even_tokens if fit.break_even_tokens is not None and fit.break_even_tokens > 0 else 8 * block
    upper = fit.break_even_ci[1] if fit.break_even_ci else be
    top = max(4 * upper, 8 * block)
    grid = {round_up(x, block) for x in np.geomspace(block, top, 10)}
    grid |= {round_up(be, block), max(block, int(be // block) * block)}
    if idle is not None:
        grid.add(idle)
    return sorted(grid)


def policies(fit: FitResult, thresholds: list[int]) -> list[Policy]:
    out = [Policy("no-p2p"), Policy("always-pull")] + [Policy("threshold", t) for t in thresholds]
    rule = cost_rule(fit)
    if rule is not None:
        out.append(Policy("costmodel", COSTMODEL_FLOOR_TOKENS, rule))
    return out


def run_policies(workload: Workload, pods: int, fit: FitResult, block: int, chosen: list[Policy], seeds: int,
                 cost_sets: list[FleetCosts], progress: Progress, offset: int = 0, total: int = 0) -> list[PolicyRuns]:
    out = []
    done = offset
    for policy in chosen:
        runs = []
        for seed in range(seeds):
            for costs in cost_sets:
                stats = FleetSim(workload, pods, costs, policy, block, seed).run()
                if not stats.ttft_ms:
                    raise InputError(f"no request arrived in the measured window ({workload.warmup_s:g}-"
                                     f"{workload.duration_s:g} s, seed {seed}): lengthen duration_s (--duration) or "
                                     "raise the rate (--rate)")
                runs.append(_figures(stats))
                done += 1
                progress(done, total, f"{policy.name} {policy.threshold or ''}".strip())
        out.append(PolicyRuns(policy, runs))
    return out


def best_of_run(rows: list[PolicyRuns], k: int | None, break_even: float, block: int) -> float | None:
    """The rule on run ``k``'s figures (None: the means over runs), in tokens before rounding to a block."""
    cand = [r for r in rows if r.policy.name == "threshold"]
    if not cand:
        return None

    def fig(r: PolicyRuns, key: str) -> float:
        return r.runs[k][key] if k is not None else float(np.mean([x[key] for x in r.runs]))

    g_max = max(fig(r, "goodput_rps") for r in cand)
    kept = [r for r in cand if fig(r, "goodput_rps") >= g_max * (1 - GOODPUT_TOLERANCE)]
    p90_min = min(fig(r, "ttft_p90_ms") for r in kept)
    kept = [r for r in kept if fig(r, "ttft_p90_ms") <= p90_min * (1 + P90_TOLERANCE)]
    mean_min = min(fig(r, "ttft_mean_ms") for r in kept)
    kept = [r for r in kept if fig(r, "ttft_mean_ms") <= mean_min * (1 + MEAN_TOLERANCE)]
    span = [r.policy.threshold or block for r in kept]
    return float(min(max(break_even, min(span)), max(span)))


def to_block(tokens: float, block: int) -> int:
    return max(block, int(round(tokens / block)) * block)


def recommend(fit: FitResult, best: float, ci: list[float], idle: int | None, block: int, busy: float) -> tuple[int | None, list[str], str | None]:
    """(recommended, emit-config's steps, why it is not within one block of the idle threshold or why there is none)."""
    as_break_even = fit.model_copy(update={"break_even_tokens": float(best), "break_even_ci": [float(ci[0]), float(ci[1])]})
    try:
        t = compute_threshold(as_break_even, block_size=block)
    except KvcalError as err:
        return None, [], f"emit-config's rule gives none: {err}"
    reason = None
    if idle is not None and abs(t.min_cached_token_delta - idle) > block:
        why = [_why_moved(fit, best, ci, block)]
        if busy >= 0.2:
            why.append(f"the engines are busy {busy:.0%} of the time, so pulls also save (or cost) places in queues")
        reason = "; ".join(why)
    elif idle is None:
        reason = "emit-config gives no idle threshold for this fit (idle_threshold_reason)"
    return t.min_cached_token_delta, list(t.steps), reason


def _why_moved(fit: FitResult, best: float, ci: list[float], block: int) -> str:
    be, be_ci = fit.break_even_tokens, fit.break_even_ci
    if be is None or not be_ci:
        return f"the fleet optimum is {best:.0f} (interval {ci[0]:.0f}-{ci[1]:.0f})"
    if to_block(best, block) != to_block(be, block):
        return (f"the fleet optimum {best:.0f} (interval {ci[0]:.0f}-{ci[1]:.0f}) differs from the idle break-even "
                f"{be:.0f} (interval {be_ci[0]:.0f}-{be_ci[1]:.0f})")
    # The optimum is the break-even: only the interval moved the threshold, widened by runs that disagree.
    return (f"the fleet optimum {best:.0f} is the idle break-even {be:.0f}, but the runs' own optima (over the seeds, "
            f"and the resamples when simulated) spread its interval to {ci[0]:.0f}-{ci[1]:.0f}, wider than the fit's "
            f"{be_ci[0]:.0f}-{be_ci[1]:.0f}, and emit-config's rule builds on the interval's upper end (a longer "
            "--duration narrows it: each run's optimum is noisier the fewer requests it has)")


def idle_threshold(fit: FitResult) -> tuple[int | None, str | None]:
    """Exactly what ``kvcal emit-config FIT --format json`` gives (its rule, its defaults)."""
    try:
        return compute_threshold(fit).min_cached_token_delta, None
    except KvcalError as err:
        return None, str(err)


def block_of(fit: FitResult) -> int:
    return resolve_block_size(fit, None)[0]


def cost_sets(fit: FitResult, resamples: int) -> list[FleetCosts]:
    return resampled_costs(fit, resamples)
