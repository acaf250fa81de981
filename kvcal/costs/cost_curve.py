"""The cost curve every stage shares, and where two of them cross.

One leg's cost at prefix length n (tokens), in ms, with coefficients in the order of
:data:`COEFS`:

    t(n) = intercept_ms + per_token_us * n / 1e3 + per_token2_ns * n^2 / 1e6

The fit estimates these coefficients, the simulated pair draws probes from them, the
sanity checks read slopes off them and the emitted cost model is derived from them.

The break-even of two curves (recompute r, pull p) is where their difference

    D(n) = r(n) - p(n) = a n^2 + b n + c,   a = (r2 - p2) / 1e6,  b = (r1 - p1) / 1e3,  c = r0 - p0

turns non-negative for good: sup{n > 0 : D(n) < 0}, or 0 when D >= 0 for every n > 0,
or infinity when D < 0 for arbitrarily long prefixes (the pull never catches up).
When the pull's floor exceeds recompute's (c < 0, the usual case) this is the one
positive root. Roots use the cancellation-free form q = -(b + sign(b) sqrt(b^2 - 4ac)) / 2,
roots q / a and c / q (:func:`real_roots` for one polynomial, :func:`break_even_tokens`
vectorised over bootstrap resamples); ``kvcal predict`` solves its piecewise exact
curves with the same :func:`real_roots`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

COEFS = ("intercept_ms", "per_token_us", "per_token2_ns")


def cost_ms(coef: Any, n_tokens: Any) -> np.ndarray:
    """t(n) in ms for coefficients ``coef`` (3,) or (B, 3) at lengths ``n_tokens`` (G,) -> (G,) or (B, G)."""
    coef = np.asarray(coef, dtype=float)
    n = np.asarray(n_tokens, dtype=float)
    c0, c1, c2 = (coef[..., j, None] for j in range(3)) if coef.ndim > 1 else coef
    return c0 + c1 * n / 1e3 + c2 * n**2 / 1e6


def slope_us(coef: Any, n_tokens: Any) -> np.ndarray:
    """dt/dn in us per token at ``n_tokens``: the marginal cost of one more token."""
    coef = np.asarray(coef, dtype=float)
    return coef[..., 1] + 2.0 * coef[..., 2] * np.asarray(n_tokens, dtype=float) / 1e3


def real_roots(c0: float, c1: float, c2: float) -> list[float]:
    """Real roots of c2 n^2 + c1 n + c0, sorted (cancellation-free; [] when none)."""
    if abs(c2) < 1e-300:
        return [-c0 / c1] if c1 != 0 else []
    disc = c1 * c1 - 4 * c2 * c0
    if disc < 0:
        return []
    q = -0.5 * (c1 + math.copysign(math.sqrt(disc), c1))
    roots = [q / c2]
    if q != 0:
        roots.append(c0 / q)
    return sorted(roots)


def break_even_tokens(recompute: np.ndarray | Sequence[float], pull: np.ndarray | Sequence[float]) -> np.ndarray:
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
