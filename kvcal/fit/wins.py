"""Where the pull won, length by length: the data the threshold rule's floor and tie test read.

For each measured length: each leg's median TTFT and whether the pull's median beat
recompute's (``pull_won``), and whether it did so by a *measurable* amount:

    gap = (recompute_median - pull_median) / recompute_median
    measurable  <=>  gap > max(MIN_WIN_REL, z x 1.2533 x sqrt(cv_r^2 / m_r + cv_p^2 / m_p))

cv_r, cv_p are the legs' robust relative noise (from the fit), m the probes per leg at
that length, 1.2533 = sqrt(pi/2) the standard error of a median over that of a mean,
and z the one-sided normal quantile at 5 % shared over the K lengths (Bonferroni,
z = Phi^-1(1 - 0.05 / K)), so a tie (both legs equal) shows no measurable win at any
length in about 95 % of campaigns. MIN_WIN_REL (2 %) keeps a noiseless campaign's
rounding from counting.

``pull_won_from`` is L, the shortest measured length from which the pull's median won
at every longer measured length (None when it lost at the longest).
"""

from __future__ import annotations

import math

from scipy import stats

from kvcal.fit.tables import ProbeTable
from kvcal.records import LengthSummary

MIN_WIN_REL = 0.02
FAMILY_ALPHA = 0.05
MEDIAN_SE_FACTOR = math.sqrt(math.pi / 2)


def per_length(table: ProbeTable, cv_recompute: float, cv_pull: float) -> list[LengthSummary]:
    """One summary per measured length, ascending."""
    groups = table.probes.groupby(["prefix_tokens", "leg"])["ttft_ms"]
    med, count = groups.median(), groups.size()
    lengths = table.lengths
    z = float(stats.norm.ppf(1.0 - FAMILY_ALPHA / max(len(lengths), 1)))
    out = []
    for n in lengths:
        rec, pull = med.get((n, "recompute")), med.get((n, "pull"))
        m_r, m_p = int(count.get((n, "recompute"), 0)), int(count.get((n, "pull"), 0))
        won = measurable = None
        if rec is not None and pull is not None:
            won = bool(pull < rec)
            gap = (rec - pull) / rec
            noise = z * MEDIAN_SE_FACTOR * math.sqrt(cv_recompute**2 / m_r + cv_pull**2 / m_p)
            measurable = bool(gap > max(MIN_WIN_REL, noise))
        out.append(LengthSummary(prefix_tokens=int(n), recompute_ms=_round(rec), pull_ms=_round(pull), n_recompute=m_r,
                                 n_pull=m_p, pull_won=won, pull_won_measurably=measurable))
    return out


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
