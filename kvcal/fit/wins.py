"""Where the pull won, length by length: the data the threshold rule's floor and tie test read.

For each measured length: each leg's median TTFT and whether the pull's median beat
recompute's (``pull_won``), and whether it did so by a *measurable* amount, on the log
scale where multiplicative noise is symmetric and a large win is not capped at 100 %:

    g = log(recompute_median / pull_median)
    measurable  <=>  g > max(MIN_WIN_LOG, z x se),   se^2 = f(m_r) cv_r^2 / m_r + f(m_p) cv_p^2 / m_p

cv_r, cv_p are the legs' robust relative noise (from the fit, about the log-scale sd), m
the probes per leg at that length, f(m) = pi/2 for m >= 3 (a median's variance over a
mean's), else 1 (the median of one or two values is their mean), and z the one-sided
normal quantile at 5 % shared over the K lengths (Bonferroni, z = Phi^-1(1 - 0.05 / K)).
MIN_WIN_LOG (2 %) keeps a noiseless campaign's rounding from counting.
:func:`pooled_win_z` is the matching test over all lengths at once (a small win at every
length), which the threshold rule's tie test also consults.

``pull_won_from`` is L, the shortest measured length from which the pull's median won
at every longer measured length (None when it lost at the longest).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from scipy.special import ndtri

from kvcal.records.fit import LengthSummary

if TYPE_CHECKING:  # the probe table brings pandas, which the threshold's tie test (emit-config) never needs
    from kvcal.fit.tables import ProbeTable

MIN_WIN_LOG = math.log(1 / 0.98)
FAMILY_ALPHA = 0.05


def log_gap_se(cv_recompute: float, cv_pull: float, m_recompute: int, m_pull: int) -> float:
    """Standard error of log(recompute median / pull median) at one length (module docstring)."""

    def f(m: int) -> float:
        return math.pi / 2 if m >= 3 else 1.0

    return math.sqrt(f(m_recompute) * cv_recompute**2 / max(m_recompute, 1) + f(m_pull) * cv_pull**2 / max(m_pull, 1))


def per_length(table: ProbeTable, cv_recompute: float, cv_pull: float) -> list[LengthSummary]:
    """One summary per measured length, ascending."""
    groups = table.probes.groupby(["prefix_tokens", "leg"])["ttft_ms"]
    med, count = groups.median(), groups.size()
    lengths = table.lengths
    z = float(ndtri(1.0 - FAMILY_ALPHA / max(len(lengths), 1)))
    out = []
    for n in lengths:
        rec, pull = med.get((n, "recompute")), med.get((n, "pull"))
        m_r, m_p = int(count.get((n, "recompute"), 0)), int(count.get((n, "pull"), 0))
        won = measurable = None
        if rec is not None and pull is not None and rec > 0 and pull > 0:
            won = bool(pull < rec)
            measurable = bool(math.log(rec / pull) > max(MIN_WIN_LOG, z * log_gap_se(cv_recompute, cv_pull, m_r, m_p)))
        out.append(
            LengthSummary(
                prefix_tokens=int(n),
                recompute_ms=_round(rec),
                pull_ms=_round(pull),
                n_recompute=m_r,
                n_pull=m_p,
                pull_won=won,
                pull_won_measurably=measurable,
            )
        )
    return out


def pooled_win_z(rows: list[LengthSummary], cv_recompute: float, cv_pull: float) -> float:
    """z of the mean log gap over all lengths (positive: the pull faster on average); 0 when nothing to test."""
    terms = [
        (math.log(r.recompute_ms / r.pull_ms), log_gap_se(cv_recompute, cv_pull, r.n_recompute, r.n_pull))
        for r in rows
        if r.recompute_ms and r.pull_ms
    ]
    if not terms:
        return 0.0
    se = math.sqrt(sum(s * s for _, s in terms))
    return sum(g for g, _ in terms) / se if se > 0 else (math.inf if sum(g for g, _ in terms) > 0 else 0.0)


def pull_won_from(rows: list[LengthSummary]) -> int | None:
    """Shortest length L such that the pull's median won at L and every longer measured length."""
    start = None
    for row in reversed(rows):
        if row.pull_won is None:
            continue
        if not row.pull_won:
            break
        start = row.prefix_tokens
    return start


def _round(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(f"{value:.6g}")


def pull_lost_measurably(rows: list[LengthSummary], cv_recompute: float, cv_pull: float) -> list[int]:
    """The lengths where the pull's median lost by a measurable amount: the win test of :func:`per_length`
    mirrored (``log(pull / recompute) > max(MIN_WIN_LOG, z x se)``, z shared over the lengths as there)."""
    z = float(ndtri(1.0 - FAMILY_ALPHA / max(len(rows), 1)))
    return [
        r.prefix_tokens
        for r in rows
        if r.recompute_ms
        and r.pull_ms
        and math.log(r.pull_ms / r.recompute_ms)
        > max(MIN_WIN_LOG, z * log_gap_se(cv_recompute, cv_pull, r.n_recompute, r.n_pull))
    ]
