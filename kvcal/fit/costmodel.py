"""The router's ``costModel`` under load: F, S, Q (and q, base) with bootstrap intervals.

The llm-d recipe's model of one request's TTFT (ms), fitted here to either kvcal's
designed loaded sweep or the recipe's observational production data
(:mod:`kvcal.fit.observational`):

    ttft = base + R(uncached) + q*busy(c) + pulled*(F + S*busy(s) + Q*busy(c) + T*delta)

* ``R(u) = r1*u/1e3 + r2*u^2/1e6`` is the idle recompute curve without its intercept
  (``P*u`` when recompute is affine, as in the recipe), ``T`` the idle pull curve's
  slope (us/token): both come from the idle fit and are held fixed, as the recipe
  holds T; their bootstrap samples are carried into this fit's bootstrap, so their
  uncertainty reaches F, S and Q;
* ``busy(x)`` = 1 when pod x's *measured* waiting queue (``vllm:num_requests_waiting``
  just before the request) is >= ``busyQueueThreshold``: the intent of the load state
  does not enter;
* base, q, F, S, Q are fitted by weighted least squares on ``y = ttft - R(uncached) -
  pulled*T*delta`` with weights ``1/ttft_hat^2`` (TTFT noise is roughly a constant
  fraction of TTFT; an OLS first pass gives ttft_hat). F is therefore the pull's fixed
  cost *above the request's base*, the value the router needs beside P = the
  recompute slope: the router pulls when ``delta*(P - T) > F + S*busy(s) + Q*busy(c)``
  (plus its fleetWeight term).

P, emitted as one number, is the recompute curve's slope above its intercept at the
evaluation length n_e (the idle break-even, else the shortest measured length):
``P = r1 + r2*n_e/1e3``, so the router's idle crossover ``F/(P - T)`` falls where the
fitted curves cross.

Intervals: a stratified bootstrap (requests redrawn within their stratum: measured
class x leg x length for a designed run, measured class x pulled for observational
data), each resample paired with one idle-curve resample; percentile intervals at the
fit's confidence, widened by sqrt(n/(n - strata)) (a redraw of m from m understates a
mean's variance by (m-1)/m) and by t_df/z as in :mod:`kvcal.fit.bootstrap`, df that of
the measured class with the fewest residual degrees of freedom. A constant whose
column the data never exercise (no pull with a busy source, say) cannot be fitted: it
is reported as 0 with no interval and a warning.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

from kvcal.errors import InputError
from kvcal.fit.bootstrap import CHUNK_ELEMENTS, t_expansion
from kvcal.fit.breakeven import interval
from kvcal.fit_record import FIT_DEFAULTS, FitResult
from kvcal.records import ProbeRecord
from kvcal.records_costmodel import CostModelDiagnostics, CostModelFit, Estimate
from kvcal.run_manifest import RunManifest
from kvcal.runfolder import probe_counts_as_idle

log = logging.getLogger(__name__)

COLUMNS = ("base_ms", "busy_computing_ms", "transferFixedMs", "sourceWaitMs", "requeueMs")
WIDE_MS = 250.0  # the recipe's warning: an interval wider than this does not pin a constant down
FEW_BUSY_SHARE = 0.1
CONDITION_CAP = 1e12
_COEFS = ("intercept_ms", "per_token_us", "per_token2_ns")
OWN_SCALE_MIN = 4  # requests a measured class needs for a noise scale of its own


@dataclass(frozen=True)
class LoadedProbes:
    """Requests for the cost-model fit, one entry each (arrays of equal length).

    ``stratum`` groups requests that the bootstrap redraws among (same design cell).
    Waiting queues are as measured; classification happens in :func:`fit_cost_model`.
    """

    pulled: np.ndarray  # bool
    uncached: np.ndarray  # tokens prefilled by the computing pod
    delta: np.ndarray  # tokens pulled (0 where not pulled)
    ttft_ms: np.ndarray
    source_waiting: np.ndarray  # int
    computing_waiting: np.ndarray  # int
    stratum: np.ndarray  # int labels
    design: str  # "designed" | "observational"
    n_dropped: int = 0  # requests left out (unknown queues)
    threshold: int = 1  # the busy threshold the data were taken with (a designed run's), the fit's default

    def __len__(self) -> int:
        return len(self.ttft_ms)


@dataclass(frozen=True)
class IdleCurves:
    """The idle curves the cost model holds fixed: point coefficients and bootstrap samples ((B, 3) each)."""

    recompute: np.ndarray  # intercept_ms, per_token_us, per_token2_ns
    pull: np.ndarray
    recompute_samples: np.ndarray
    pull_samples: np.ndarray
    n_eval: float  # tokens at which P (a secant slope) is evaluated


def split_loaded(records: list[ProbeRecord], manifest: RunManifest) -> tuple[list[ProbeRecord], LoadedProbes | None]:
    """A run's records for the idle curves (asked and measured idle), and its loaded probes (None: an idle run)."""
    loaded = from_run_records(records, manifest.settings.load.busy_queue_threshold)
    if loaded is None:
        return records, None
    idle = [r for r in records if probe_counts_as_idle(r, loaded.threshold)]
    if not any(r.valid and not r.off_curve for r in idle):
        raise InputError(f"{manifest.name}: no valid probe measured idle: the idle curves (P, T) need the idle state; "
                         "sweep with --load-states including idle")
    return idle, loaded


def from_run_records(records: list[ProbeRecord], threshold: int = 1) -> LoadedProbes | None:
    """The designed experiment's probes (the last valid attempt of each probe id); None for an idle-only run."""
    chosen: dict[str, ProbeRecord] = {}
    for r in records:
        if r.valid and not r.off_curve and r.ttft_ms is not None and math.isfinite(r.ttft_ms) and r.ttft_ms > 0:
            chosen[r.probe_id] = r
    rows = list(chosen.values())
    if not any(r.load_state not in (None, "idle") for r in rows):
        return None
    known = [r for r in rows if r.source_waiting is not None and r.computing_waiting is not None]
    pulled = np.array([r.leg.value == "pull" for r in known])
    n = np.array([r.prefix_tokens for r in known], dtype=float)
    sw = np.array([r.source_waiting for r in known], dtype=np.int64)
    cw = np.array([r.computing_waiting for r in known], dtype=np.int64)
    keys = [(r.leg.value, r.prefix_tokens, r.source_waiting, r.computing_waiting) for r in known]
    # Strata are refined by the measured class later (fit_cost_model); here: leg x length.
    labels = {k: i for i, k in enumerate(sorted({k[:2] for k in keys}))}
    stratum = np.array([labels[k[:2]] for k in keys], dtype=np.int64)
    return LoadedProbes(pulled=pulled, uncached=np.where(pulled, 0.0, n), delta=np.where(pulled, n, 0.0),
                        ttft_ms=np.array([r.ttft_ms for r in known], dtype=float), source_waiting=sw,
                        computing_waiting=cw, stratum=stratum, design="designed", n_dropped=len(rows) - len(known),
                        threshold=threshold)


def coef_samples(fit: FitResult, leg: str) -> np.ndarray | None:
    """A leg's stored bootstrap coefficient samples, (B, 3) intercept_ms, per_token_us, per_token2_ns, finite rows
    only; None if none stored."""
    stored = fit.bootstrap.leg_samples(leg)
    if not isinstance(stored, dict) or not all(isinstance(stored.get(k), list) and stored[k] for k in _COEFS):
        return None
    cols = [np.asarray([math.nan if v is None else v for v in stored[k]], dtype=float) for k in _COEFS]
    if len({len(c) for c in cols}) != 1:
        return None
    samples = np.stack(cols, axis=1)
    samples = samples[np.all(np.isfinite(samples), axis=1)]
    return samples if len(samples) else None


def idle_curves(fit: FitResult) -> IdleCurves:
    """Point coefficients and bootstrap samples of a fit's idle curves (samples as stored in fit.json)."""
    def coef(curve) -> np.ndarray:
        return np.array([curve.intercept_ms, curve.per_token_us, curve.per_token2_ns], dtype=float)

    def samples(name: str, point: np.ndarray) -> np.ndarray:
        stored = coef_samples(fit, name)
        return point[None, :] if stored is None else stored

    rec, pull = coef(fit.recompute), coef(fit.pull)
    if fit.status == "crossover" and fit.break_even_tokens:
        n_eval = float(fit.break_even_tokens)
    else:
        n_eval = float(fit.measured_range[0]) if fit.measured_range else 1.0
    return IdleCurves(rec, pull, samples("recompute", rec), samples("pull", pull), n_eval)


def _offsets(data: LoadedProbes, rec: np.ndarray, pull: np.ndarray) -> np.ndarray:
    """R(uncached) + pulled*T*delta in ms for coefficient rows rec, pull ((3,) or (B, 3)) -> (N,) or (B, N)."""
    rec, pull = np.atleast_2d(rec), np.atleast_2d(pull)
    u, d = data.uncached[None, :], data.delta[None, :]
    out = rec[:, 1:2] * u / 1e3 + rec[:, 2:3] * u**2 / 1e6 + (pull[:, 1:2] * d / 1e3 + pull[:, 2:3] * d**2 / 1e6) * data.pulled
    return out


def _design(pulled: np.ndarray, bs: np.ndarray, bc: np.ndarray) -> np.ndarray:
    p = pulled.astype(float)
    return np.stack([np.ones_like(p), bc, p, p * bs, p * bc], axis=1)


def _solve(gram: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    return np.linalg.solve(gram, rhs[..., None])[..., 0]


def diagnostics(data: LoadedProbes, bs: np.ndarray, bc: np.ndarray) -> tuple[CostModelDiagnostics, list[str]]:
    """How well the data separate F from T, and S, Q from noise; with advice."""
    pulled = data.pulled
    n_pulls = int(pulled.sum())
    sizes = np.unique(data.delta[pulled]) if n_pulls else np.array([])
    # The design with T free as well: one pull size makes pulled*delta a multiple of pulled.
    x = np.column_stack([_design(pulled, bs, bc), data.uncached, data.delta * pulled])
    norms = np.linalg.norm(x, axis=0)
    used = norms > 0
    sv = np.linalg.svd(x[:, used] / norms[used], compute_uv=False) if used.any() else np.array([1.0])
    cond = float(sv[0] / sv[-1]) if sv[-1] > 0 else math.inf
    cond = min(cond, CONDITION_CAP)
    counts: dict[str, int] = {}
    names = {(0, 0): "idle", (1, 0): "source-busy", (0, 1): "computing-busy", (1, 1): "both-busy"}
    for is_pull, s, c in zip(pulled, bs.astype(int), bc.astype(int)):
        key = f"{'pull' if is_pull else 'local'}/{names[(s, c)]}"
        counts[key] = counts.get(key, 0) + 1
    diag = CostModelDiagnostics(
        condition_number=float(f"{cond:.4g}"),
        n_pull_sizes=len(sizes),
        busy_source_pull_share=float(bs[pulled].mean()) if n_pulls else None,
        busy_computing_pull_share=float(bc[pulled].mean()) if n_pulls else None,
        busy_computing_share=float(bc.mean()) if len(bc) else None,
        counts=dict(sorted(counts.items())),
    )
    notes: list[str] = []
    if n_pulls and len(sizes) < 2:
        notes.append(f"every pull moved the same {int(sizes[0])} tokens: F cannot be told apart from T*delta "
                     f"(condition of the design with T free: {cond:.3g}); T is held at the idle slope, so F carries "
                     "any error in T; measure pulls of several sizes (a designed sweep does)")
    for share, name in ((diag.busy_source_pull_share, "a busy source (S)"), (diag.busy_computing_pull_share, "a busy computing pod (Q)")):
        if share is not None and 0 < share < FEW_BUSY_SHARE:
            notes.append(f"only {share:.0%} of pulls met {name}: that constant rests on few requests; "
                         "a designed sweep (--load-states) balances the states")
    return diag, notes


def fit_cost_model(data: LoadedProbes, idle: IdleCurves, *, threshold: int = 1, confidence: float = FIT_DEFAULTS.confidence,
                   seed: int = FIT_DEFAULTS.seed, n_resamples: int = FIT_DEFAULTS.n_resamples) -> CostModelFit:
    """Fit base, q, F, S, Q with P and T from ``idle``; bootstrap every constant."""
    if threshold < 1:
        raise InputError(f"--busy-queue-threshold must be at least 1, got {threshold}")
    if len(data) == 0:
        raise InputError("no requests with measured queues to fit the cost model to")
    bs = (data.source_waiting >= threshold).astype(float)
    bc = (data.computing_waiting >= threshold).astype(float)
    x = _design(data.pulled, bs, bc)
    support = np.array([np.any(x[:, j] != 0) for j in range(x.shape[1])])
    diag, warnings = diagnostics(data, bs, bc)
    why = {"busy_computing_ms": "no request met a busy computing pod", "transferFixedMs": "no request was pulled",
           "sourceWaitMs": "no pull met a busy source", "requeueMs": "no pull met a busy computing pod"}
    for j, name in enumerate(COLUMNS):
        if not support[j]:
            warnings.append(f"{name} cannot be separated: {why.get(name, 'no data')}; reported as 0 with no interval")
    xs = x[:, support]
    if len(data) <= xs.shape[1]:
        raise InputError(f"{len(data)} requests cannot fit {xs.shape[1]} cost-model constants; measure more")
    offset = _offsets(data, idle.recompute, idle.pull)[0]
    y = data.ttft_ms - offset
    beta = np.linalg.lstsq(xs, y, rcond=None)[0]
    w = _weights(data, xs, support, beta, offset, y, bs, bc)
    gram = xs.T @ (w[:, None] * xs)
    if np.linalg.matrix_rank(gram) < xs.shape[1]:
        raise InputError("the cost-model design is singular (the busy classes coincide); measure more load states")
    beta = _solve(gram, xs.T @ (w * y))

    # Strata: the given cells refined by the measured class (a resample keeps every class's count).
    cls = data.stratum * 4 + bs.astype(np.int64) * 2 + bc.astype(np.int64)
    strata = [np.flatnonzero(cls == c) for c in np.unique(cls)]
    samples = None
    df = len(data) - len(strata)
    if n_resamples > 0:
        samples = _bootstrap(data, idle, xs, w, strata, n_resamples, seed)
        # Redrawing m requests from a stratum of m understates the variance of their mean by
        # (m - 1)/m; n/(n - strata) undoes that on average (1 for large strata). t/z widens for
        # the df of the weakest measured class, whose noise scale the weights rest on.
        klass = data.pulled.astype(int) * 4 + bs.astype(int) * 2 + bc.astype(int)
        own = [k for k in np.unique(klass) if (klass == k).sum() >= OWN_SCALE_MIN]  # the others use the pooled scale
        class_df = min([int((klass == k).sum()) - len(np.unique(cls[klass == k])) for k in own] or [df])
        factor = t_expansion(max(class_df, 1), confidence) * math.sqrt(len(data) / max(df, 1))
        samples = beta + factor * (samples - beta)
    full = np.zeros(len(COLUMNS))
    full[support] = beta
    estimates: dict[str, Estimate] = {}
    k = 0
    for j, name in enumerate(COLUMNS):
        ci = None
        if support[j] and samples is not None:
            low, high = interval(samples[:, k], confidence)
            ci = [_r(low), _r(high)]
        if support[j]:
            k += 1
        estimates[name] = Estimate(value=_r(full[j]), ci=ci)
    for name in ("transferFixedMs", "sourceWaitMs", "requeueMs"):
        ci = estimates[name].ci
        if ci is None:
            continue
        if ci[1] - ci[0] > WIDE_MS:
            warnings.append(f"{name}: the {confidence:.0%} interval {ci[0]:.0f} to {ci[1]:.0f} ms is wider than "
                            f"{WIDE_MS:.0f} ms: not determined; add reps or load states")
        elif name != "transferFixedMs" and ci[0] <= 0 <= ci[1]:
            warnings.append(f"{name}: the {confidence:.0%} interval {ci[0]:.1f} to {ci[1]:.1f} ms includes 0: "
                            "not distinguished from noise at this sample size")
    if data.n_dropped:
        warnings.append(f"{data.n_dropped} request(s) without measured queues left out of the cost model")
    p_point, t_point, p_samples, t_samples = _per_token(idle)
    log.info("cost model (%s, %d requests, threshold %d): F %.4g, S %.4g, Q %.4g ms", data.design, len(data), threshold,
             estimates["transferFixedMs"].value, estimates["sourceWaitMs"].value, estimates["requeueMs"].value)
    return CostModelFit(
        transferFixedMs=estimates["transferFixedMs"],
        sourceWaitMs=estimates["sourceWaitMs"],
        requeueMs=estimates["requeueMs"],
        prefillMicrosecondsPerToken=_estimate(p_point, p_samples, confidence),
        transferMicrosecondsPerToken=_estimate(t_point, t_samples, confidence),
        busyQueueThreshold=int(threshold),
        base_ms=estimates["base_ms"],
        busy_computing_ms=estimates["busy_computing_ms"],
        design=data.design,
        confidence=confidence,
        n_requests=len(data),
        n_resamples=n_resamples,
        diagnostics=diag,
        warnings=warnings,
    )


def _weights(data: LoadedProbes, xs: np.ndarray, support: np.ndarray, beta: np.ndarray, offset: np.ndarray,
             y: np.ndarray, bs: np.ndarray, bc: np.ndarray) -> np.ndarray:
    """1 / (k_c * curve_i)^2: noise proportional to the request's idle cost, with its own factor per measured class.

    curve_i (offset + base + F when pulled) is what the request would cost idle; a
    busy class may be noisier than that (queue waits vary), so each class c of
    (pulled, busy(s), busy(c)) gets its own robust scale k_c of the relative residuals
    of an OLS first pass (the pooled scale where a class has fewer than 4 requests).
    """
    full = np.zeros(len(COLUMNS))
    full[support] = beta
    floor = 0.05 * float(np.median(data.ttft_ms))
    curve = np.maximum(offset + full[0] + full[2] * data.pulled, floor)
    rel = (y - xs @ beta) / curve

    def scale(values: np.ndarray) -> float:
        return 1.4826 * float(np.median(np.abs(values - np.median(values)))) if len(values) else 0.0

    pooled = max(scale(rel), 1e-4)
    cls = data.pulled.astype(int) * 4 + bs.astype(int) * 2 + bc.astype(int)
    k = np.full(len(rel), pooled)
    for c in np.unique(cls):
        members = cls == c
        if members.sum() >= OWN_SCALE_MIN:
            k[members] = max(scale(rel[members]), 0.25 * pooled)
    return 1.0 / (k * curve) ** 2


def _per_token(idle: IdleCurves) -> tuple[float, float, np.ndarray, np.ndarray]:
    """P (recompute slope above the intercept at n_eval) and T (pull slope), us/token, with samples."""
    n = idle.n_eval
    p = idle.recompute[1] + idle.recompute[2] * n / 1e3
    t = idle.pull[1] + idle.pull[2] * n / 1e3
    return (float(p), float(t), idle.recompute_samples[:, 1] + idle.recompute_samples[:, 2] * n / 1e3,
            idle.pull_samples[:, 1] + idle.pull_samples[:, 2] * n / 1e3)


def _estimate(point: float, samples: np.ndarray, confidence: float) -> Estimate:
    if len(samples) < 2:
        return Estimate(value=_r(point), ci=None)
    low, high = interval(samples, confidence)
    return Estimate(value=_r(point), ci=[_r(min(low, point)), _r(max(high, point))])


def _bootstrap(data: LoadedProbes, idle: IdleCurves, xs: np.ndarray, w: np.ndarray, strata: list[np.ndarray],
               n_resamples: int, seed: int) -> np.ndarray:
    """(B, p) coefficient samples: stratified redraws of the requests, each with one idle-curve resample.

    Drawn and solved a slice of resamples at a time, at most ``CHUNK_ELEMENTS`` resamples x requests held at
    once as in :mod:`kvcal.fit.bootstrap` (a run of 100,000 requests held four 1.6 GB arrays at 2,000
    resamples); up to CHUNK_ELEMENTS / B requests there is one slice, and the samples are those drawn whole."""
    rng = np.random.default_rng([seed, 1414])
    step = max(1, CHUNK_ELEMENTS // len(data))
    return np.concatenate([_bootstrap_slice(data, idle, xs, w, strata, min(step, n_resamples - start), rng)
                           for start in range(0, n_resamples, step)])


def _bootstrap_slice(data: LoadedProbes, idle: IdleCurves, xs: np.ndarray, w: np.ndarray, strata: list[np.ndarray],
                     n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    counts = np.zeros((n_resamples, len(data)))
    rows = np.arange(n_resamples)[:, None]
    for members in strata:
        drawn = members[rng.integers(0, len(members), size=(n_resamples, len(members)))]
        np.add.at(counts, (np.broadcast_to(rows, drawn.shape), drawn), 1.0)
    pick_r = rng.integers(0, len(idle.recompute_samples), n_resamples)
    pick_p = rng.integers(0, len(idle.pull_samples), n_resamples)
    y = data.ttft_ms[None, :] - _offsets(data, idle.recompute_samples[pick_r], idle.pull_samples[pick_p])
    counts *= w[None, :]
    gram = np.einsum("bn,nj,nk->bjk", counts, xs, xs)
    rhs = np.einsum("bn,nj,bn->bj", counts, xs, y)
    return _solve(gram, rhs)


def _r(value: float) -> float:
    return float(f"{float(value):.6g}")
