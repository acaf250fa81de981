"""The study's independent runs: which (load, policy, seed, resample) to simulate, and the loop that runs them.

:func:`plan_runs` lists every run; :func:`run_all` runs them one after another and
returns their figures in the list's order (a parallel executor can replace it: each
run depends on its :class:`RunSpec` alone). A run is seeded by its identity, not by
its place in the list: its traffic by the seed (every policy and resample of one seed
sees the same sessions: common random numbers, which the paired comparison of
:mod:`kvcal.fleet.choose` relies on), its costs by the resample's index.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kvcal.errors import InputError, KvcalError
from kvcal.fleet.costs import FleetCosts, resampled_costs
from kvcal.fleet.parallel import SERIAL, Executor
from kvcal.fleet.policies import policy_classes
from kvcal.fleet.policies.base import Policy
from kvcal.fleet.run_state import RunStats
from kvcal.fleet.sim import FleetSim
from kvcal.fleet.workload import Workload
from kvcal.records.fit import FitResult
from kvcal.threshold.choose import compute_threshold, resolve_block_size, round_up

Progress = Callable[[int, int, str], None]
"""Called once per finished run: (runs done, runs in all, the run's label)."""
Tick = Callable[[str, float, float], None]
"""Called inside a run every so many events: (the run's label, simulated seconds so far, seconds to simulate)."""


@dataclass(frozen=True)
class RunSpec:
    """One independent run: everything that decides its result besides the shared :class:`Study`."""

    load: int  # index into Study.workloads (0: the given load, then each --loads rate)
    policy: Policy
    seed: int
    resample: int  # index into Study.cost_sets

    @property
    def label(self) -> str:
        return f"{self.policy.name} {self.policy.threshold or ''}".strip() + f", seed {self.seed}"


@dataclass(frozen=True)
class Study:
    """What every run shares."""

    workloads: list[Workload]
    pods: int
    block: int
    cost_sets: list[FleetCosts]


@dataclass
class PolicyRuns:
    policy: Policy
    runs: list[dict[str, float]]  # one per (seed, cost set), in the same order for every policy


def _figures(stats: RunStats) -> dict[str, float]:
    ttft = np.asarray(stats.ttft_ms)
    window = stats.window_s
    return {
        "goodput_rps": stats.met_slo / window,
        "completed_rps": stats.completed / window,
        "input_tokens_per_s": stats.completed_prompt_tokens / window,
        "ttft_p50_ms": float(np.percentile(ttft, 50)),
        "ttft_p90_ms": float(np.percentile(ttft, 90)),
        "ttft_p99_ms": float(np.percentile(ttft, 99)),
        "ttft_mean_ms": float(ttft.mean()),
        "prefill_queue_p90": float(np.percentile(stats.queue_samples, 90)) if stats.queue_samples else 0.0,
        "pull_share": stats.pulled / stats.routed if stats.routed else 0.0,
        "pulled_token_share": stats.tokens_moved / stats.routed_prompt_tokens if stats.routed_prompt_tokens else 0.0,
        "tokens_moved_per_s": stats.tokens_moved / window,
        "busy_share": stats.busy_share,
    }


def auto_thresholds(fit: FitResult, block: int, idle: int | None) -> list[int]:
    """Block multiples spread geometrically to 4x the break-even's upper bound, with the break-even and the idle
    threshold."""
    be = fit.break_even_tokens if fit.break_even_tokens is not None and fit.break_even_tokens > 0 else 8 * block
    upper = fit.break_even_ci[1] if fit.break_even_ci else be
    top = max(4 * upper, 8 * block)
    grid = {round_up(x, block) for x in np.geomspace(block, top, 10)}
    grid |= {round_up(be, block), max(block, int(be // block) * block)}
    if idle is not None:
        grid.add(idle)
    return sorted(grid)


def policies(fit: FitResult, thresholds: list[int]) -> list[Policy]:
    """Every registered policy's runs over these thresholds, in the registry's order (the rows' order)."""
    return [policy for cls in policy_classes() for policy in cls.for_study(fit, thresholds)]


def plan_runs(loads: int, chosen: list[Policy], seeds: int, cost_sets: int) -> list[RunSpec]:
    """Every run of the study, grouped by load, then policy, then seed, then resample (run_all keeps this order)."""
    return [
        RunSpec(load, policy, seed, resample)
        for load in range(loads)
        for policy in chosen
        for seed in range(seeds)
        for resample in range(cost_sets)
    ]


def run_one(study: Study, spec: RunSpec, tick: Tick | None = None) -> dict[str, float]:
    """One run's figures; InputError when its window saw no request, or none completed (nothing to recommend from)."""
    workload = study.workloads[spec.load]
    on_tick = (lambda at_s: tick(spec.label, at_s, workload.duration_s)) if tick is not None else None
    sim = FleetSim(
        workload, study.pods, study.cost_sets[spec.resample], spec.policy, study.block, spec.seed, on_tick=on_tick
    )
    stats = sim.run()
    window = f"{workload.warmup_s:g}-{workload.duration_s:g} s"
    if not stats.ttft_ms:
        raise InputError(
            f"no request arrived in the measured window ({window}, seed {spec.seed}): lengthen "
            "duration_s (--duration) or raise the rate (--rate)"
        )
    if not stats.completed:
        raise InputError(
            f"no request completed in the measured window ({window}) of the run {spec.label}: the "
            "prompts are too long or the steps too slow for this duration, so there is nothing to "
            "recommend from (shorten sessions.input_tokens or engine.decode_step_ms, or lengthen "
            "duration_s)"
        )
    return _figures(stats)


def run_all(
    study: Study, specs: list[RunSpec], progress: Progress, tick: Tick | None = None, executor: Executor = SERIAL
) -> list[dict[str, float]]:
    """Every run of ``specs``, the figures in the order of ``specs`` whoever ran them (:mod:`kvcal.fleet.parallel`).

    One after another here (with ``tick``, the progress inside each run), or on the executor's worker processes or
    Ray tasks, where progress counts the runs as they finish.
    """
    if executor.serial:
        out = []
        for done, spec in enumerate(specs, start=1):
            out.append(run_one(study, spec, tick))
            progress(done, len(specs), spec.label)
        return out
    return executor.map(simulate, study, specs, lambda done, spec: progress(done, len(specs), spec.label))


def simulate(study: Study, spec: RunSpec) -> dict[str, float]:
    """One run in a worker (module level: a worker imports it by name)."""
    return run_one(study, spec)


def by_policy(specs: list[RunSpec], figures: list[dict[str, float]], load: int) -> list[PolicyRuns]:
    """One load's runs grouped per policy, each policy's runs in (seed, resample) order: the pairing."""
    grouped: dict[Policy, list[dict[str, float]]] = {}
    for spec, result in zip(specs, figures):
        if spec.load == load:
            grouped.setdefault(spec.policy, []).append(result)
    return [PolicyRuns(policy, runs) for policy, runs in grouped.items()]


def idle_threshold(fit: FitResult) -> tuple[int | None, str | None]:
    """Exactly what ``kvcal emit-config FIT --format json`` gives (its rule, its defaults): the one call to it."""
    try:
        return compute_threshold(fit).min_cached_token_delta, None
    except KvcalError as err:
        return None, str(err)


def block_of(fit: FitResult) -> int:
    return resolve_block_size(fit, None)[0]


def cost_sets(fit: FitResult, resamples: int) -> list[FleetCosts]:
    return resampled_costs(fit, resamples)
