"""``kvcal fleet``'s one entry point: a fit and a workload in, a :class:`FleetResult` out.

The order: the flags and the workload (:func:`check_arguments`, before the fit is read),
then the study's size against its cap (said on stderr before the first run), the runs
(:func:`kvcal.fleet.study.run_all`), and the recommendation (:mod:`kvcal.fleet.choose`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kvcal import __version__
from kvcal.errors import InputError
from kvcal.fleet.choose import BEST_RULE, RECOMMENDED_RULE, Candidate, Choice, choose
from kvcal.fleet.policies import policy_classes
from kvcal.fleet.result import Figure, FleetResult, FleetRow, LoadResult
from kvcal.fleet.settings import FleetConfig
from kvcal.fleet.size import check_cap, check_completes, study_size
from kvcal.fleet.study import (
    PolicyRuns,
    Progress,
    Study,
    Tick,
    auto_thresholds,
    block_of,
    by_policy,
    cost_sets,
    idle_threshold,
    plan_runs,
    policies,
    run_all,
)
from kvcal.fleet.workload import Workload, load_workload
from kvcal.records.fit import FitResult

__all__ = ["FleetConfig", "check_arguments", "run_fleet"]
FIGURES = (
    "goodput_rps",
    "completed_rps",
    "input_tokens_per_s",
    "ttft_p50_ms",
    "ttft_p90_ms",
    "ttft_p99_ms",
    "ttft_mean_ms",
    "prefill_queue_p90",
    "pull_share",
    "pulled_token_share",
    "tokens_moved_per_s",
    "busy_share",
)
NOTHING_DIFFERS = (
    "no policy differs: every run of every policy gave the same figures (nothing was pulled, so the "
    "threshold never mattered at this load), so the idle threshold is recommended"
)


def check_arguments(config: FleetConfig) -> Workload:
    """The workload file and every load's overrides, checked before the fit is read (a run folder is fitted: slow)."""
    config.executor().check()
    workload = load_workload(config.workload_path).with_overrides(rate=config.rate, duration_s=config.duration_s)
    for rate in config.loads or []:
        workload.with_overrides(rate=rate)  # --loads on a trace: refused now, not after the first load's runs
    return workload


def _check_blocks(thresholds: list[int] | None, block: int) -> None:
    """Block multiples, and 1: the plugin's default minCachedTokenDelta, which kvcal observe may find deployed."""
    for t in thresholds or []:
        if t % block and t != 1:
            raise InputError(
                f"--thresholds must be positive multiples of the block size {block}, "
                f"or 1 (the plugin's default), got {t}"
            )


def _row(runs: PolicyRuns, level: float) -> FleetRow:
    figures = {}
    for key in FIGURES:
        values = np.array([r[key] for r in runs.runs], dtype=float)
        low, high = np.nanquantile(values, [(1 - level) / 2, (1 + level) / 2])
        figures[key] = Figure(value=float(np.nanmean(values)), ci=[float(low), float(high)])
    p = runs.policy
    return FleetRow(policy=p.name, threshold=p.row_threshold, **figures)


def _candidates(runs: list[PolicyRuns]) -> list[Candidate]:
    return [
        Candidate(
            r.policy.threshold or 0,
            np.array([x["goodput_rps"] for x in r.runs]),
            np.array([x["ttft_p90_ms"] for x in r.runs]),
        )
        for r in runs
        if r.policy.swept
    ]


def _nothing_differs(runs: list[PolicyRuns]) -> bool:
    first = runs[0].runs
    return all(r.runs == first for r in runs[1:])


def _reason(
    choice: Choice, runs: list[PolicyRuns], idle: int | None, idle_reason: str | None, block: int
) -> str | None:
    """Why the recommendation lies more than a block from the idle threshold (None when it does not)."""
    if idle is None:
        return f"emit-config gives no idle threshold for this fit ({idle_reason})"
    if abs(choice.recommended - idle) <= block:
        return None
    means = {c.threshold: (float(c.goodput.mean()), float(c.ttft_p90.mean())) for c in _candidates(runs)}
    busy = float(np.mean([x["busy_share"] for r in runs for x in r.runs]))
    g, p = means[choice.recommended]
    why = f"under this load the fleet serves {choice.recommended} best (goodput {g:.4g}/s, TTFT p90 {p:.4g} ms)"
    if idle in means:
        gi, pi = means[idle]
        worse = "less goodput" if idle not in choice.goodput_tied else "a higher TTFT p90"
        why += f"; the idle threshold {idle} has measurably {worse} (goodput {gi:.4g}/s, TTFT p90 {pi:.4g} ms)"
    else:
        why += f"; the idle threshold {idle} was not among the simulated thresholds"
    if busy >= 0.2:
        why += f"; the engines are busy {busy:.0%} of the time, so pulls also save (or cost) places in queues"
    return why


def _recommend(
    runs: list[PolicyRuns], idle: int | None, idle_reason: str | None, confidence: float, block: int
) -> tuple[Choice | None, int | None, list[str], str | None, list[str]]:
    """(the choice, the recommended threshold, its steps, why it is off the idle threshold, notes)."""
    candidates = _candidates(runs)
    if not candidates:
        return None, None, [], "no threshold was simulated", []
    choice = choose(candidates, idle, confidence)
    if _nothing_differs(runs):
        steps = [NOTHING_DIFFERS, f"idle threshold: {idle}" if idle is not None else "no idle threshold"]
        reason = None if idle is not None else f"emit-config gives no idle threshold for this fit ({idle_reason})"
        return choice, idle, steps, reason, [NOTHING_DIFFERS]
    return choice, choice.recommended, choice.steps, _reason(choice, runs, idle, idle_reason, block), []


def run_fleet(
    config: FleetConfig,
    fit: FitResult,
    progress: Progress,
    workload: Workload | None = None,
    tick: Tick | None = None,
    announce: Callable[[str], None] | None = None,
) -> FleetResult:
    """``workload``: what :func:`check_arguments` returned for ``config`` (read and checked here when None);
    ``announce`` gets the study's size before the first run; ``tick`` the progress inside each run."""
    if workload is None:
        workload = check_arguments(config)
    block = block_of(fit)
    given, repeated = config.unique_thresholds()
    _check_blocks(given, block)
    idle, idle_reason = idle_threshold(fit)
    thresholds = given or auto_thresholds(fit, block, idle)
    sets = cost_sets(fit, config.resamples)
    chosen = policies(fit, thresholds)
    workloads = [workload] + [workload.with_overrides(rate=rate) for rate in config.loads or []]
    decode_ms = workload.engine.decode_step_ms
    size_decode_ms = decode_ms if decode_ms is not None else max(0.0, fit.recompute.intercept_ms)
    runs_per_load = len(chosen) * config.seeds * len(sets)
    size = study_size(workloads, runs_per_load, config.pods, size_decode_ms, config.executor().workers)
    check_cap(size, config.max_simulated_requests)
    for each in workloads:
        check_completes(each, fit.recompute.coefficients, size_decode_ms)
    if announce is not None:
        announce(size.line())
    specs = plan_runs(len(workloads), chosen, config.seeds, len(sets))
    figures = run_all(Study(workloads, config.pods, block, sets), specs, progress, tick, config.executor())
    runs = by_policy(specs, figures, 0)
    choice, recommended, steps, reason, notes = _recommend(runs, idle, idle_reason, fit.confidence, block)
    notes += [repeated] if repeated else []
    loads = []
    for i, rate in enumerate(config.loads or [], start=1):
        at_load = by_policy(specs, figures, i)
        best = choose(_candidates(at_load), idle, fit.confidence).best if _candidates(at_load) else None
        loads.append(LoadResult(rate=rate, rows=[_row(r, fit.confidence) for r in at_load], best_threshold=best))
    return _result(
        config,
        fit,
        workload,
        block,
        choice,
        recommended,
        steps,
        reason,
        idle,
        idle_reason,
        [_row(r, fit.confidence) for r in runs],
        loads,
        notes,
        runs,
        len(sets),
    )


def _notes(fit: FitResult, workload: Workload, runs: list[PolicyRuns], notes: list[str]) -> list[str]:
    ran = {type(r.policy) for r in runs}
    notes += [cls.absent_note for cls in policy_classes() if cls.absent_note and cls not in ran]
    if workload.engine.decode_step_ms is None:
        notes.append(
            f"decode_step_ms not set: a step costs the recompute intercept, {fit.recompute.intercept_ms:.3g} ms"
        )
    return notes


def _result(
    config: FleetConfig,
    fit: FitResult,
    workload: Workload,
    block: int,
    choice: Choice | None,
    recommended: int | None,
    steps: list[str],
    reason: str | None,
    idle: int | None,
    idle_reason: str | None,
    rows: list[FleetRow],
    loads: list[LoadResult],
    notes: list[str],
    runs: list[PolicyRuns],
    n_sets: int,
) -> FleetResult:
    warnings = [f"the fit: {w}" for w in fit.warnings]
    unsampled = config.resamples > 0 and not (fit.bootstrap.recompute_samples and fit.bootstrap.pull_samples)
    if unsampled:
        warnings.append(
            f"--resamples {config.resamples}: the fit kept no usable bootstrap samples, so every run used "
            "the point fit and the intervals cover the simulation seeds only (refit with --resamples)"
        )
    arrival = workload.arrival if workload.trace is None else None
    return FleetResult(
        kvcal_version=__version__,
        fit=str(config.fit_path),
        workload=str(config.workload_path),
        pods=config.pods,
        rate=arrival.rate if arrival is not None else None,
        concurrency=arrival.concurrency if arrival is not None else None,
        duration_s=workload.duration_s,
        seeds=config.seeds,
        resamples=n_sets if config.resamples and not unsampled else 0,
        block_size=block,
        best_threshold=choice.best if choice else None,
        best_threshold_ci=list(choice.tied_span) if choice else None,
        best_rule=BEST_RULE,
        recommended_threshold=recommended,
        recommended_steps=steps,
        recommended_rule=RECOMMENDED_RULE,
        recommended_reason=reason,
        idle_threshold=idle,
        idle_threshold_reason=idle_reason,
        rows=rows,
        loads=loads,
        notes=_notes(fit, workload, runs, notes),
        warnings=warnings,
    )
