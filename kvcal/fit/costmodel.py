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

import numpy as np

from kvcal.errors import InputError
from kvcal.fit.breakeven import interval
from kvcal.fit.costmodel_bootstrap import OWN_SCALE_MIN, measured_class, request_offsets, solve, widened_samples
from kvcal.fit.costmodel_inputs import IdleCurves, LoadedProbes
from kvcal.records.fit import FIT_DEFAULTS, FitSettings
from kvcal.records.fit_costmodel import CostModelDiagnostics, CostModelFit, Estimate
from kvcal.settings.sweep_groups import DEFAULT_BUSY_QUEUE_THRESHOLD

log = logging.getLogger(__name__)

COLUMNS = ("base_ms", "busy_computing_ms", "transferFixedMs", "sourceWaitMs", "requeueMs")
WIDE_MS = 250.0  # the recipe's warning: an interval wider than this does not pin a constant down
FEW_BUSY_SHARE = 0.1
CONDITION_CAP = 1e12
UNSUPPORTED = {
    "busy_computing_ms": "no request met a busy computing pod",
    "transferFixedMs": "no request was pulled",
    "sourceWaitMs": "no pull met a busy source",
    "requeueMs": "no pull met a busy computing pod",
}


def _design(pulled: np.ndarray, bs: np.ndarray, bc: np.ndarray) -> np.ndarray:
    p = pulled.astype(float)
    return np.stack([np.ones_like(p), bc, p, p * bs, p * bc], axis=1)


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
        notes.append(
            f"every pull moved the same {int(sizes[0])} tokens: F cannot be told apart from T*delta "
            f"(condition of the design with T free: {cond:.3g}); T is held at the idle slope, so F carries "
            "any error in T; measure pulls of several sizes (a designed sweep does)"
        )
    for share, name in (
        (diag.busy_source_pull_share, "a busy source (S)"),
        (diag.busy_computing_pull_share, "a busy computing pod (Q)"),
    ):
        if share is not None and 0 < share < FEW_BUSY_SHARE:
            notes.append(
                f"only {share:.0%} of pulls met {name}: that constant rests on few requests; "
                "a designed sweep (--load-states) balances the states"
            )
    return diag, notes


def fit_cost_model(
    data: LoadedProbes,
    idle: IdleCurves,
    *,
    threshold: int = DEFAULT_BUSY_QUEUE_THRESHOLD,
    settings: FitSettings = FIT_DEFAULTS,
) -> CostModelFit:
    """Fit base, q, F, S, Q with P and T from ``idle``; bootstrap every constant (``settings``: the fit's)."""
    if threshold < 1:
        raise InputError(f"--busy-queue-threshold must be at least 1, got {threshold}")
    if len(data) == 0:
        raise InputError("no requests with measured queues to fit the cost model to")
    bs = (data.source_waiting >= threshold).astype(float)
    bc = (data.computing_waiting >= threshold).astype(float)
    x = _design(data.pulled, bs, bc)
    support = np.array([np.any(x[:, j] != 0) for j in range(x.shape[1])])
    diag, warnings = diagnostics(data, bs, bc)
    warnings += [
        f"{name} cannot be separated: {UNSUPPORTED.get(name, 'no data')}; reported as 0 with no interval"
        for j, name in enumerate(COLUMNS)
        if not support[j]
    ]
    xs = x[:, support]
    if len(data) <= xs.shape[1]:
        raise InputError(f"{len(data)} requests cannot fit {xs.shape[1]} cost-model constants; measure more")
    offset = request_offsets(data, idle.recompute, idle.pull)[0]
    y = data.ttft_ms - offset
    beta = np.linalg.lstsq(xs, y, rcond=None)[0]
    w = _weights(data, xs, support, beta, offset, y, bs, bc)
    gram = xs.T @ (w[:, None] * xs)
    if np.linalg.matrix_rank(gram) < xs.shape[1]:
        raise InputError("the cost-model design is singular (the busy classes coincide); measure more load states")
    beta = solve(gram, xs.T @ (w * y))
    samples = widened_samples(data, idle, xs, w, beta, bs, bc, settings)
    estimates = _estimates(beta, support, samples, settings.confidence)
    warnings += _interval_warnings(estimates, settings.confidence)
    if data.n_dropped:
        warnings.append(f"{data.n_dropped} request(s) without measured queues left out of the cost model")
    p_point, t_point, p_samples, t_samples = _per_token(idle)
    log.info(
        "cost model (%s, %d requests, threshold %d): F %.4g, S %.4g, Q %.4g ms",
        data.design,
        len(data),
        threshold,
        estimates["transferFixedMs"].value,
        estimates["sourceWaitMs"].value,
        estimates["requeueMs"].value,
    )
    return CostModelFit(
        transferFixedMs=estimates["transferFixedMs"],
        sourceWaitMs=estimates["sourceWaitMs"],
        requeueMs=estimates["requeueMs"],
        prefillMicrosecondsPerToken=_estimate(p_point, p_samples, settings.confidence),
        transferMicrosecondsPerToken=_estimate(t_point, t_samples, settings.confidence),
        busyQueueThreshold=int(threshold),
        base_ms=estimates["base_ms"],
        busy_computing_ms=estimates["busy_computing_ms"],
        design=data.design,
        confidence=settings.confidence,
        n_requests=len(data),
        n_resamples=settings.n_resamples,
        diagnostics=diag,
        warnings=warnings,
    )


def _estimates(
    beta: np.ndarray, support: np.ndarray, samples: np.ndarray | None, confidence: float
) -> dict[str, Estimate]:
    """Each constant with its interval; one the data never exercise is 0 with none."""
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
    return estimates


def _interval_warnings(estimates: dict[str, Estimate], confidence: float) -> list[str]:
    """The pull's constants whose interval pins nothing down, or does not tell them from 0."""
    warnings = []
    for name in ("transferFixedMs", "sourceWaitMs", "requeueMs"):
        ci = estimates[name].ci
        if ci is None:
            continue
        if ci[1] - ci[0] > WIDE_MS:
            warnings.append(
                f"{name}: the {confidence:.0%} interval {ci[0]:.0f} to {ci[1]:.0f} ms is wider than "
                f"{WIDE_MS:.0f} ms: not determined; add reps or load states"
            )
        elif name != "transferFixedMs" and ci[0] <= 0 <= ci[1]:
            warnings.append(
                f"{name}: the {confidence:.0%} interval {ci[0]:.1f} to {ci[1]:.1f} ms includes 0: "
                "not distinguished from noise at this sample size"
            )
    return warnings


def _weights(
    data: LoadedProbes,
    xs: np.ndarray,
    support: np.ndarray,
    beta: np.ndarray,
    offset: np.ndarray,
    y: np.ndarray,
    bs: np.ndarray,
    bc: np.ndarray,
) -> np.ndarray:
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
    cls = measured_class(data, bs, bc)
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
    return (
        float(p),
        float(t),
        idle.recompute_samples[:, 1] + idle.recompute_samples[:, 2] * n / 1e3,
        idle.pull_samples[:, 1] + idle.pull_samples[:, 2] * n / 1e3,
    )


def _estimate(point: float, samples: np.ndarray, confidence: float) -> Estimate:
    if len(samples) < 2:
        return Estimate(value=_r(point), ci=None)
    low, high = interval(samples, confidence)
    return Estimate(value=_r(point), ci=[_r(min(low, point)), _r(max(high, point))])


def _r(value: float) -> float:
    return float(f"{float(value):.6g}")
