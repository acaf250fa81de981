"""The break-even: where fitted recompute reaches fitted pull, solved exactly, and its status.

With both curves polynomials in n (tokens, ms), their difference is

    D(n) = recompute(n) - pull(n) = a n^2 + b n + c
    a = (r2 - p2) / 1e6,  b = (r1 - p1) / 1e3,  c = r0 - p0

(r0 intercept_ms, r1 per_token_us, r2 per_token2_ns; p likewise). The pull wins
where D(n) >= 0. The break-even is the smallest n >= 0 from which on the pull keeps
winning: sup{n > 0 : D(n) < 0}, or 0 when D >= 0 for every n > 0, or infinity when
D < 0 for arbitrarily long prefixes (the pull never catches up). When the pull's
floor exceeds recompute's (c < 0, the usual case) this is the one positive root.
The roots use the cancellation-free form q = -(b + sign(b) sqrt(b^2 - 4ac)) / 2,
roots q / a and c / q.

Status against the measured range [n_min, n_max]:

* ``crossover``: n_min < break-even <= n_max;
* ``pull-always-wins``: break-even <= n_min (the fitted pull wins at every measured
  length; a root below n_min is reported and flagged ``extrapolated``);
* ``recompute-always-wins``: break-even > n_max (no crossing within the measured
  lengths; a finite root beyond n_max is reported and flagged ``extrapolated``) or
  infinite (reported as null).
"""

from __future__ import annotations

import numpy as np

CROSSOVER = "crossover"
PULL_ALWAYS = "pull-always-wins"
RECOMPUTE_ALWAYS = "recompute-always-wins"
STATUSES = (CROSSOVER, PULL_ALWAYS, RECOMPUTE_ALWAYS)


def break_even_tokens(recompute: np.ndarray, pull: np.ndarray) -> np.ndarray:
    """Break-even in tokens for physical coefficients (..., 3) of each leg; inf where the pull never wins."""
    recompute = np.asarray(recompute, dtype=float)
    pull = np.asarray(pull, dtype=float)
    a = (recompute[..., 2] - pull[..., 2]) / 1e6
    b = (recompute[..., 1] - pull[..., 1]) / 1e3
    c = recompute[..., 0] - pull[..., 0]
    a, b, c = np.broadcast_arrays(a, b, c)
    out = np.full(a.shape, np.inf)

    # Linear difference: one root, or none.
    lin = a == 0
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(lin & (b > 0), np.maximum(-c / np.where(b > 0, b, 1.0), 0.0), out)
    out = np.where(lin & (b == 0) & (c >= 0), 0.0, out)

    # Convex difference: the pull wins beyond the larger root (or everywhere without real roots).
    quad = a > 0
    disc = b * b - 4 * a * c
    out = np.where(quad & (disc <= 0), 0.0, out)
    real = quad & (disc > 0)
    sqrt_disc = np.sqrt(np.where(real, disc, 0.0))
    q = -0.5 * (b + np.where(b >= 0, 1.0, -1.0) * sqrt_disc)
    with np.errstate(divide="ignore", invalid="ignore"):
        r1 = np.where(real, q / np.where(a > 0, a, 1.0), -np.inf)
        r2 = np.where(real & (q != 0), c / np.where(q != 0, q, 1.0), -np.inf)
    out = np.where(real, np.maximum(np.maximum(r1, r2), 0.0), out)
    # a < 0 (a pull more convex than recompute): D -> -inf, the pull never keeps winning: stays inf.
    return out


def classify(break_even: float, n_min: float, n_max: float) -> tuple[str, bool]:
    """(status, extrapolated) of a break-even against the measured lengths."""
    if not np.isfinite(break_even):
        return RECOMPUTE_ALWAYS, False
    if break_even <= n_min:
        return PULL_ALWAYS, break_even < n_min
    if break_even <= n_max:
        return CROSSOVER, False
    return RECOMPUTE_ALWAYS, True


def classify_many(break_even: np.ndarray, n_min: float, n_max: float) -> np.ndarray:
    """Status strings for an array of break-evens (vectorised :func:`classify`)."""
    return np.where(~np.isfinite(break_even) | (break_even > n_max), RECOMPUTE_ALWAYS,
                    np.where(break_even <= n_min, PULL_ALWAYS, CROSSOVER))


def status_warning(status: str, break_even: float, extrapolated: bool, n_min: int, n_max: int) -> str | None:
    """Advice for a break-even outside the measured lengths: which way to extend the sweep."""
    if status == PULL_ALWAYS:
        if break_even > 0:
            return (f"the pull won at every measured length; the fitted curves cross at {break_even:.0f} tokens, "
                    f"below the shortest measured length {n_min}: the break-even is extrapolated; "
                    f"extend the sweep to shorter prefixes (e.g. {max(n_min // 8, 1)}-{n_min} tokens) to locate it")
        return (f"the fitted pull is faster than recompute at every length: no crossing above 0 tokens; "
                f"the shortest measured length is {n_min}: extend the sweep to shorter prefixes to confirm")
    if status == RECOMPUTE_ALWAYS:
        if extrapolated:
            return (f"recompute won at every measured length; the fitted curves cross at {break_even:.0f} tokens, "
                    f"beyond the longest measured length {n_max}: the break-even is extrapolated; "
                    f"extend the sweep to longer prefixes (up to about {int(min(2 * break_even, 8 * n_max))} tokens)")
        return ("the fitted pull never catches up with recompute: no break-even at any length; "
                "check the transport (was the pull moving bytes?) before extending the sweep")
    return None


def interval(samples: np.ndarray, confidence: float) -> tuple[float, float]:
    """Percentile interval of samples that may contain inf (no break-even); bounds may be inf.

    Uses the inverted empirical CDF (no interpolation), so an inf sample never makes a
    finite bound NaN.
    """
    ordered = np.sort(np.asarray(samples, dtype=float))
    tail = (1.0 - confidence) / 2.0
    low = np.quantile(ordered, tail, method="inverted_cdf")
    high = np.quantile(ordered, 1.0 - tail, method="inverted_cdf")
    return float(low), float(high)
