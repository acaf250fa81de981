"""One ``minCachedTokenDelta`` for a fleet whose pairs fall into several link classes (``--class-mix``).

The router has one threshold for every pair. With a fit per link class (``kvcal fit`` on a
``kvcal sweep --pairs`` run) it is the one that costs least over the fleet's mix of pairs.

Under the default rule that is the one decision (:mod:`kvcal.threshold.decision`) summed over the
classes: each class's expected cost per request over its own draws and the deltas (``--deltas``,
else log-uniform over the lengths the classes measured), on common candidates (block multiples
over the classes' measured lengths, and no P2P):

    common = argmin_T  sum_c share_c * E_c(T)

and a class's cost of the common threshold is ``E_c(common) - min_T E_c(T)``, what a request of
that class loses against the threshold best for it alone. Under a rule whose table entry says
``mix_on_point_curves`` (``--rule upper``) the mix keeps the earlier form, on each class's point mean curves:

    common = argmin_T  sum_c share_c * excess_c(T)
    excess_c(T) = mean over n of [ pull_c(n) - min(pull_c(n), recompute_c(n))   if n >= T
                                   recompute_c(n) - min(pull_c(n), recompute_c(n)) if n < T ]

n log-uniform over the lengths the classes measured (the ladder's own spacing), T on block
multiples from the shortest measured length up: the mean time a request of that class loses,
against choosing per length, when the router uses T. Under either rule each
class's own threshold is the one-class rule's (:func:`class_threshold`, the one place this module asks for it), and the
common one's cost to each class is stated beside it. The shares default to each class's
share of the campaign's pairs. The session cost (a pair's first pull) is reported, not in
the sum: it is paid once per pair, whatever the threshold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from kvcal.costs.cost_curve import cost_ms
from kvcal.errors import InputError, KvcalError, NotRecommended
from kvcal.fit.mean_cost import mean_curves
from kvcal.records.fit import ClassFit, FitResult
from kvcal.threshold.candidate_costs import ThresholdCosts, highest_least
from kvcal.threshold.choose import Threshold, ThresholdOptions, resolve_block_size, threshold_for
from kvcal.threshold.decision import Decision
from kvcal.threshold.delta_weights import Deltas, log_uniform
from kvcal.threshold.draw_costs import cost_draws

GRID_POINTS = 512  # lengths the excess is averaged over (log-uniform); its error is far below the curves' own
MAX_CANDIDATES = 4096  # thresholds tried; beyond it the step grows by whole blocks


class MixOptions(ThresholdOptions, Protocol):
    """What the mix reads of a command's settings (emit-config's ``EmitOptions`` has each): the threshold's, the
    margin as given (the mix's record states it) and the shares."""

    @property
    def margin(self) -> float | None: ...
    @property
    def class_mix(self) -> dict[str, float] | None: ...


@dataclass(frozen=True)
class ClassThreshold:
    """One class under the common threshold: its share, own threshold (or why none) and what each costs it."""

    name: str
    share: float
    fit: ClassFit
    own: Threshold | None
    refused: str | None
    cost_at_common_ms: float
    cost_at_own_ms: float | None

    def as_json(self) -> dict[str, Any]:
        return {
            "share": round(self.share, 6),
            "pull_fixed_ms": self.fit.pull_fixed_ms,
            "pull_us_per_token": self.fit.pull_us_per_token,
            "session_cost_ms": self.fit.session_cost_ms,
            "session_cost_ci": self.fit.session_cost_ci,
            "break_even_tokens": self.fit.break_even_tokens,
            "threshold": self.own.min_cached_token_delta if self.own else None,
            "refused": self.refused,
            "cost_at_common_ms": round(self.cost_at_common_ms, 4),
            "cost_at_own_ms": None if self.cost_at_own_ms is None else round(self.cost_at_own_ms, 4),
        }


@dataclass(frozen=True)
class MixThreshold:
    threshold: Threshold
    classes: tuple[ClassThreshold, ...]

    def classes_json(self) -> dict[str, Any]:
        """``--format json``'s ``classes`` block (no router release reads it yet: docs/method.md)."""
        return {c.name: c.as_json() for c in self.classes}


def class_threshold(
    fit: FitResult, options: MixOptions, deltas: Deltas | None = None
) -> tuple[Threshold | None, str | None]:
    """A class's own threshold by the one-class rule, or why it has none (the only call of that rule here)."""
    try:
        return threshold_for(fit, options, deltas), None
    except KvcalError as err:
        if err.exit_code != 3:
            raise
        return None, str(err)


def mix_threshold(fit: FitResult, options: MixOptions, deltas: Deltas | None = None) -> MixThreshold:
    """The common threshold over the mix (module docstring); NotRecommended when pulling helps no mix of these."""
    if not fit.classes:
        raise InputError("--class-mix needs a fit with link classes (kvcal fit on a kvcal sweep --pairs run)")
    shares = resolve_mix(fit.classes, options.class_mix)
    block, _ = resolve_block_size(fit, options.block_size)
    grid = _length_grid(fit.classes)
    decision: Decision | None = None
    if options.resolved_rule.rule.mix_on_point_curves:
        candidates = _candidates(block, int(grid[0]), int(grid[-1]) + block)
        loss = {name: _excess(cls.fit, grid, candidates) for name, cls in fit.classes.items()}
        best = int(np.argmin(sum(shares[name] * loss[name] for name in fit.classes)))
        common = None if candidates[best] > grid[-1] else int(candidates[best])
    else:
        candidates = _candidates(block, int(grid[0]), int(grid[-1]))
        loss, decision = _decided(fit.classes, shares, candidates, deltas or log_uniform(grid[0], grid[-1]))
        common, best = decision.threshold, int(np.searchsorted(candidates, decision.threshold or np.inf))
    if common is None:
        raise NotRecommended(_mix_refusal(decision))
    rows = []
    for name, cls in fit.classes.items():
        own, refused = class_threshold(cls.fit, options, deltas)
        at_own = None if own is None else _cost_at(own.min_cached_token_delta, candidates, loss[name])
        rows.append(ClassThreshold(name, shares[name], cls, own, refused, float(loss[name][best]), at_own))
    return MixThreshold(_mix_record(common, block, options, shares, grid, rows, decision), tuple(rows))


def _mix_refusal(decision: Decision | None) -> str:
    costs = (
        "the classes' fitted curves favour recomputing at every length they measured"
        if decision is None
        else f"no P2P is cheapest on the classes' expected costs ({decision.no_p2p_cost_ms:.4g} ms a request; the "
        f"cheapest threshold {float(decision.expected_ms.min()):.4g} ms)"
    )
    return (
        f"no threshold: over this class mix {costs}; measure longer prefixes "
        "(kvcal sweep --pairs FILE --prefix-lengths ...) or change the mix"
    )


def _decided(
    classes: dict[str, ClassFit], shares: dict[str, float], candidates: np.ndarray, deltas: Deltas
) -> tuple[dict[str, np.ndarray], Decision]:
    """Each class's expected cost at every candidate and no P2P (last), less its own least: what a request of the
    class loses against its own best; and the mix's decision (its costs are the share-weighted sums)."""
    losses, costs = {}, {}
    for name, cls in classes.items():
        expected, no_p2p = ThresholdCosts(cost_draws(cls.fit), deltas, candidates).expected()
        costs[name] = np.append(expected, no_p2p)
        losses[name] = costs[name] - costs[name].min()
    mixed = np.sum([shares[name] * costs[name] for name in classes], axis=0)
    index = int(highest_least(mixed, float(mixed[-1]))[0])
    threshold = None if index == len(candidates) else int(candidates[index])
    return losses, Decision(threshold, candidates, mixed[:-1], float(mixed[-1]), None)


def _cost_at(threshold: int, candidates: np.ndarray, loss: np.ndarray) -> float | None:
    index = int(np.searchsorted(candidates, threshold))
    return float(loss[index]) if index < len(candidates) and candidates[index] == threshold else None


def _mix_record(
    common: int,
    block: int,
    options: MixOptions,
    shares: dict[str, float],
    grid: np.ndarray,
    rows: list[ClassThreshold],
    decision: Decision | None,
) -> Threshold:
    mix = ", ".join(f"{n}={s:.3g}" for n, s in shares.items())
    over = (
        "expected costs over each class's draws"
        if decision is not None
        else "the classes' fitted curves, against choosing per length"
    )
    steps = [f"class mix {mix}: the threshold that costs the mix least on {over}, lengths {grid[0]:.0f}-{grid[-1]:.0f}"]
    against = "its own best threshold" if decision is not None else "choosing per length"
    steps += [_class_line(row, common, against) for row in rows]
    steps.append(f"minCachedTokenDelta = {common}")
    return Threshold(
        min_cached_token_delta=common,
        status="class-mix",
        break_even_tokens=None,
        break_even_ci=None,
        margin=options.margin,
        block_size=block,
        steps=tuple(steps),
        rule=options.resolved_rule.rule.name,
        decision=decision,
    )


def resolve_mix(classes: dict[str, ClassFit], given: dict[str, float] | None) -> dict[str, float]:
    """The shares by class: ``--class-mix`` (every class named in it must be the fit's) or the campaign's pairs."""
    if given is None:
        counts = {name: max(len(cls.pairs), 1) for name, cls in classes.items()}
        return {name: count / sum(counts.values()) for name, count in counts.items()}
    unknown = sorted(set(given) - set(classes))
    if unknown:
        raise InputError(
            f"--class-mix names class(es) {', '.join(unknown)} the fit does not have "
            f"(its classes: {', '.join(classes)})"
        )
    return {name: given.get(name, 0.0) for name in classes}


def _length_grid(classes: dict[str, ClassFit]) -> np.ndarray:
    low = min(cls.fit.measured_range[0] for cls in classes.values())
    high = max(cls.fit.measured_range[1] for cls in classes.values())
    return np.geomspace(low, max(high, low + 1), GRID_POINTS)


def _candidates(block: int, shortest: int, top: int) -> np.ndarray:
    """Block multiples from the shortest measured length up: below it the excess is flat (no length measured
    there), so a smaller threshold would be the curves' extrapolation, not a choice the data made."""
    step = block * max(1, math.ceil(top / block / MAX_CANDIDATES))
    start = block * math.ceil(shortest / block)
    return np.arange(start, top + step, step)


def _excess(fit: FitResult, grid: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """Mean ms a request of this class loses at each threshold, against the better leg at every length (mean costs:
    what the router pays, as the one-class rule decides)."""
    recompute, pull = mean_curves(fit)
    gain = cost_ms(recompute, grid) - cost_ms(pull, grid)  # > 0: pulling wins
    lost_recomputing = np.concatenate([[0.0], np.cumsum(np.maximum(gain, 0.0))])  # below T the router recomputes
    lost_pulling = np.concatenate([[0.0], np.cumsum(np.maximum(-gain, 0.0))])
    below = np.searchsorted(grid, thresholds, side="left")
    return (lost_recomputing[below] + lost_pulling[-1] - lost_pulling[below]) / len(grid)


def _class_line(row: ClassThreshold, common: int, against: str) -> str:
    own = f"own threshold {row.own.min_cached_token_delta}" if row.own else f"no threshold of its own ({row.refused})"
    at_own = "" if row.cost_at_own_ms is None else f", {row.cost_at_own_ms:.3g} ms at its own"
    session = "" if row.fit.session_cost_ms is None else f"; session cost {row.fit.session_cost_ms:.0f} ms per new pair"
    return (
        f"class {row.name} (share {row.share:.3g}): {own}; at the common {common} it loses "
        f"{row.cost_at_common_ms:.3g} ms a request against {against}{at_own}{session}"
    )
