"""The cost model's intervals: a stratified bootstrap of the requests, each resample paired with an idle-curve one.

Requests are redrawn within their stratum (the design cell refined by the measured
class), so a resample keeps every class's count; the samples are then widened by
sqrt(n/(n - strata)) and by t_df/z for the weakest measured class (the method is in
:mod:`kvcal.fit.costmodel`'s docstring).
"""

from __future__ import annotations

import math

import numpy as np

from kvcal.fit.bootstrap import CHUNK_ELEMENTS, t_expansion
from kvcal.fit.costmodel_inputs import IdleCurves, LoadedProbes
from kvcal.records.fit import FitSettings

OWN_SCALE_MIN = 4  # requests a measured class needs for a noise scale of its own


def request_offsets(data: LoadedProbes, rec: np.ndarray, pull: np.ndarray) -> np.ndarray:
    """R(uncached) + pulled*T*delta in ms for coefficient rows rec, pull ((3,) or (B, 3)) -> (N,) or (B, N)."""
    rec, pull = np.atleast_2d(rec), np.atleast_2d(pull)
    u, d = data.uncached[None, :], data.delta[None, :]
    pulled_ms = (pull[:, 1:2] * d / 1e3 + pull[:, 2:3] * d**2 / 1e6) * data.pulled
    return rec[:, 1:2] * u / 1e3 + rec[:, 2:3] * u**2 / 1e6 + pulled_ms


def solve(gram: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """The normal equations' solution, for one system or a stack of them."""
    return np.linalg.solve(gram, rhs[..., None])[..., 0]


def measured_class(data: LoadedProbes, bs: np.ndarray, bc: np.ndarray) -> np.ndarray:
    """Each request's class: pulled x busy source x busy computing pod, as 0-7."""
    return data.pulled.astype(int) * 4 + bs.astype(int) * 2 + bc.astype(int)


def widened_samples(
    data: LoadedProbes,
    idle: IdleCurves,
    xs: np.ndarray,
    w: np.ndarray,
    beta: np.ndarray,
    bs: np.ndarray,
    bc: np.ndarray,
    settings: FitSettings,
) -> np.ndarray | None:
    """(B, p) samples of the fitted constants ``beta``, widened; None at 0 resamples."""
    if settings.n_resamples == 0:
        return None
    # Strata: the given cells refined by the measured class (a resample keeps every class's count).
    cls = data.stratum * 4 + bs.astype(np.int64) * 2 + bc.astype(np.int64)
    strata = [np.flatnonzero(cls == c) for c in np.unique(cls)]
    df = len(data) - len(strata)
    samples = _bootstrap(data, idle, xs, w, strata, settings.n_resamples, settings.seed)
    # Redrawing m requests from a stratum of m understates the variance of their mean by
    # (m - 1)/m; n/(n - strata) undoes that on average (1 for large strata). t/z widens for
    # the df of the weakest measured class, whose noise scale the weights rest on.
    klass = measured_class(data, bs, bc)
    own = [k for k in np.unique(klass) if (klass == k).sum() >= OWN_SCALE_MIN]  # the others use the pooled scale
    class_df = min([int((klass == k).sum()) - len(np.unique(cls[klass == k])) for k in own] or [df])
    factor = t_expansion(max(class_df, 1), settings.confidence) * math.sqrt(len(data) / max(df, 1))
    return beta + factor * (samples - beta)


def _bootstrap(
    data: LoadedProbes,
    idle: IdleCurves,
    xs: np.ndarray,
    w: np.ndarray,
    strata: list[np.ndarray],
    n_resamples: int,
    seed: int,
) -> np.ndarray:
    """(B, p) coefficient samples: stratified redraws of the requests, each with one idle-curve resample.

    Drawn and solved a slice of resamples at a time, at most ``CHUNK_ELEMENTS`` resamples x requests held at
    once as in :mod:`kvcal.fit.bootstrap` (a run of 100,000 requests held four 1.6 GB arrays at 2,000
    resamples); up to CHUNK_ELEMENTS / B requests there is one slice, and the samples are those drawn whole."""
    rng = np.random.default_rng([seed, 1414])
    step = max(1, CHUNK_ELEMENTS // len(data))
    return np.concatenate(
        [
            _bootstrap_slice(data, idle, xs, w, strata, min(step, n_resamples - start), rng)
            for start in range(0, n_resamples, step)
        ]
    )


def _bootstrap_slice(
    data: LoadedProbes,
    idle: IdleCurves,
    xs: np.ndarray,
    w: np.ndarray,
    strata: list[np.ndarray],
    n_resamples: int,
    rng: np.random.Generator,
) -> np.ndarray:
    counts = np.zeros((n_resamples, len(data)))
    rows = np.arange(n_resamples)[:, None]
    for members in strata:
        drawn = members[rng.integers(0, len(members), size=(n_resamples, len(members)))]
        np.add.at(counts, (np.broadcast_to(rows, drawn.shape), drawn), 1.0)
    pick_r = rng.integers(0, len(idle.recompute_samples), n_resamples)
    pick_p = rng.integers(0, len(idle.pull_samples), n_resamples)
    y = data.ttft_ms[None, :] - request_offsets(data, idle.recompute_samples[pick_r], idle.pull_samples[pick_p])
    counts *= w[None, :]
    gram = np.einsum("bn,nj,nk->bjk", counts, xs, xs)
    rhs = np.einsum("bn,nj,bn->bj", counts, xs, y)
    return solve(gram, rhs)
