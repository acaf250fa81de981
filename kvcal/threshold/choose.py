"""The threshold (``minCachedTokenDelta``): one entry point, the rule it applied, and what the choice costs.

:func:`compute_threshold` takes a :class:`~kvcal.records.fit.FitResult` and returns a
:class:`Threshold` (or raises NotRecommended / NoThreshold, exit 3); :func:`threshold_for` does the same with a
command's settings, whose rule they resolved once. Two rules:

* ``expected-cost`` (default, :mod:`kvcal.threshold.rules.expected_cost`): the candidate with the least
  expected cost per request over the fit's draws (:mod:`kvcal.threshold.decision`); it refuses only
  where no P2P is cheapest;
* ``upper`` (:mod:`kvcal.threshold.rules.upper`): the interval's upper end x (1 + margin), never
  below the shortest length from which the pull won; ``--margin`` belongs to it alone. It
  keeps the earlier gates (:mod:`kvcal.threshold.parts`): recompute always winning and
  legs that tie refuse.

Both refuse a disturbed host (unless ``--allow-disturbed``). Every threshold comes with what
it costs (:mod:`kvcal.threshold.regret`, on the decision's own draws and deltas): the expected
regret over the deltas in ms and % and the probability that the best threshold lies above
it, for the chosen rule and for the alternatives (each rule the table marks ``alternative``, today
``upper``, and the llm-d recipe's shortest measured length at which the pull's median won), null
where a rule refuses or the fit has no bootstrap draws.

A pull with a slow mode (:mod:`kvcal.fit.modes`) arrives fitted to its mean cost; the steps
say so and a refusal names the slow pulls and what to measure.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from kvcal.errors import KvcalError, NoThreshold, NotRecommended
from kvcal.records.fit import FitResult
from kvcal.threshold.decision import Decision, decide
from kvcal.threshold.delta_weights import Deltas
from kvcal.threshold.parts import (
    Working,
    check_threshold,
    disturbance_gate,
    fmt,
    resolve_block_size,
    round_up,
    slow_mode_line,
)
from kvcal.threshold.regret import Figures, RegretModel
from kvcal.threshold.rules import DEFAULT_RULE, TABLE, ResolvedRule, Rule, apply_rule, threshold_alone

__all__ = [
    "Threshold",
    "check_threshold",
    "compute_threshold",
    "fmt",
    "recipe_threshold",
    "resolve_block_size",
    "round_up",
    "threshold_for",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Alternative:
    """Another rule's threshold on the same fit (None where it refuses) and what it would cost."""

    threshold: int | None
    figures: Figures

    def as_json(self) -> dict[str, Any]:
        return {"threshold": self.threshold, **self.figures.as_json()}


@dataclass(frozen=True)
class Threshold:
    """The emitted ``minCachedTokenDelta``, the rule, what it costs, and how it was reached (``steps``, for stderr)."""

    min_cached_token_delta: int
    status: str
    break_even_tokens: float | None
    break_even_ci: tuple[float, float] | None
    margin: float | None
    block_size: int
    steps: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    rule: str = DEFAULT_RULE
    figures: Figures = field(default_factory=Figures)
    alternatives: dict[str, Alternative] = field(default_factory=dict)
    decision: Decision | None = None  # the default rule's (and a class mix's); None under --rule upper

    def as_json(self) -> dict[str, Any]:
        """The ``--format json`` object (the contract's keys, nothing else)."""
        return {
            "minCachedTokenDelta": self.min_cached_token_delta,
            "break_even_tokens": self.break_even_tokens,
            "break_even_ci": list(self.break_even_ci) if self.break_even_ci else None,
            "margin": self.margin,
            "block_size": self.block_size,
            "status": self.status,
            "rule": self.rule,
            **self.figures.as_json(),
            "alternatives": {name: alt.as_json() for name, alt in self.alternatives.items()},
            "decision": self.decision.as_json() if self.decision is not None else None,
        }

    def cost_line(self) -> str:
        """One line for the formats' comments: the rule and what it costs."""
        f = self.figures
        cost = (
            "no bootstrap draws to price it"
            if f.expected_regret_pct is None
            else f"expected regret {f.expected_regret_ms:.3g} ms ({f.expected_regret_pct:.3g}% of TTFT), "
            f"P(break-even above) {f.p_break_even_above:.2f}"
        )
        rule = self.rule if self.margin is None else f"{self.rule}, margin {self.margin:g}"
        return f"rule {rule}: {cost}"


def names_slow_mode(rule: Callable[..., Threshold]) -> Callable[..., Threshold]:
    """The rule, with the pull's slow mode in its steps and in any refusal (what to measure when it cannot tell)."""

    @functools.wraps(rule)
    def apply(fit: FitResult, **kw: Any) -> Threshold:
        line = slow_mode_line(fit)
        try:
            threshold = rule(fit, **kw)
        except (NoThreshold, NotRecommended) as err:
            if line is None:
                raise
            raise type(err)(
                f"{err}; {line}: find the slow path (link congestion, a fallback transport) or measure "
                "more reps (`kvcal sweep --reps 5`) to pin its share down"
            ) from None
        return threshold if line is None else replace(threshold, steps=(line, *threshold.steps))

    return apply


class ThresholdOptions(Protocol):
    """What the threshold reads of a command's settings (emit-config's ``EmitOptions`` has each): the rule already
    resolved (when the settings were built), the block size and the two gates' overrides."""

    @property
    def resolved_rule(self) -> ResolvedRule: ...
    @property
    def block_size(self) -> int | None: ...
    @property
    def allow_extrapolation(self) -> bool: ...
    @property
    def allow_disturbed(self) -> bool: ...


def compute_threshold(
    fit: FitResult,
    *,
    rule: str = DEFAULT_RULE,
    margin: float | None = None,
    block_size: int | None = None,
    allow_extrapolation: bool = False,
    allow_disturbed: bool = False,
    deltas: Deltas | None = None,
) -> Threshold:
    """Apply ``rule`` to ``fit`` (module docstring) and price it; NotRecommended or NoThreshold (exit 3) if none.

    The entry point of callers without a command's settings (compare, the fleet, observe, the sweep's judge); a
    command's settings go through :func:`threshold_for`.
    """
    return _threshold(
        fit,
        resolved=ResolvedRule.of(rule, margin),
        block_size=block_size,
        allow_extrapolation=allow_extrapolation,
        allow_disturbed=allow_disturbed,
        deltas=deltas,
    )


def threshold_for(fit: FitResult, options: ThresholdOptions, deltas: Deltas | None = None) -> Threshold:
    """:func:`compute_threshold` with a command's settings, whose rule they resolved once: emit-config's threshold
    and each link class's own under ``--class-mix``."""
    return _threshold(
        fit,
        resolved=options.resolved_rule,
        block_size=options.block_size,
        allow_extrapolation=options.allow_extrapolation,
        allow_disturbed=options.allow_disturbed,
        deltas=deltas,
    )


@names_slow_mode
def _threshold(
    fit: FitResult,
    *,
    resolved: ResolvedRule,
    block_size: int | None,
    allow_extrapolation: bool,
    allow_disturbed: bool,
    deltas: Deltas | None,
) -> Threshold:
    """Both entry points' body: the rule already resolved (checked once, by whoever resolved it)."""
    rule, margin = resolved.rule.name, resolved.margin
    w = _working(fit, block_size)
    disturbance_gate(w, allow_disturbed)
    chosen = apply_rule(rule, w, margin=margin, deltas=deltas, allow_extrapolation=allow_extrapolation)
    threshold, decision = chosen.threshold, chosen.decision
    check_threshold(threshold, w.block)
    log.info("threshold %s (%s): %s (block %s)", fit.status, rule, threshold, w.block)
    w.steps.append(f"minCachedTokenDelta = {threshold}")
    ci = (
        (float(fit.break_even_ci[0]), float(fit.break_even_ci[1]))
        if fit.break_even_ci and len(fit.break_even_ci) == 2
        else None
    )
    model = RegretModel(decision.model) if decision.draws.from_bootstrap else None
    price = model.figures if model is not None else (lambda _t: Figures())
    alternatives = {
        alt.name: _alternative(price, threshold if alt.name == rule else _quiet(alt, fit, w.block, allow_extrapolation))
        for alt in TABLE
        if alt.alternative
    }
    alternatives["recipe"] = _alternative(price, recipe_threshold(fit, w.block))
    return Threshold(
        min_cached_token_delta=threshold,
        status=fit.status,
        break_even_tokens=fit.break_even_tokens,
        break_even_ci=ci,
        margin=margin,
        block_size=w.block,
        steps=tuple(w.steps),
        warnings=tuple(w.warnings),
        rule=rule,
        figures=price(threshold),
        alternatives=alternatives,
        decision=decision if chosen.carries_decision else None,
    )


def _working(fit: FitResult, block_size: int | None) -> Working:
    block, block_note = resolve_block_size(fit, block_size)
    n_min, n_max = (int(fit.measured_range[0]), int(fit.measured_range[-1])) if fit.measured_range else (block, block)
    return Working(
        fit,
        block,
        n_min,
        n_max,
        f"{n_min}-{n_max} tokens" if fit.measured_range else "the measured range",
        [block_note],
    )


def _quiet(alternative: Rule, fit: FitResult, block: int, allow_extrapolation: bool) -> int | None:
    """An alternative rule's threshold on the same fit (its own steps and warnings dropped), None where it refuses."""
    try:
        return threshold_alone(alternative, _working(fit, block), allow_extrapolation=allow_extrapolation)
    except KvcalError:
        return None


def _alternative(price: Callable[[int | None], Figures], value: int | None) -> Alternative:
    return Alternative(value, price(value) if value is not None else Figures())


def recipe_threshold(fit: FitResult, block: int) -> int | None:
    """The llm-d recipe's rule: the shortest measured length at which the pull's median won (with bytes moved: only
    proven pulls are fitted), rounded up to a block; None when it never won."""
    if fit.status == "recompute-always-wins":
        return None
    won = [r.prefix_tokens for r in fit.per_length if r.pull_won]
    shortest = min(won) if won else fit.smallest_pull_win_tokens
    return round_up(shortest, block) if shortest else None


def regret_model(fit: FitResult, deltas: Deltas | None = None) -> RegretModel | None:
    """What any threshold costs over the fit's bootstrap draws of the mean costs and the deltas (log-uniform over
    the measured range by default), on the default decision's draws and candidates; None without draws."""
    decision = decide(fit, deltas=deltas)
    return RegretModel(decision.model) if decision.draws.from_bootstrap else None
