"""What is removed from a campaign before it is fitted, and why: duplicated rows and warm-up probes.

**Duplicates.** Rows identical in length, leg, rep and TTFT (and pair, in a campaign over
pairs) are one probe written twice (a CSV concatenated with itself): kept, they narrow the
interval as if there were more probes (five copies: about sqrt(5) narrower). They are
counted, warned about and collapsed to one. With no ``rep`` column the key is length, leg
and TTFT.

**Warm-up.** An engine meeting a new shape is slow the first time (a compiled graph, an
allocation). If the first probe in time of each (length, leg) is slower than the others
at that length, the fit is biased upward at every length and its interval, being about
noise, does not cover the bias. The test, per (length, leg) group with at least two
probes: r = log(first / median(rest)); across the groups a one-sided Wilcoxon
signed-rank test of median r > 0. When p < WARMUP_ALPHA and the median ratio exceeds
1 + WARMUP_MIN_EXCESS, the first probe of every group is excluded and the fit says so.
"First" is the earliest ``order`` (a run folder's recorded start times, a CSV's ``order`` or
``started_at`` column), else rep 0.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

WARMUP_ALPHA = 0.01
WARMUP_MIN_EXCESS = 0.03  # a first-probe excess under 3 % is within what the margin absorbs
WARMUP_MIN_GROUPS = 4
WARMUP_NOTE = "warm-up effect:"


def collapse_duplicates(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Rows with repeats of (prefix_tokens, leg, rep, ttft_ms, pair) dropped, and how many were dropped (two pairs
    of a campaign may time one length alike: those are two probes)."""
    seen: set[tuple[Any, ...]] = set()
    kept = []
    for row in rows:
        key = (int(row["prefix_tokens"]), str(row["leg"]), row.get("rep"), float(row["ttft_ms"]), row.get("pair"))
        if key in seen:
            continue
        seen.add(key)
        kept.append(row)
    return kept, len(rows) - len(kept)


def duplicate_warning(n: int) -> str:
    return (
        f"{n} duplicated row(s) (identical length, leg, rep and TTFT) collapsed before the fit: was the input "
        "concatenated? Kept, they would narrow the interval as if measured twice; check with `sort | uniq -d`"
    )


def warmup_test(probes: pd.DataFrame) -> tuple[np.ndarray, str | None]:
    """(mask of first-in-time probes to exclude, or all False; the note saying so, or None)."""
    exclude = np.zeros(len(probes), dtype=bool)
    if probes.empty:
        return exclude, None
    order = probes["order"] if "order" in probes and probes["order"].notna().all() else probes["rep"]
    ratios, firsts = [], []
    for _, group in probes.groupby(["prefix_tokens", "leg"]):
        if len(group) < 2:
            continue
        first = group.index[int(np.argmin(order.loc[group.index].to_numpy()))]
        rest = group["ttft_ms"].drop(first)
        ratios.append(math.log(probes.at[first, "ttft_ms"] / float(rest.median())))
        firsts.append(first)
    if len(ratios) < WARMUP_MIN_GROUPS:
        return exclude, None
    r = np.array(ratios)
    if np.all(r == 0):
        return exclude, None
    p = float(stats.wilcoxon(r, alternative="greater").pvalue)
    excess = math.exp(float(np.median(r))) - 1.0
    if p >= WARMUP_ALPHA or excess <= WARMUP_MIN_EXCESS:
        return exclude, None
    exclude[probes.index.get_indexer(firsts)] = True
    note = (
        f"{WARMUP_NOTE} the first probe in time of each (length, leg) was {excess:.0%} slower than the others "
        f"(median over {len(r)} groups, Wilcoxon p = {p:.1g}); those {len(firsts)} probes were excluded from the fit. "
        "Sweep with warm-up probes (`kvcal sweep --warmup-probes`) to keep them out of the data"
    )
    return exclude, note
