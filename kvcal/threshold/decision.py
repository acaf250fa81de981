"""The threshold as one decision: the candidate with the least expected cost per request over the fit's draws.

    T = argmin_{t in candidates + {no P2P}}  E_b [ sum_d w(d) ( R_b(d) 1[d < t] + P_b(d) 1[d >= t] ) ]

``b`` runs over the fit's draws of both legs' mean costs (:mod:`kvcal.threshold.draw_costs`: bootstrap
curves times drawn scales, measured means with their noise where a curve misfits), ``w`` over
the deltas (``--deltas``, else log-uniform over the measured range). Candidates are block
multiples from the shortest measured length (rounded up to a block) to the longest, and "no P2P";
with ``--allow-extrapolation`` from the two-block floor to 4x the longest, the default deltas
widened alike. Candidates whose expected costs agree within ``TIE_RELATIVE`` go to the highest
(no P2P above all). A fit without draws decides on its point mean curves as one draw.

Each draw's own best threshold (:meth:`Decision.draw_thresholds`) is what the remaining-work
boundary's interval and observe's proposal read; :func:`kvcal.threshold.rules.expected_cost` turns the
decision into the default rule's threshold, steps and refusal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvcal.fit.ladder_steps import pull_floor
from kvcal.records.fit import FitResult
from kvcal.threshold.candidate_costs import TIE_RELATIVE, ThresholdCosts, highest_least
from kvcal.threshold.delta_weights import Deltas, log_uniform
from kvcal.threshold.draw_costs import CostDraws, cost_draws
from kvcal.threshold.parts import resolve_block_size

__all__ = ["TIE_RELATIVE", "Decision", "candidates", "decide", "draw_thresholds"]

EXTRAPOLATE_UP = 4
"""With --allow-extrapolation the candidates (and default deltas) reach this many times the longest length."""
MAX_CANDIDATES = 16_384
"""Past this many block multiples the candidates step by whole blocks more (a range of 1M tokens at block 16)."""


@dataclass(frozen=True)
class Decision:
    """The chosen threshold (None: no P2P is cheapest), what it and no P2P cost, and the costs behind them."""

    threshold: int | None
    candidates: np.ndarray
    expected_ms: np.ndarray
    no_p2p_cost_ms: float
    costs: ThresholdCosts | None  # None for a class mix: its costs are the classes' own, summed

    @property
    def chosen_cost_ms(self) -> float:
        if self.threshold is None:
            return self.no_p2p_cost_ms
        return float(self.expected_ms[np.searchsorted(self.candidates, self.threshold)])

    @property
    def n_compared(self) -> int:
        """Thresholds compared: the candidates and no P2P."""
        return len(self.candidates) + 1

    @property
    def model(self) -> ThresholdCosts:
        assert self.costs is not None, "a class mix's decision has no draws of its own"
        return self.costs

    @property
    def draws(self) -> CostDraws:
        return self.model.draws

    def draw_thresholds(self) -> np.ndarray:
        """Each draw's own best threshold (``inf`` where no P2P is cheapest in that draw)."""
        return self.model.draw_best()[1]

    def as_json(self) -> dict[str, Any]:
        """``--format json``'s ``decision`` object."""
        return {
            "candidates": self.n_compared,
            "chosen_cost_ms": _sig(self.chosen_cost_ms),
            "no_p2p_cost_ms": _sig(self.no_p2p_cost_ms),
        }


def candidates(fit: FitResult, block: int, allow_extrapolation: bool = False) -> np.ndarray:
    """The block multiples the decision compares (module docstring)."""
    shortest, longest = int(fit.measured_range[0]), int(fit.measured_range[-1])
    if allow_extrapolation:
        low, high = pull_floor(block), EXTRAPOLATE_UP * longest
    else:
        low, high = max(block * math.ceil(shortest / block), block), max(longest, shortest)
    step = block * max(1, math.ceil((high - low) / block / MAX_CANDIDATES))
    return np.arange(low, max(high, low) + 1, step, dtype=float)


def default_deltas(fit: FitResult, block: int, allow_extrapolation: bool = False) -> Deltas:
    """Log-uniform over the measured range, or over the candidates' range with --allow-extrapolation."""
    low, high = float(fit.measured_range[0]), float(fit.measured_range[-1])
    if allow_extrapolation:
        low, high = min(low, float(pull_floor(block))), EXTRAPOLATE_UP * high
    return log_uniform(low, high)


def decide(
    fit: FitResult,
    *,
    block_size: int | None = None,
    deltas: Deltas | None = None,
    allow_extrapolation: bool = False,
    draws: CostDraws | None = None,
) -> Decision:
    """The threshold that costs least on average over the fit's draws (module docstring)."""
    block, _ = resolve_block_size(fit, block_size)
    points = candidates(fit, block, allow_extrapolation)
    costs = ThresholdCosts(draws or cost_draws(fit), deltas or default_deltas(fit, block, allow_extrapolation), points)
    expected, no_p2p = costs.expected()
    index = int(highest_least(np.append(expected, no_p2p), no_p2p)[0])
    threshold = None if index == len(points) else int(points[index])
    return Decision(threshold, points, expected, no_p2p, costs)


def draw_thresholds(
    fit: FitResult, *, block_size: int | None = None, deltas: Deltas | None = None, allow_extrapolation: bool = False
) -> np.ndarray | None:
    """Each bootstrap draw's own best threshold in tokens (``inf`` where no P2P is cheapest in that draw); None when
    the fit keeps no draws (an older fit.json, ``--resamples 0``)."""
    decision = decide(fit, block_size=block_size, deltas=deltas, allow_extrapolation=allow_extrapolation)
    if not decision.draws.from_bootstrap:
        return None
    return decision.draw_thresholds()


def _sig(value: float) -> float:
    return float(f"{value:.6g}")
