"""What a threshold costs the fleet: expected regret over the cached-token deltas the router sees.

With each draw's cost of a threshold, ``C_b(t)`` (:mod:`kvcal.threshold.candidate_costs`: the
fit's draws of the mean costs, :mod:`kvcal.threshold.draw_costs`, over the deltas), and the draw's
least cost over every candidate and no P2P, ``C_b*``:

    regret_b(t) = C_b(t) - C_b*       in ms per request, and as a share of C_b*

The figures are their means over the draws, and ``p_break_even_above`` is the share of draws
whose own best threshold lies above ``t`` (no P2P counts as above every threshold). The same
draws and deltas decide the default threshold (:mod:`kvcal.threshold.decision`), so a rule's
price and the default's choice are read off one set of costs. A fit without bootstrap
samples has no figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kvcal.threshold.candidate_costs import TIE_RELATIVE, ThresholdCosts


@dataclass(frozen=True)
class Figures:
    """What one threshold costs (None where there is no threshold or no bootstrap draws)."""

    expected_regret_ms: float | None = None
    expected_regret_pct: float | None = None
    p_break_even_above: float | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "expected_regret_ms": self.expected_regret_ms,
            "expected_regret_pct": self.expected_regret_pct,
            "p_break_even_above": self.p_break_even_above,
        }


class RegretModel:
    """The draws' costs of every threshold; :meth:`figures` for any one."""

    def __init__(self, costs: ThresholdCosts) -> None:
        self.costs = costs
        self.best_cost, self.best_threshold = costs.draw_best()

    def regret_ms(self, threshold: float) -> np.ndarray:
        """Per draw: the extra ms per request of pulling from ``threshold`` up, over the draw's best threshold (0
        within the decision's tie tolerance, so rounding is not priced)."""
        regret = self.costs.draw_costs_at(threshold) - self.best_cost
        return np.where(regret > TIE_RELATIVE * np.abs(self.best_cost), regret, 0.0)

    def figures(self, threshold: int | None) -> Figures:
        if threshold is None:
            return Figures()
        regret = self.regret_ms(threshold)
        share = regret / np.maximum(self.best_cost, 1e-12)
        return Figures(
            _sig(float(regret.mean())),
            _sig(100.0 * float(share.mean())),
            _sig(float(np.mean(self.best_threshold > threshold))),
        )


def _sig(value: float) -> float:
    return float(f"{value:.4g}")
