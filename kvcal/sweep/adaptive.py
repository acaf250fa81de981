"""Adaptive campaigns: seed, refit, choose the next round, stop on a stated precision or a spent budget.

This module holds the decisions and the state kept in ``adaptive.json``; it does no
I/O with engines. :mod:`kvcal.sweep.adaptive_run` drives a real (or simulated) pair
through it; :mod:`kvcal.plan.simulate_designs` and the benchmark drive an in-memory
simulated pair through the same :class:`Controller`.

Every stop decision rests on the very fit ``kvcal fit RUN`` computes by default
(:data:`kvcal.records.fit.FIT_DEFAULTS`: confidence 0.9, bootstrap seed 0, 2000 resamples), so a run
that stopped on ``target-width`` gives the same interval when the user refits it.

Stop rules, checked after each round's refit, in this order (the first three only once
the weaker leg's residual degrees of freedom reach MIN_STOP_DF: the seed's two reps a
length are too few to trust an interval on; an interval that meets a rule on fewer df
gets a top-up round instead, :func:`kvcal.sweep.lengths.adaptive_design.df_top_up`, which buys the
missing df at lengths already measured, where each pair costs least):

* ``target-regret`` (with ``--target-regret``, instead of the width): the expected regret of the
  threshold emit-config's default rule chooses on this fit, plus its Monte Carlo error, is within
  the target (a fraction of the expected TTFT; :mod:`kvcal.sweep.regret_stop`);
* ``target-width``: (upper - lower) / break-even plus its Monte Carlo error <= target, computed
  from fit.json's rounded ``break_even_ci`` and ``break_even_tokens`` (whatever the status: a
  crossover just outside the allowed range is located as well as one inside);

Either target stops a campaign only where emit-config gives a threshold on the fit (when the
caller hands in its :data:`~kvcal.sweep.regret_stop.Judge`): a fit it refuses gets a win-proof
round instead (:func:`kvcal.sweep.regret_stop.win_proof`).
* ``pull-wins-at-shortest``: status pull-always-wins, the shortest allowed length
  measured, and the interval's upper bound at or below it;
* ``recompute-wins-to-longest``: status recompute-always-wins, the longest allowed
  length measured, and the interval's lower bound at or above it (or no break-even);
* ``max-engine-seconds``: the probes' summed TTFT reached the budget (checked after
  every probe too);
* ``max-probes``: that many valid probes are on disk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, Literal

from pydantic import ConfigDict, Field

from kvcal.fit.fitting import fit_table
from kvcal.fit.tables import ProbeTable
from kvcal.records.fit import FIT_DEFAULTS, FitResult, FitSettings
from kvcal.records.run import Leg, Record
from kvcal.sweep.lengths import adaptive_design
from kvcal.sweep.regret_stop import Judge, Verdict, meets, width_mc_error, win_proof

ADAPTIVE_SCHEMA: Final = "kvcal.adaptive/1"
DEFAULT_MAX_PROBES = 400
# Residual df of the weaker leg before an interval may stop a campaign (the seed has 2). A
# stop on the width favours a noise estimate that happens to be low, and with few df that
# estimate swings widely: at 4, campaigns that stopped with 4-5 df covered the truth 3 times
# in 8 (long crossover, 5%/10%). Over 15 crossovers (450-7.5K tokens, three curve shapes,
# 5% noise, 10% target, 30 campaigns each: benchmarks/adaptive_crossovers.py's setting)
# 6 raised the pooled coverage from 0.84 to 0.91 for 6% more median engine time.
MIN_STOP_DF = 6

StopReason = Literal[
    "target-regret",
    "target-width",
    "pull-wins-at-shortest",
    "recompute-wins-to-longest",
    "max-engine-seconds",
    "max-probes",
]
STOP_TEXT = {
    "target-regret": "the expected regret of emit-config's threshold reached the target",
    "target-width": "the break-even interval reached the target width",
    "pull-wins-at-shortest": "the pull wins at the shortest allowed length (interval below it)",
    "recompute-wins-to-longest": "the pull never wins up to the longest allowed length (interval above it)",
    "max-engine-seconds": "the engine-time budget is spent",
    "max-probes": "the probe budget is spent",
}


class StopRules(Record):
    target_width: float = Field(gt=0)
    target_regret: float | None = Field(None, gt=0, lt=1, description="replaces the width as the target when set")
    max_probes: int = Field(DEFAULT_MAX_PROBES, ge=1)
    max_engine_seconds: float | None = Field(None, gt=0)

    def describe(self) -> str:
        target = (
            f"width <= {self.target_width:.3g}"
            if self.target_regret is None
            else f"regret <= {self.target_regret:.3g} of TTFT"
        )
        parts = [target, f"{self.max_probes} probes"]
        if self.max_engine_seconds is not None:
            parts.append(f"{self.max_engine_seconds:g} s engine time")
        return "stop at " + " or ".join(parts)


class RoundSummary(Record):
    """One round: what the refit before it said and what it chose."""

    index: int = Field(ge=0)
    kind: Literal["seed", "extend", "design"]
    n_probes_before: int
    engine_seconds_before: float
    status: str | None = None
    break_even_tokens: float | None = None
    break_even_ci: list[float] | None = None
    width: float | None = None
    width_mc_error: float | None = None
    threshold: int | None = Field(None, description="emit-config's threshold on this fit (None: refused or not asked)")
    regret: float | None = Field(None, description="its expected regret, a fraction of the expected TTFT")
    regret_mc_error: float | None = None
    probes: list[str] = Field(default_factory=list, description="probe ids the round planned")


class AdaptiveState(Record):
    """``adaptive.json``: the rules, every round, and why the campaign stopped."""

    schema_: Literal["kvcal.adaptive/1"] = Field(ADAPTIVE_SCHEMA, alias="schema")
    allowed_range: list[int]
    rules: StopRules
    fit_settings: FitSettings = Field(default_factory=lambda: FIT_DEFAULTS)
    rounds: list[RoundSummary] = Field(default_factory=list)
    stop_reason: StopReason | None = None
    final_width: float | None = None
    final_break_even_tokens: float | None = None
    final_break_even_ci: list[float] | None = None
    final_status: str | None = None
    final_width_mc_error: float | None = None
    final_threshold: int | None = None
    final_regret: float | None = None
    final_regret_mc_error: float | None = None
    n_probes: int = 0
    engine_seconds: float = 0.0

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def relative_width(fit: FitResult) -> float | None:
    """(upper - lower) / break-even from fit.json's own (rounded) fields; None when there is no bounded interval."""
    if fit.break_even_ci is None or not fit.break_even_tokens:
        return None
    low, high = fit.break_even_ci
    return (high - low) / fit.break_even_tokens


def target_met(fit: FitResult, rules: StopRules, verdict: Verdict | None, *, with_mc: bool = True) -> StopReason | None:
    """The target the figures meet (Monte Carlo error added unless ``with_mc`` is off), whatever emit-config says."""
    if rules.target_regret is not None:
        if (
            verdict is not None
            and verdict.threshold is not None
            and meets(verdict.regret, verdict.regret_mc_error if with_mc else 0.0, rules.target_regret)
        ):
            return "target-regret"
        return None
    error = width_mc_error(fit, FIT_DEFAULTS.confidence) if with_mc else 0.0
    return "target-width" if meets(relative_width(fit), error, rules.target_width) else None


def settled_reason(
    fit: FitResult,
    rules: StopRules,
    low: int,
    high: int,
    measured: set[int],
    *,
    min_df: int = MIN_STOP_DF,
    verdict: Verdict | None = None,
    with_mc: bool = True,
) -> StopReason | None:
    """The stop rule a fit meets by itself (target or settled outside the range), or None; ``min_df`` the df floor.

    With emit-config's ``verdict``, a target counts only where it gives a threshold."""
    if (fit.bootstrap.residual_df or 0) < min_df:
        return None  # two reps a length resample two values: too thin an interval to stop on
    target = target_met(fit, rules, verdict, with_mc=with_mc)  # any status: a break-even a few % past an end is placed
    if target is not None and (verdict is None or verdict.threshold is not None):
        return target
    bounds = fit.bootstrap.break_even_ci_bounds or [None, None]
    if fit.status == "pull-always-wins" and low in measured and bounds[1] is not None and bounds[1] <= low:
        return "pull-wins-at-shortest"
    if (
        fit.status == "recompute-always-wins"
        and high in measured
        and fit.bootstrap.n_resamples
        and (bounds[0] is None or bounds[0] >= high)
    ):
        return "recompute-wins-to-longest"
    return None


@dataclass(frozen=True)
class Step:
    """What the controller decided after a refit: stop (with the reason) or run ``choices``."""

    fit: FitResult | None
    stop: StopReason | None
    choices: list[adaptive_design.Choice]
    kind: Literal["seed", "extend", "design"]
    verdict: Verdict | None = None


class Controller:
    """The adaptive loop's decisions over a probe table (no I/O); ``judge``: emit-config's verdict on a fit."""

    def __init__(
        self,
        low: int,
        high: int,
        block_size: int,
        rules: StopRules,
        *,
        screen_resamples: int | None = None,
        judge: Judge | None = None,
    ):
        if rules.target_regret is not None and judge is None:
            raise ValueError("a regret target needs emit-config's judge")
        self.low, self.high = low, high
        self.grid = adaptive_design.candidate_lengths(low, high, block_size)
        self.rules = rules
        self.screen_resamples = screen_resamples
        self.judge = judge

    def fit(self, table: ProbeTable) -> FitResult:
        """The design's fit; with ``screen_resamples`` (simulations) a cheaper bootstrap, same seed and level."""
        if self.screen_resamples:
            return fit_table(table, FitSettings(n_resamples=self.screen_resamples))
        return fit_table(table, FIT_DEFAULTS)

    def verdict(self, fit: FitResult | None) -> Verdict | None:
        return None if fit is None or self.judge is None else self.judge(fit)

    def _stop_fit(
        self, table: ProbeTable, fit: FitResult, verdict: Verdict | None
    ) -> tuple[FitResult, Verdict | None, StopReason | None]:
        """A stop is only ever decided on the standard fit: a screened fit that looks done is redone in full."""
        lengths = set(table.lengths)
        screened = bool(self.screen_resamples)
        reason = settled_reason(fit, self.rules, self.low, self.high, lengths, verdict=verdict, with_mc=not screened)
        if reason is None or not screened:
            return fit, verdict, reason
        full = fit_table(table, FIT_DEFAULTS)
        full_verdict = self.verdict(full)
        return full, full_verdict, settled_reason(full, self.rules, self.low, self.high, lengths, verdict=full_verdict)

    def step(self, table: ProbeTable | None, *, engine_seconds: float, round_index: int) -> Step:
        """Refit, apply the stop rules, and choose the next round (never past the probe budget)."""
        if table is None or table.probes.empty:
            return Step(None, None, adaptive_design.seed_design(self.grid), "seed")
        n_valid = len(table.probes)
        measured = _measured(table)
        fit = self.fit(table) if all(len(measured[leg]) >= 2 for leg in measured) else None
        verdict = self.verdict(fit)
        if fit is not None:
            checked, checked_verdict, reason = self._stop_fit(table, fit, verdict)
            if reason is not None:
                return Step(checked, reason, [], "design", checked_verdict)
        if self.rules.max_engine_seconds is not None and engine_seconds >= self.rules.max_engine_seconds:
            return self._final_step(table, fit, verdict, "max-engine-seconds")
        room = self.rules.max_probes - n_valid
        if room <= 0:
            return self._final_step(table, fit, verdict, "max-probes")
        extend = adaptive_design.extension(
            self.grid, _medians(table), fit.break_even_tokens if fit is not None else None
        )
        kind: Literal["seed", "extend", "design"]
        if extend or fit is None:
            kind, choices = "extend", extend or adaptive_design.seed_design(self.grid)
        elif top_up := self._top_up(table, fit, verdict, measured, round_index):
            kind, choices = "design", top_up
        else:
            kind, choices = "design", self._design(fit, verdict, measured, n_valid, round_index)
        return Step(fit, None, _within(choices, room), kind, verdict)

    def _design(
        self,
        fit: FitResult,
        verdict: Verdict | None,
        measured: dict[Leg, dict[int, int]],
        n_valid: int,
        round_index: int,
    ) -> list[adaptive_design.Choice]:
        """A round that narrows the break-even (regret: to first order Var(n*) times a constant, so the same score)."""
        if self._wants_proof(fit, verdict):
            proof = win_proof(fit, self.grid, adaptive_design.PAIR)
            if proof:
                return [adaptive_design.Choice(n, leg, count, why) for n, leg, count, why in proof]
        width, target = relative_width(fit), self.rules.target_width
        target_width: float | None = target
        if self.rules.target_regret is not None and verdict is not None and verdict.regret is not None:
            # the squared width and the expected regret both scale as Var(n*): the regret's ratio to its target
            # stands in for the squared width's (without a regret, a refusal, the width's rule sizes the round)
            regret = verdict.regret + (verdict.regret_mc_error or 0.0)
            width, target = math.sqrt(max(regret, 1e-12) / self.rules.target_regret), 1.0
            target_width = None
        return adaptive_design.choose_batch(
            fit,
            measured,
            self.grid,
            adaptive_design.batch_size(n_valid, width, target),
            round_index,
            FIT_DEFAULTS.confidence,
            enough=adaptive_design.variance_share_to_target(width, target),
            target_width=target_width,
        )

    def _wants_proof(self, fit: FitResult, verdict: Verdict | None) -> bool:
        """emit-config refuses a fit that has located the crossover: the width target met, or (a regret target,
        which cannot be priced without a threshold) enough df and a break-even inside the range."""
        if verdict is None or verdict.threshold is not None:
            return False
        if self.rules.target_regret is None:
            return target_met(fit, self.rules, None) is not None
        inside = fit.break_even_tokens is not None and self.low < fit.break_even_tokens < self.high
        return inside and (fit.bootstrap.residual_df or 0) >= MIN_STOP_DF

    def _top_up(
        self,
        table: ProbeTable,
        fit: FitResult,
        verdict: Verdict | None,
        measured: dict[Leg, dict[int, int]],
        round_index: int,
    ) -> list[adaptive_design.Choice]:
        """An interval that would stop the campaign but rests on too few df: the df, bought where they cost least."""
        if settled_reason(fit, self.rules, self.low, self.high, set(table.lengths), min_df=0, verdict=verdict) is None:
            return []
        return adaptive_design.df_top_up(fit, measured, self.grid, MIN_STOP_DF, round_index)

    def _final_step(self, table: ProbeTable, fit: FitResult | None, verdict: Verdict | None, stop: StopReason) -> Step:
        final = self.final(table, fit)
        return Step(final, stop, [], "design", verdict if final is fit else self.verdict(final))

    def final(self, table: ProbeTable, fit: FitResult | None) -> FitResult | None:
        """The standard fit for a campaign's last word (the screened one is only for choosing probes)."""
        if fit is None or not self.screen_resamples:
            return fit
        return fit_table(table, FIT_DEFAULTS)


def _measured(table: ProbeTable) -> dict[Leg, dict[int, int]]:
    out: dict[Leg, dict[int, int]] = {}
    for leg in (Leg.RECOMPUTE, Leg.PULL):
        counts = table.leg(leg)["prefix_tokens"].value_counts()
        out[leg] = {int(n): int(c) for n, c in counts.items()}
    return out


def _medians(table: ProbeTable) -> dict[int, tuple[float, float]]:
    med = table.medians().dropna()
    return {int(r.prefix_tokens): (float(r.recompute_ms), float(r.pull_ms)) for r in med.itertuples()}


def _within(choices: list[adaptive_design.Choice], room: int) -> list[adaptive_design.Choice]:
    """Trim a round to the probes the budget leaves (whole pairs where possible)."""
    out = []
    for choice in choices:
        if room <= 0:
            break
        take = min(choice.count, room)
        out.append(adaptive_design.Choice(choice.prefix_tokens, choice.leg, take, choice.reason))
        room -= take
    return out


def width_text(width: float | None) -> str:
    return "open" if width is None or not math.isfinite(width) else f"{width:.1%}"
