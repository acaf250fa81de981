"""``kvcal fleet``'s one entry point: a fit and a workload in, a :class:`FleetResult` out."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kvcal import __version__
from kvcal.errors import InputError
from kvcal.fleet.result import Figure, FleetResult, FleetRow, LoadResult
from kvcal.fleet.study import (
    BEST_RULE,
    PolicyRuns,
    Progress,
    auto_thresholds,
    best_of_run,
    block_of,
    break_even_of,
    cost_sets,
    idle_threshold,
    policies,
    recommend,
    run_policies,
    to_block,
)
from kvcal.fleet.workload import Workload, load_workload
from kvcal.records import FitResult

FIGURES = ("goodput_rps", "completed_rps", "input_tokens_per_s", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "ttft_mean_ms", "prefill_queue_p90",
           "pull_share", "tokens_moved_per_s", "busy_share")
MAX_PODS = 4096


@dataclass(frozen=True)
class FleetConfig:
    fit_path: Path
    workload_path: Path
    pods: int = 8
    thresholds: list[int] | None = None  # None: auto
    rate: float | None = None
    loads: list[float] | None = None
    duration_s: float | None = None
    seeds: int = 3
    resamples: int = 0


def check_arguments(config: FleetConfig) -> Workload:
    """The flags and the workload file, checked before the fit is read (a run folder is fitted on the fly: slow)."""
    if not 1 <= config.pods <= MAX_PODS:
        raise InputError(f"--pods must lie within 1-{MAX_PODS}, got {config.pods}")
    if not 1 <= config.seeds <= 1000:
        raise InputError(f"--seeds must lie within 1-1000, got {config.seeds}")
    if not 0 <= config.resamples <= 1000:
        raise InputError(f"--resamples must lie within 0-1000, got {config.resamples}")
    for flag, values in (("--rate", [config.rate] if config.rate is not None else []), ("--loads", config.loads or [])):
        for v in values:
            if not (math.isfinite(v) and 0 < v <= 1e5):
                raise InputError(f"{flag} must be sessions per second within (0, 1e5], got {v:g}")
    for t in config.thresholds or []:
        if t < 1:
            raise InputError(f"--thresholds must be positive multiples of the block size, got {t}")
    return load_workload(config.workload_path).with_overrides(rate=config.rate, duration_s=config.duration_s)


def _check_blocks(config: FleetConfig, block: int) -> None:
    for t in config.thresholds or []:
        if t % block:
            raise InputError(f"--thresholds must be positive multiples of the block size {block}, got {t}")


def _row(runs: PolicyRuns, level: float) -> FleetRow:
    figures = {}
    for key in FIGURES:
        values = np.array([r[key] for r in runs.runs], dtype=float)
        low, high = np.nanquantile(values, [(1 - level) / 2, (1 + level) / 2])
        figures[key] = Figure(value=float(np.nanmean(values)), ci=[float(low), float(high)])
    p = runs.policy
    return FleetRow(policy=p.name, threshold=p.threshold if p.name == "threshold" else None, **figures)


def _one_load(workload: Workload, config: FleetConfig, fit: FitResult, block: int, thresholds: list[int],
              progress: Progress, offset: int, total: int) -> tuple[list[PolicyRuns], list[FleetRow]]:
    sets = cost_sets(fit, config.resamples)
    runs = run_policies(workload, config.pods, fit, block, policies(fit, thresholds), config.seeds, sets, progress,
                        offset, total)
    return runs, [_row(r, fit.confidence) for r in runs]


def _rounded(tokens: float | None, block: int) -> int | None:
    return to_block(tokens, block) if tokens is not None else None


def run_fleet(config: FleetConfig, fit: FitResult, progress: Progress, workload: Workload | None = None) -> FleetResult:
    """``workload``: what :func:`check_arguments` returned for ``config`` (read and checked here when None)."""
    if workload is None:
        workload = check_arguments(config)
    block = block_of(fit)
    _check_blocks(config, block)
    idle, idle_reason = idle_threshold(fit)
    thresholds = config.thresholds or auto_thresholds(fit, block, idle)
    sets = cost_sets(fit, config.resamples)
    per_load = len(policies(fit, thresholds)) * config.seeds * len(sets)
    total = per_load * (1 + len(config.loads or []))
    runs, rows = _one_load(workload, config, fit, block, thresholds, progress, 0, total)
    notes: list[str] = []
    point_be = fit.break_even_tokens if fit.break_even_tokens is not None else float(thresholds[len(thresholds) // 2])
    bests = [best_of_run(runs, k, break_even_of(sets[k % len(sets)], point_be), block) for k in range(len(runs[0].runs))]
    bests = [b for b in bests if b is not None]
    best = best_of_run(runs, None, point_be, block)
    recommended, steps, reason, ci = None, [], None, None
    if best is not None and bests:
        low, high = (float(v) for v in np.quantile(bests, [(1 - fit.confidence) / 2, (1 + fit.confidence) / 2]))
        low, high = min(low, best), max(high, best)
        if fit.break_even_tokens is not None and fit.break_even_ci:
            # Never narrower than the calibration's own interval (shifted to the fleet optimum): a few simulated
            # resamples, or none, would otherwise understate what the fit is unsure of.
            low = max(0.0, min(low, best - (fit.break_even_tokens - fit.break_even_ci[0])))
            high = max(high, best + (fit.break_even_ci[1] - fit.break_even_tokens))
            notes.append("the best threshold's interval spans the runs' optima (seeds x resamples) and at least the "
                         "fit's break-even interval shifted to the fleet optimum")
        busy = float(np.mean([r["busy_share"] for r in runs[0].runs]))
        recommended, steps, reason = recommend(fit, best, [low, high], idle, block, busy)
        ci = [int(low // block * block), int(-(-high // block) * block)]
    loads = []
    for i, rate in enumerate(config.loads or []):
        at_rate = workload.with_overrides(rate=rate)
        load_runs, load_rows = _one_load(at_rate, config, fit, block, thresholds, progress, per_load * (i + 1), total)
        loads.append(LoadResult(rate=rate, rows=load_rows, best_threshold=_rounded(best_of_run(load_runs, None, point_be, block), block)))
    if not any(r.policy.name == "costmodel" for r in runs):
        notes.append("no costmodel row: the fit calibrated no costModel under load (kvcal sweep --load-states, or "
                     "kvcal fit --per-request/--epp-log)")
    if workload.engine.decode_step_ms is None:
        notes.append(f"decode_step_ms not set: a step costs the recompute intercept, {fit.recompute.intercept_ms:.3g} ms")
    warnings = [f"the fit: {w}" for w in fit.warnings]
    unsampled = config.resamples > 0 and not (fit.bootstrap.recompute_samples and fit.bootstrap.pull_samples)
    if unsampled:
        warnings.append(f"--resamples {config.resamples}: the fit kept no usable bootstrap samples, so every run used the "
                        "point fit and the intervals cover the simulation seeds only (refit with --resamples)")
    arrival = workload.arrival
    return FleetResult(
        kvcal_version=__version__, fit=str(config.fit_path), workload=str(config.workload_path), pods=config.pods,
        rate=arrival.rate if arrival is not None and workload.trace is None else None,
        concurrency=arrival.concurrency if arrival is not None and workload.trace is None else None,
        duration_s=workload.duration_s, seeds=config.seeds, resamples=len(sets) if config.resamples and not unsampled else 0,
        block_size=block, best_threshold=_rounded(best, block), best_threshold_ci=ci, best_rule=BEST_RULE,
        recommended_threshold=recommended, recommended_steps=steps, recommended_reason=reason,
        idle_threshold=idle, idle_threshold_reason=idle_reason, rows=rows, loads=loads, notes=notes,
        warnings=warnings,
    )
