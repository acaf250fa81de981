"""Compare two fits: has the break-even moved enough, and surely enough, to act on?

This stage owns the regression rule that ``kvcal compare`` and a CI job gate on. It
reads two fits (``fit.json`` files, run folders or probe tables), lines up what is comparable
(break-even, its interval, each curve coefficient, achieved pull bandwidth) and
decides from the fits' bootstrap distributions, not from point values alone.

Break-even test. With ``B`` the baseline's and ``C`` the current break-even (tokens),
the move is the ratio ``R = C / B``. Its distribution is estimated by drawing ``B*``
and ``C*`` independently from the two fits' bootstrap samples (the two campaigns are
independent measurements; pairing sample i with sample i would correlate fits made with
the same bootstrap seed) and taking quantiles of ``log(C*/B*)`` at the fits' confidence
(the stricter of the two). The move is *significant* when that interval excludes
``log 1 = 0``. A **regression** is a move with ``|C/B - 1| >= tolerance`` (point
estimates) that is also significant, in either direction:

* up: pulls requested between the old and the new break-even now lose latency; a
  threshold deployed below the new break-even is unsafe;
* down: the threshold now refuses pulls that would win; safe, but the savings the
  calibration exists for are lost and the number in production is no longer right.

Status changes: a current fit whose pull never wins (``recompute-always-wins``) is a
regression from any other status; the reverse is not. When both runs lack a crossover
with the same status, the break-even is not gated and only coefficients are compared.
Otherwise a side without a crossover counts at its extrapolated break-even (the fit
reports one outside the range when the curves cross there), else at
:data:`BE_FLOOR_TOKENS` (pull always wins) or :data:`BE_CEIL_TOKENS` (never wins).
Bootstrap samples follow :mod:`kvcal.fit.breakeven`: 0 (the pull won everywhere in that
resample) counts at the floor, null/inf (it never caught up) at the ceiling, so the
interval stretches toward "no break-even" instead of dropping those resamples.

Coefficients use the same scheme on the difference ``C* - B*``; they are reported,
never gated on: the break-even is the quantity production depends on.
"""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from scipy.stats import norm

from kvcal.errors import InputError
from kvcal.gate.deployed import DeployedCheck, deployed_check
from kvcal.gate.deployed import as_tokens as _as_tokens
from kvcal.gate.deployed import pair as _pair
from kvcal.gate.loaded_runs import LoadedRun
from kvcal.records.fit import CurveFit, FitResult

log = logging.getLogger(__name__)

#: A fit whose pull always wins counts as this break-even (tokens) in the ratio test.
BE_FLOOR_TOKENS = 1.0
#: A fit whose pull never wins counts as this break-even (tokens) in the ratio test.
BE_CEIL_TOKENS = 1e9
#: Independent draws used to estimate the distribution of a ratio or difference.
N_DRAWS = 4000
COEFFICIENTS = (("intercept_ms", "ms"), ("per_token_us", "us/token"), ("per_token2_ns", "ns/token^2"))


@dataclass(frozen=True)
class Row:
    """One compared quantity. ``significant`` is None when it cannot be assessed."""

    quantity: str
    unit: str
    baseline: float | None
    current: float | None
    baseline_ci: tuple[float, float] | None = None
    current_ci: tuple[float, float] | None = None
    change_rel: float | None = None
    change_ci: tuple[float, float] | None = None
    significant: bool | None = None
    note: str = ""


@dataclass(frozen=True)
class Comparison:
    """Everything ``kvcal compare`` reports; ``regression`` drives the exit code."""

    baseline: LoadedRun
    current: LoadedRun
    tolerance: float
    confidence: float
    rows: list[Row]
    regression: bool
    direction: Literal["up", "down", "none", "status"]
    verdict: str
    notes: list[str] = field(default_factory=list)
    deployed: DeployedCheck | None = None

    def failure(self, *, strict_deployed: bool = False) -> str | None:
        """Why this comparison should exit 1, or None: a regression, or (if strict) an unsafe deployed threshold."""
        if self.regression:
            return self.verdict
        if strict_deployed and self.deployed is not None and self.deployed.verdict != "safe":
            return self.deployed.message
        return None


# ---------------------------------------------------------------- comparing


def check_comparable(base: FitResult, cur: FitResult, *, force: bool) -> list[str]:
    """Refuse fits of different models or transports unless forced; return notes."""
    notes = []
    for key, why in (
        ("model", "a break-even is a property of the model's KV size and prefill cost"),
        ("transport", "pull cost depends on the transport, so the move would be the change you made"),
    ):
        a, b = getattr(base.setup, key), getattr(cur.setup, key)
        if a is not None and b is not None and a != b:
            if not force:
                raise InputError(
                    f"baseline {key} {a!r} differs from current {b!r}: {why}; pass --force to compare anyway"
                )
            notes.append(f"forced comparison across {key}s ({a} vs {b}): the move reflects that change, not drift")
    if base.block_size and cur.block_size and base.block_size != cur.block_size:
        notes.append(f"block size differs ({base.block_size} vs {cur.block_size}); thresholds move in block steps")
    return notes


def compare_runs(
    baseline: LoadedRun,
    current: LoadedRun,
    *,
    tolerance: float = 0.1,
    force: bool = False,
    deployed: tuple[int, str] | None = None,
    seed: int = 0,
) -> Comparison:
    """Compare two loaded runs; ``deployed`` is (threshold tokens, where it came from); ``tolerance`` within
    :class:`kvcal.gate.compare_settings.CompareConfig`'s bounds."""
    base, cur = baseline.fit, current.fit
    notes = check_comparable(base, cur, force=force)
    confidence = max(base.confidence, cur.confidence)
    rng = np.random.default_rng(seed)
    be_row, regression, direction, verdict, be_notes = _break_even_verdict(base, cur, tolerance, confidence, rng)
    notes += be_notes
    rows = [be_row]
    for leg in ("recompute", "pull"):
        for name, unit in COEFFICIENTS:
            rows.append(_coefficient_row(base, cur, leg, name, unit, confidence, rng))
    rows.append(_bandwidth_row(base, cur))
    if any(coefficient_samples(f, "pull", "per_token_us") is None for f in (base, cur)):
        notes.append(
            "coefficient significance approximated from the fits' intervals (a fit keeps no coefficient samples)"
        )
    check = deployed_check(base, cur, *deployed) if deployed is not None else None
    return Comparison(baseline, current, tolerance, confidence, rows, regression, direction, verdict, notes, check)


def _break_even_verdict(base: FitResult, cur: FitResult, tol: float, confidence: float, rng: np.random.Generator):
    bs, cs = base.status, cur.status
    make_row = functools.partial(
        Row,
        quantity="break-even",
        unit="tokens",
        baseline=base.break_even_tokens,
        current=cur.break_even_tokens,
        baseline_ci=_pair(base.break_even_ci),
        current_ci=_pair(cur.break_even_ci),
    )
    if cs == "recompute-always-wins" and bs != cs:
        row = make_row(note=f"status {bs} -> {cs}")
        return row, True, "status", f"REGRESSION: pull no longer wins at any measured length (was {bs})", []
    if bs == cs and bs != "crossover":
        why = (
            "pull never wins in either run"
            if bs == "recompute-always-wins"
            else "pull wins at every length in both runs"
        )
        row = make_row(note=f"no break-even in either run ({bs})")
        return row, False, "none", f"OK: {why}; no break-even to compare, coefficients compared below", []
    if bs == "recompute-always-wins":
        row = make_row(note=f"status {bs} -> {cs}")
        return (
            row,
            False,
            "none",
            "OK: pull now wins where it never did; consider enabling P2P with a new threshold",
            [],
        )

    b_point, c_point = _be_point(base), _be_point(cur)
    ratio = c_point / b_point
    moved = abs(ratio - 1.0) >= tol
    significant, change_ci, notes = _move_significance(base, cur, confidence, rng)
    status_note = ""
    if bs != cs:
        side, fit = ("baseline", base) if bs != "crossover" else ("current", cur)
        status_note = f"status {bs} -> {cs}; the {side} counted at {_be_point_text(fit)}"
    row = make_row(change_rel=ratio - 1.0, change_ci=change_ci, significant=significant, note=status_note)
    regression = moved and significant is not False
    direction = "none" if not regression else ("up" if ratio > 1 else "down")
    return row, regression, direction, _move_verdict(ratio, moved, regression, tol, confidence), notes


def _move_significance(base: FitResult, cur: FitResult, confidence: float, rng: np.random.Generator):
    """(significant, the change's interval, notes) of the break-even's ratio, from samples or the intervals."""
    b_draws, c_draws = _be_draws(base), _be_draws(cur)
    if b_draws is not None and c_draws is not None:
        log_ratio = np.log(_draw(c_draws, rng)) - np.log(_draw(b_draws, rng))
        lo, hi = _interval(log_ratio, confidence)
        significant: bool | None = lo > 0 or hi < 0
        return significant, (math.expm1(lo), math.expm1(hi)), []
    significant, change_ci = _approx_ratio_significance(base, cur, confidence)
    note = (
        "a fit lacks bootstrap samples: significance approximated from the reported intervals"
        if significant is not None
        else "a fit lacks bootstrap samples and intervals: gating on tolerance alone"
    )
    return significant, change_ci, [note]


def _move_verdict(ratio: float, moved: bool, regression: bool, tol: float, confidence: float) -> str:
    pct = f"{(ratio - 1) * 100:+.1f}%"
    if regression:
        what = (
            "pulls below the new break-even now lose latency"
            if ratio > 1
            else "the threshold now refuses pulls that would win"
        )
        return f"REGRESSION: break-even moved {pct} (tolerance {tol:.0%}, significant at {confidence:.0%}): {what}"
    if moved:
        return f"OK: break-even moved {pct}, beyond tolerance {tol:.0%} but not significant at {confidence:.0%}"
    return f"OK: break-even moved {pct}, within tolerance {tol:.0%}"


def _be_point(fit: FitResult) -> float:
    """The break-even as a number for the ratio test: the fit's own (even if extrapolated), else its status's end."""
    value = _as_tokens(fit.break_even_tokens)
    if value is None:
        value = BE_CEIL_TOKENS if fit.status == "recompute-always-wins" else BE_FLOOR_TOKENS
    return float(np.clip(value, BE_FLOOR_TOKENS, BE_CEIL_TOKENS))


def _be_point_text(fit: FitResult) -> str:
    value = _as_tokens(fit.break_even_tokens)
    if value is not None and math.isfinite(value):
        return f"its extrapolated break-even {value:.0f}"
    return f"{BE_FLOOR_TOKENS:g} token" if fit.status == "pull-always-wins" else f"{BE_CEIL_TOKENS:g} tokens"


def _be_draws(fit: FitResult) -> np.ndarray | None:
    """Bootstrap break-even samples, clipped to [floor, ceiling].

    A sample of 0 means the pull won everywhere in that resample (floor); None or inf
    means it never caught up (ceiling), as :mod:`kvcal.fit.breakeven` defines them.
    """
    samples = fit.bootstrap.break_even_samples
    if not samples:
        return None
    values = np.array([BE_CEIL_TOKENS if (v := _as_tokens(s)) is None or math.isnan(v) else v for s in samples])
    return np.clip(values, BE_FLOOR_TOKENS, BE_CEIL_TOKENS)


def _draw(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return values[rng.integers(0, len(values), size=N_DRAWS)]


def _interval(values: np.ndarray, confidence: float) -> tuple[float, float]:
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(values, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def _z(confidence: float) -> float:
    return float(norm.ppf(0.5 + confidence / 2.0))


def _approx_ratio_significance(base: FitResult, cur: FitResult, confidence: float):
    """Normal approximation in log space from the reported intervals, for fits without samples."""
    spans = []
    for fit in (base, cur):
        ci = _pair(fit.break_even_ci)
        if fit.status != "crossover" or ci is None or ci[0] <= 0:
            return None, None
        spans.append((math.log(ci[1]) - math.log(ci[0])) / (2 * _z(fit.confidence)))
    se = math.hypot(*spans)
    center = math.log(_be_point(cur)) - math.log(_be_point(base))
    lo, hi = center - _z(confidence) * se, center + _z(confidence) * se
    return bool(lo > 0 or hi < 0), (math.expm1(lo), math.expm1(hi))


def _coefficient_row(base: FitResult, cur: FitResult, leg: str, name: str, unit: str, confidence: float, rng) -> Row:
    b_curve: CurveFit = getattr(base, leg)
    c_curve: CurveFit = getattr(cur, leg)
    b, c = float(getattr(b_curve, name)), float(getattr(c_curve, name))
    change = (c - b) / abs(b) if b != 0 else None
    b_draws, c_draws = coefficient_samples(base, leg, name), coefficient_samples(cur, leg, name)
    significant, change_ci, note = None, None, ""
    if b_draws is not None and c_draws is not None:
        lo, hi = _interval(_draw(c_draws, rng) - _draw(b_draws, rng), confidence)
        significant = lo > 0 or hi < 0
        change_ci = (lo / abs(b), hi / abs(b)) if b != 0 else None
    else:
        bci, cci = _pair(b_curve.ci.get(name)), _pair(c_curve.ci.get(name))
        if bci is not None and cci is not None:
            se = math.hypot((bci[1] - bci[0]) / (2 * _z(base.confidence)), (cci[1] - cci[0]) / (2 * _z(cur.confidence)))
            lo, hi = (c - b) - _z(confidence) * se, (c - b) + _z(confidence) * se
            significant = bool(lo > 0 or hi < 0) if se > 0 else None
            change_ci = (lo / abs(b), hi / abs(b)) if b != 0 and se > 0 else None
    if b_curve.model != c_curve.model:
        note = f"model {b_curve.model} -> {c_curve.model}" + (f"; {note}" if note else "")
    return Row(
        f"{leg} {name}",
        unit,
        b,
        c,
        _pair(b_curve.ci.get(name)),
        _pair(c_curve.ci.get(name)),
        change,
        change_ci,
        significant,
        note,
    )


def coefficient_samples(fit: FitResult, leg: str, name: str) -> np.ndarray | None:
    """Bootstrap samples of one coefficient (``bootstrap.<leg>_samples[name]``), if the fit kept them."""
    values = (fit.bootstrap.leg_samples(leg) or {}).get(name)
    if values is None:
        return None
    finite = np.array([v for v in values if v is not None], dtype=float)
    return finite if len(finite) else None


def _bandwidth_row(base: FitResult, cur: FitResult) -> Row:
    b, c = base.pull_bandwidth_gbps, cur.pull_bandwidth_gbps
    if b is None or c is None:
        return Row("pull bandwidth", "GB/s", b, c, note="bytes moved unknown in a run: not compared")
    return Row("pull bandwidth", "GB/s", b, c, change_rel=(c - b) / b if b else None, note="point values; not gated")
