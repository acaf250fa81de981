"""The recommended threshold: the simulated one the fleet serves best, ties decided by paired comparisons.

Every policy ran the same runs (seeds x calibration resamples, common random numbers), so
two thresholds are compared run by run: the mean of their per-run differences against its
standard error (Student's t at the fit's confidence, two-sided). Differences inside that
noise are a tie. There is no margin: the recommendation is always a simulated threshold
inside the span tied with the best (:data:`RECOMMENDED_RULE`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

BEST_RULE = (
    "best_threshold: the simulated threshold with the highest mean goodput over all runs (seeds x "
    "resamples), equal means going to the lower mean TTFT p90, then to the one nearest the idle threshold; "
    "best_threshold_ci: the lowest and highest "
    "threshold whose goodput ties with it in a paired comparison over the same runs"
)
RECOMMENDED_RULE = (
    "recommended_threshold is the simulated threshold with the highest mean goodput over all runs "
    "(seeds x resamples); thresholds whose goodput ties with it (a paired comparison over the same "
    "seeds and resamples, Student's t at the fit's confidence) are decided by the lowest TTFT p90 "
    "(ties again by the paired comparison), then by nearness to the idle threshold (the lowest tied "
    "one when there is none); no margin, never outside the span tied with the best; when no policy "
    "differs (nothing pulled) the idle threshold."
)
# Figures that differ by less than this share are equal whatever the noise (one run has no noise estimate).
EXACT = 1e-9


@dataclass(frozen=True)
class Candidate:
    """One threshold's per-run figures, in the same run order for every candidate (the pairing)."""

    threshold: int
    goodput: np.ndarray
    ttft_p90: np.ndarray


@dataclass(frozen=True)
class Choice:
    best: int
    tied_span: tuple[int, int]
    recommended: int
    steps: list[str]
    goodput_tied: tuple[int, ...]  # the thresholds tied with the best on goodput
    p90_tied: tuple[int, ...]  # of those, the ones tied with the lowest TTFT p90


def ties(a: np.ndarray, b: np.ndarray, confidence: float) -> bool:
    """Whether two policies' per-run figures are indistinguishable, run k paired with run k."""
    diff = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    scale = max(float(np.abs(a).mean()), float(np.abs(b).mean()), 1e-300)
    mean = abs(float(diff.mean()))
    if mean <= EXACT * scale:
        return True
    if len(diff) < 2:
        return False
    spread = float(diff.std(ddof=1))
    critical = float(stats.t.ppf((1 + confidence) / 2, len(diff) - 1))
    return mean <= critical * spread / math.sqrt(len(diff))


def choose(candidates: list[Candidate], idle: int | None, confidence: float) -> Choice:
    """The rule of :data:`RECOMMENDED_RULE` on the threshold rows (at least one)."""
    mean_g = {c.threshold: float(c.goodput.mean()) for c in candidates}
    mean_p = {c.threshold: float(c.ttft_p90.mean()) for c in candidates}
    near = (lambda t: (abs(t - idle), t)) if idle is not None else (lambda t: (0, t))
    best = min(candidates, key=lambda c: (-mean_g[c.threshold], mean_p[c.threshold], near(c.threshold)))
    tied = [c for c in candidates if c is best or ties(c.goodput, best.goodput, confidence)]
    span = (min(c.threshold for c in tied), max(c.threshold for c in tied))
    runs = len(best.goodput)
    steps = [
        f"goodput: highest mean {mean_g[best.threshold]:.4g}/s at {best.threshold}; tied with it in a paired "
        f"comparison over {runs} run(s) at {confidence:.0%}: {_listed(tied)} (span {span[0]}-{span[1]})"
    ]
    fastest = min(tied, key=lambda c: (mean_p[c.threshold], c.threshold))
    quick = [c for c in tied if c is fastest or ties(c.ttft_p90, fastest.ttft_p90, confidence)]
    steps.append(
        f"TTFT p90: lowest mean {mean_p[fastest.threshold]:.4g} ms at {fastest.threshold} among those; "
        f"tied with it: {_listed(quick)}"
    )
    if idle is not None:
        pick = min(quick, key=lambda c: (abs(c.threshold - idle), c.threshold)).threshold
        steps.append(f"nearest the idle threshold {idle}: {pick}")
    else:
        pick = min(c.threshold for c in quick)
        steps.append(f"no idle threshold: the lowest of them, {pick}")
    if runs < 2:
        steps.append("one run per policy gives no paired noise: only identical figures tie (--seeds 2 or more)")
    return Choice(
        best=best.threshold,
        tied_span=span,
        recommended=pick,
        steps=steps,
        goodput_tied=tuple(sorted(c.threshold for c in tied)),
        p90_tied=tuple(sorted(c.threshold for c in quick)),
    )


def _listed(items: list[Candidate]) -> str:
    return ", ".join(str(c.threshold) for c in sorted(items, key=lambda c: c.threshold))
