"""The cached-token deltas a router sees, as weights over tokens: what a threshold's expected cost averages over.

Two shapes, one question each answers: the weight and first two moments of the deltas in
each interval ``[e_j, e_{j+1})`` of a list of edges (:meth:`Deltas.moments`), which is all an
expected cost needs when each leg's cost is a quadratic in the delta (``kvcal.costs.cost_curve``)
and the measured means' corrections are linear between measured lengths.

* :class:`LogUniform`: the default, a density ``1 / (d ln(hi / lo))`` over ``[lo, hi]``,
  integrated exactly (``W0 = ln(b/a) / L``, ``W1 = (b - a) / L``, ``W2 = (b^2 - a^2) / 2L``), so a
  threshold between two grid points is not a tie of a discretisation;
* :class:`Histogram`: deltas a file gave (``--deltas``, :mod:`kvcal.threshold.deltas`), each distinct
  value with its weight and the spread of the values it stands for. Its size is bounded
  whatever the file holds: past ``MAX_POINTS`` distinct values neighbours are merged into bins
  of a power-of-two width that keep their exact weight, mean and second moment
  (:func:`merge_to`), so the sums above stay exact and only where a merged bin sits against a
  threshold moves, by less than its width.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MAX_POINTS = 1 << 18
"""Distinct deltas held at most (three float arrays: 6 MB); a router's deltas are whole blocks, far fewer."""


class Deltas:
    """Weights over cached-token deltas that sum to 1; ``source`` says where they came from."""

    source: str

    def span(self) -> tuple[float, float]:
        """The smallest and largest delta with weight."""
        raise NotImplementedError

    def moments(self, edges: np.ndarray) -> np.ndarray:
        """(len(edges) - 1, 3): weight, sum of w d and sum of w d^2 of the deltas in each ``[e_j, e_{j+1})``."""
        raise NotImplementedError


@dataclass(frozen=True)
class LogUniform(Deltas):
    """Deltas spread log-uniformly over ``[lo, hi]`` (a point mass at ``lo`` when the two meet)."""

    lo: float
    hi: float
    source: str = ""

    def span(self) -> tuple[float, float]:
        return self.lo, self.hi

    def moments(self, edges: np.ndarray) -> np.ndarray:
        edges = np.asarray(edges, dtype=float)
        a, b = np.clip(edges[:-1], self.lo, self.hi), np.clip(edges[1:], self.lo, self.hi)
        if self.hi <= self.lo:
            inside = ((edges[:-1] <= self.lo) & (self.lo < edges[1:])).astype(float)
            return np.stack([inside, inside * self.lo, inside * self.lo**2], axis=1)
        scale = math.log(self.hi / self.lo)
        return np.stack([np.log(b / a) / scale, (b - a) / scale, (b * b - a * a) / (2 * scale)], axis=1)


def log_uniform(n_min: float, n_max: float) -> LogUniform:
    """The default deltas: log-uniform over the measured range (or the range a rule may choose in)."""
    lo, hi = max(float(n_min), 1.0), max(float(n_max), float(n_min), 1.0)
    return LogUniform(lo, hi, f"deltas log-uniform over {lo:,.0f}-{hi:,.0f} tokens")


@dataclass(frozen=True)
class Histogram(Deltas):
    """Distinct deltas (ascending), their weights (summing to 1) and the variance of the values each stands for."""

    points: np.ndarray
    weights: np.ndarray
    variance: np.ndarray
    source: str = ""

    def span(self) -> tuple[float, float]:
        return float(self.points[0]), float(self.points[-1])

    def moments(self, edges: np.ndarray) -> np.ndarray:
        edges = np.asarray(edges, dtype=float)
        index = np.searchsorted(edges, self.points, side="right") - 1
        keep = (index >= 0) & (index < len(edges) - 1)
        out = np.zeros((len(edges) - 1, 3))
        w, p = self.weights[keep], self.points[keep]
        for column, values in enumerate((w, w * p, w * (p * p + self.variance[keep]))):
            np.add.at(out[:, column], index[keep], values)
        return out


def merge_to(
    keys: np.ndarray, sums: np.ndarray, limit: int, width: float = 1.0
) -> tuple[np.ndarray, np.ndarray, float]:
    """Rows of ``sums`` (weight, w d, w d^2) added up per bin of ``width`` tokens that ``keys`` fall in, the width
    doubled until at most ``limit`` bins remain: (each bin's start, its sums, the width)."""
    while True:
        bins = np.floor(keys / width)
        unique, index = np.unique(bins, return_inverse=True)
        if len(unique) <= limit:
            out = np.zeros((len(unique), 3))
            np.add.at(out, index.reshape(-1), sums)
            return unique * width, out, width
        width *= 2.0
