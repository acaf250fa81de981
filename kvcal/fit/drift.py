"""A trend of the residuals over the run's time order: the host slowing down (or warming up) as it ran.

Where the input carries time order (a run folder's ``started_at``, a CSV's ``order`` or
``started_at`` column), each leg's log ratios ``log(ttft / fitted)`` are set against the
probes' rank in time. Kendall's tau tests for a monotone trend (rank-based, so a stall
or a slow mode does not fake one); the Theil-Sen slope, a median of pairwise slopes,
sizes it as the relative change from the first probe to the last. A trend is reported
when p < ``TREND_ALPHA`` and the change exceeds ``TREND_MIN_CHANGE``: a sweep shuffles
its plan, so a drift widens the noise rather than biasing one length, but a host that
slowed by a tenth during the run measured a moving target.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from kvcal.costs.cost_curve import cost_ms
from kvcal.fit.curves import LegFit
from kvcal.fit.tables import ProbeTable
from kvcal.records.fit import TimeTrend

TREND_ALPHA = 0.01
TREND_MIN_CHANGE = 0.05
MIN_PROBES = 8


def time_trends(table: ProbeTable, legs: tuple[LegFit, ...]) -> list[TimeTrend]:
    """The legs whose residuals drift over time order (none when the input has no time order)."""
    probes = table.probes
    if probes.empty or "order" not in probes or not probes["order"].notna().all():
        return []
    span = float(probes["order"].max() - probes["order"].min())
    if span <= 0:
        return []
    out = []
    for leg_fit in legs:
        rows = table.leg(leg_fit.data.name)
        if len(rows) < MIN_PROBES:
            continue
        when = rows["order"].to_numpy(dtype=float)
        e = np.log(
            rows["ttft_ms"].to_numpy(dtype=float)
            / cost_ms(leg_fit.chosen_fit.coef, rows["prefix_tokens"].to_numpy(dtype=float))
        )
        tau = stats.kendalltau(when, e)
        if not math.isfinite(float(tau.pvalue)) or tau.pvalue >= TREND_ALPHA:
            continue
        change = math.expm1(float(stats.theilslopes(e, when).slope) * span)
        if abs(change) > TREND_MIN_CHANGE:
            out.append(
                TimeTrend(
                    leg=leg_fit.data.name,
                    change=round(change, 4),
                    p_value=float(f"{tau.pvalue:.3g}"),
                    order_source=table.order_source or "order",
                )
            )
    return out


def describe(trend: TimeTrend) -> str:
    """One line for stderr and fit.json's warnings."""
    way = "slower" if trend.change > 0 else "faster"
    return (
        f"{trend.leg} drifted {abs(trend.change):.0%} {way} from the first probe to the last in time order "
        f"(from {trend.order_source}; Kendall p = {trend.p_value:.2g}): the host changed during the run; "
        "rerun `kvcal sweep` on a quiet machine, or with --reps spread over time, and compare"
    )
