"""The bootstrap of a large table from per-length atoms: what a resample needs, not every row re-weighted.

A resample of one leg enters the refits only through its per-length sums S0, S1, S2
(:mod:`kvcal.fit.bootstrap`), and within one length every drawn value is treated alike
but for its own Huber weight. So the values a length can draw are reduced to at most
``ATOMS`` atoms: the length's resampled values (for the pooled scheme,
the length's mean plus its scale times the leg's pooled pure error; for the residual scheme, the fitted
value plus the scaled pooled residuals),
sorted and cut into equal-count bins, each with its mean, its mean square and its mean
point-fit weight. A resample draws the atoms' counts from a multinomial (its length's
probe count over the atoms' shares: exactly the with-replacement draw, bin by bin), runs
the same Huber IRLS on the atoms, and sums. Work and memory go with resamples x lengths
x atoms instead of resamples x probes: a million-row table (200 lengths x 2,500 reps per
leg) is 12,800 atoms a leg instead of 500,000 rows.

What it gives up: within a bin, the Huber weight is taken at the bin's mean. Bins are
narrow where it matters (64 bins over 2,500 reps: 39 neighbouring values a bin), and the
tails, where weights vary, are cut as finely as the centre. docs/method.md ("The
bootstrap of a large table") compares the intervals with the row-by-row path; the
switch (``use_atoms``) only applies where the atoms compress the rows at least
``MIN_COMPRESSION``-fold and the row-by-row path would hold more than
``ROW_PATH_ELEMENTS`` values, so every campaign a sweep produces is bootstrapped row by
row as before.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvcal.fit.curves import LegFit, solve_nnls

ATOMS = 64  # per length
MIN_COMPRESSION = 4  # rows per atom, at least, before the atoms replace the rows
ROW_PATH_ELEMENTS = 20_000_000  # resamples x probes below which the row-by-row path is kept (about 10 s a leg)
CHUNK_ELEMENTS = 4_000_000  # resamples x lengths x atoms held at once
IRLS_STEPS = 3  # as the row-by-row path


@dataclass(frozen=True)
class Atoms:
    """(K, Q) arrays: each length's atoms; padding atoms have share 0."""

    value: np.ndarray  # mean of the resampled values in the bin (ms)
    square: np.ndarray  # mean of their squares (ms^2): the sum of squares keeps the within-bin spread
    start: np.ndarray  # mean point-fit Huber weight (the IRLS starts from the drawn probes' weights)
    share: np.ndarray  # the bin's share of its length's values


def use_atoms(fit: LegFit, n_resamples: int) -> bool:
    data = fit.data
    compresses = data.n_probes >= MIN_COMPRESSION * ATOMS * len(data.lengths)
    return compresses and n_resamples * data.n_probes > ROW_PATH_ELEMENTS


def shifted_atoms(fit: LegFit, centre: np.ndarray, residuals: np.ndarray, weights: np.ndarray) -> Atoms:
    """A scheme whose value at length k is ``centre_k`` plus ``s_k`` times any of one pool of relative residuals
    (the pooled scheme: each length's mean and the leg's pure error; the residual scheme: the fitted cost and the
    model's residuals). The residuals are binned once; each length's atoms are the same bins moved and scaled."""
    data = fit.data
    c = np.asarray(centre, dtype=float)[:, None]
    s = data.scale_ms[:, None]
    mean, square, start, share = _bins(residuals, weights, min(ATOMS, len(residuals)))
    shape = (len(data.lengths), len(share))
    return Atoms(
        value=c + s * mean,
        square=c**2 + 2 * c * s * mean + s**2 * square,
        start=np.broadcast_to(start, shape).copy(),
        share=np.broadcast_to(share, shape).copy(),
    )


def _bins(values: np.ndarray, weights: np.ndarray, width: int) -> tuple[np.ndarray, ...]:
    """Equal-count bins of the sorted values: (mean, mean square, mean weight, share), padded to ``width``."""
    out = np.zeros((4, width))
    order = np.argsort(values, kind="stable")
    for q, part in enumerate(np.array_split(order, min(width, len(values)))):
        v = values[part]
        out[:, q] = v.mean(), (v**2).mean(), weights[part].mean(), len(part) / len(values)
    return tuple(out)


def atom_sums(fit: LegFit, atoms: Atoms, rng: np.random.Generator, n_resamples: int):
    """Per-length sums (S0, S1, S2) of every resample, ``CHUNK_ELEMENTS`` atoms' counts at a time."""
    counts = fit.data.counts
    share = atoms.share / atoms.share.sum(axis=1, keepdims=True)
    step = max(1, CHUNK_ELEMENTS // share.size)
    parts = []
    for start in range(0, n_resamples, step):
        size = min(step, n_resamples - start)
        drawn = rng.multinomial(counts, share, size=(size, len(counts))).astype(float)
        w = _weights(fit, atoms, drawn) * (1.0 / fit.data.scale_ms**2)[None, :, None]
        cw = drawn * w
        parts.append((cw.sum(-1), np.einsum("bkq,kq->bk", cw, atoms.value), np.einsum("bkq,kq->b", cw, atoms.square)))
    return tuple(np.concatenate(columns) for columns in zip(*parts))


def _weights(fit: LegFit, atoms: Atoms, drawn: np.ndarray) -> np.ndarray:
    """Huber IRLS on the atoms, on the leg's largest model, from the drawn probes' point-fit weights."""
    start = np.broadcast_to(atoms.start, drawn.shape)
    if fit.f_scale is None:
        return start
    data = fit.data
    x = data.basis(max(f.n_params for f in fit.fits.values()))
    v = (1.0 / data.scale_ms**2)[None, :, None]
    z = atoms.value / data.scale_ms[:, None]  # relative units, where f_scale lives
    h = start
    for _ in range(IRLS_STEPS):
        cw = drawn * h * v
        beta, _ = solve_nnls(np.einsum("bk,kj,kl->bjl", cw.sum(-1), x, x), np.einsum("bkq,kq->bk", cw, atoms.value) @ x)
        fitted_rel = (beta @ x.T) / data.scale_ms
        resid = np.maximum(np.abs(z[None, :, :] - fitted_rel[:, :, None]), 1e-300)
        h = np.minimum(1.0, fit.f_scale / resid)
    return h
