"""What any threshold costs per request, in every draw of the mean costs, over the deltas a router sees.

A router with threshold ``t`` recomputes a delta ``d < t`` and pulls one ``d >= t``, so in draw
``b`` (:mod:`kvcal.threshold.draw_costs`) with mean costs ``R_b`` and ``P_b`` and deltas weighted ``w``:

    C_b(t) = sum_d w(d) R_b(d) - S_b(t),       S_b(t) = sum_{d >= t} w(d) (R_b(d) - P_b(d))

Each leg is a quadratic curve plus a correction linear between measured lengths, so ``S_b(t)``
needs only the deltas' weight and first two moments between consecutive breakpoints (the
candidate thresholds and the measured lengths, :meth:`kvcal.threshold.delta_weights.Deltas.moments`):

    S_b(t) = (r_b - p_b) . M(>= t) + (c^R_b - c^P_b) . H(>= t)

with ``M = (W0, W1 / 1e3, W2 / 1e6)`` in the units of :func:`kvcal.costs.cost_curve.cost_ms` and
``H_k`` the deltas' weight on the k-th measured length's hat function. Memory is draws x
candidates, in slices of at most ``CHUNK_ELEMENTS``; the deltas enter only through their
moments. The expected cost over the draws is linear in the draws, so it is the cost of the
draws' mean (:meth:`expected`).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from kvcal.threshold.delta_weights import Deltas
from kvcal.threshold.draw_costs import CostDraws

UNITS = np.array([1.0, 1e-3, 1e-6])
CHUNK_ELEMENTS = 4_000_000  # draws x candidates held at once (32 MB)
TIE_RELATIVE = 1e-9
"""Costs that agree within this share are a tie, which the highest threshold (no P2P above all) wins."""


class ThresholdCosts:
    """Candidates' costs per draw; any other threshold's on demand (:meth:`draw_costs_at`)."""

    def __init__(self, draws: CostDraws, deltas: Deltas, candidates: np.ndarray) -> None:
        self.draws, self.deltas = draws, deltas
        self.candidates = np.asarray(candidates, dtype=float)
        self.m_all, self.h_all = self._suffix(np.array([-np.inf]))
        self.m_at, self.h_at = self._suffix(self.candidates)
        self.total = self._recompute_total(draws)
        self._best: tuple[np.ndarray, np.ndarray] | None = None

    def _suffix(self, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(len(starts), 3) moments and (len(starts), K) hat weights of the deltas at or above each start."""
        knots = self.draws.knots
        edges = np.unique(np.concatenate([starts, knots, [-np.inf, np.inf]]))
        sub = self.deltas.moments(edges)
        hats = _hat_weights(knots, edges, sub)
        m = np.concatenate([np.cumsum(sub[::-1] * UNITS, axis=0)[::-1], np.zeros((1, 3))])
        h = np.concatenate([np.cumsum(hats[::-1], axis=0)[::-1], np.zeros((1, len(knots)))])
        at = np.searchsorted(edges, starts, side="left")
        return m[at], h[at]

    def _recompute_total(self, draws: CostDraws) -> np.ndarray:
        return draws.recompute @ self.m_all[0] + draws.recompute_correction @ self.h_all[0]

    def _savings(self, draws: CostDraws, m: np.ndarray, h: np.ndarray) -> np.ndarray:
        """(B, T) savings of pulling from each threshold up, for thresholds whose suffix sums are ``m``, ``h``."""
        gap = draws.recompute - draws.pull
        corrections = draws.recompute_correction - draws.pull_correction
        return gap @ m.T + corrections @ h.T

    def expected(self) -> tuple[np.ndarray, float]:
        """The expected cost (ms per request, mean over the draws) of each candidate, and of no P2P."""
        mean = self.draws.mean()
        total = float(self._recompute_total(mean)[0])
        return total - self._savings(mean, self.m_at, self.h_at)[0], total

    def draw_costs_at(self, threshold: float) -> np.ndarray:
        """(B,) each draw's cost of pulling from ``threshold`` up (``inf``: never)."""
        if not np.isfinite(threshold):
            return self.total.copy()
        m, h = self._suffix(np.array([float(threshold)]))
        return self.total - self._savings(self.draws, m, h)[:, 0]

    def draw_best(self) -> tuple[np.ndarray, np.ndarray]:
        """Each draw's least cost over the candidates and no P2P, and the threshold that reaches it (``inf``: no
        P2P), the highest among ties."""
        if self._best is None:
            costs, chosen = [], []
            for rows in self._slices():
                sliced = _slice(self.draws, rows)
                total = self.total[rows]
                all_costs = np.concatenate(
                    [total[:, None] - self._savings(sliced, self.m_at, self.h_at), total[:, None]], axis=1
                )
                index = highest_least(all_costs, total)
                costs.append(all_costs[np.arange(len(index)), index])
                chosen.append(np.append(self.candidates, np.inf)[index])
            self._best = np.concatenate(costs), np.concatenate(chosen)
        return self._best

    def _slices(self) -> Iterator[slice]:
        step = max(1, CHUNK_ELEMENTS // max(len(self.candidates) + 1, 1))
        for start in range(0, self.draws.n_draws, step):
            yield slice(start, start + step)


def highest_least(costs: np.ndarray, scale: np.ndarray | float) -> np.ndarray:
    """Per row of ``costs`` (rows x options, options ascending), the index of the highest option whose cost is
    within ``TIE_RELATIVE`` x ``scale`` of the row's least."""
    costs = np.atleast_2d(costs)
    least = costs.min(axis=1)
    tolerance = TIE_RELATIVE * np.abs(np.broadcast_to(np.asarray(scale, dtype=float), least.shape))
    tied = costs <= (least + tolerance)[:, None]
    return costs.shape[1] - 1 - np.argmax(tied[:, ::-1], axis=1)


def _slice(draws: CostDraws, rows: slice) -> CostDraws:
    return CostDraws(
        draws.recompute[rows],
        draws.pull[rows],
        draws.knots,
        draws.recompute_correction[rows],
        draws.pull_correction[rows],
        draws.misfits,
        draws.from_bootstrap,
    )


def _hat_weights(knots: np.ndarray, edges: np.ndarray, sub: np.ndarray) -> np.ndarray:
    """(S, K): the deltas' weight on each knot's hat function (np.interp's, flat beyond the ends) per sub-interval
    between ``edges``, from the sub-interval's weight W0 and first moment W1 (each hat is linear inside one)."""
    k = len(knots)
    out = np.zeros((len(sub), k))
    if k == 0:
        return out
    if k == 1:
        out[:, 0] = sub[:, 0]
        return out
    lo, hi = edges[:-1], edges[1:]
    inside = np.where(np.isfinite(lo) & np.isfinite(hi), 0.5 * (lo + hi), np.where(np.isfinite(lo), lo, hi))
    segment = np.clip(np.searchsorted(knots, inside, side="right") - 1, 0, k - 2)
    below, above = inside < knots[0], inside >= knots[-1]
    left, right = knots[segment], knots[segment + 1]
    width = right - left
    rows = np.arange(len(sub))
    w0, w1 = sub[:, 0], sub[:, 1]
    middle = ~below & ~above
    out[rows[middle], segment[middle]] = (right[middle] * w0[middle] - w1[middle]) / width[middle]
    out[rows[middle], segment[middle] + 1] = (w1[middle] - left[middle] * w0[middle]) / width[middle]
    out[rows[below], 0] = w0[below]
    out[rows[above], k - 1] = w0[above]
    return out
