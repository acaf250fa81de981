"""Drift against the calibration: each pod's production pull and prefill costs against fit.json's ``engine_side``.

Three checks, one per pod that exposes the leg and one fleet-wide (``pod`` null):

- ``pull_cost_drift``: the pod's transfer time per pulled token against the calibration's.
  Both are the engines' own figures (the wire's share), never the TTFT slope;
- ``prefill_cost_drift``: the pod's prefill time per computed token against the calibration's;
  ``unknown`` when the window's queue p90 is above :data:`QUEUE_P90_IDLE` (a queued request's
  prefill time holds other requests' compute) unless the fit is a loaded calibration (it has
  a cost model), and on P/D decode pods (their figure is missing, kvcal.observe.costs);
- ``pull_failures``: the failure rate against :data:`FAILURE_BOUND`.

**Tolerances from the counts.** A cost is ``outside`` when production over calibration lies
beyond ``1 + tol`` either way (a ratio: a halving counts like a doubling), with

    tol = FLOOR + Z x CV x sqrt(1 / n_production + 1 / n_calibration)

``n`` the pulls (NIXL transfers per rank, P2P-tier chunks) or prefilled requests the window
counted and the probes the calibration's median rests on; ``CV`` the spread of one event's
per-token cost (the CPU pair's probes: transfer times have a heavy tail, about 1.5 as a CV
and 0.9 in log terms; prefill about 0.35, docs/observe.md); ``FLOOR`` what differs between the two
figures even when nothing changed: the calibration's median over single probes against
production's sum over sum (1.09 against 1.30 us a token on the CPU pair's own probes) and the
prompts' length mix (a CPU prefill costs 30 us a token at 1,024 tokens and 65 at 8,128).
A failure rate is ``outside`` when the count of failures is improbable at the bound (one-sided
binomial test, p below :data:`FAILURE_ALPHA`): one failure in ten pulls is not yet a failing link
(p 0.096), two are (0.004), and so are 5 in 100 (0.003).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import stats

from kvcal.fit_record import FitResult
from kvcal.observe.costs import PodCosts
from kvcal.observe.result import Check, Figures, Observed
from kvcal.records_engine import EngineCost

FLOOR = 0.25
Z = 2.0
CV = {"pull_cost_drift": 0.8, "prefill_cost_drift": 0.4}
FAILURE_BOUND = 0.01
FAILURE_ALPHA = 0.01
QUEUE_P90_IDLE = 1.0
LEGS = {"pull_cost_drift": ("pull_ms_per_token", "pull"), "prefill_cost_drift": ("prefill_ms_per_token", "prefill")}
NO_ENGINE_SIDE = (
    "the fit records no engine-side {leg} cost (a fit.json from before kvcal recorded it, a probe CSV or a Job "
    "log, or engines that do not export it): run kvcal fit on the run folder again, or kvcal sweep"
)


@dataclass(frozen=True)
class Subject:
    """One pod's (or the fleet's) figures and counts, as the checks read them."""

    pod: str | None
    figures: Figures
    costs: PodCosts


def tolerance(check: str, n_production: float, n_calibration: int) -> float:
    """The relative tolerance of a cost check (module docstring)."""
    return FLOOR + Z * CV[check] * math.sqrt(1.0 / max(n_production, 1.0) + 1.0 / max(n_calibration, 1))


def _unknown(name: str, subject: Subject, observed: Observed, predicted, tolerance: str, why: str) -> Check:
    return Check(
        name=name,
        pod=subject.pod,
        observed=observed.value,
        predicted=predicted,
        tolerance=tolerance,
        verdict="unknown",
        reason=why,
    )


def _where(subject: Subject) -> str:
    return f"pod {subject.pod}" if subject.pod else "the fleet"


def cost_check(name: str, subject: Subject, calibrated: EngineCost | None, *, busy: str | None) -> Check:
    """``pull_cost_drift`` or ``prefill_cost_drift`` of one subject against the calibration's engine side."""
    figure, leg = LEGS[name]
    observed: Observed = getattr(subject.figures, figure)
    if calibrated is None:
        return _unknown(name, subject, observed, None, "none", NO_ENGINE_SIDE.format(leg=leg))
    predicted = [calibrated.value, calibrated.value]
    if observed.value is None:
        stated = f"{FLOOR} + {Z:g} x {CV[name]} x sqrt(1/n + 1/{calibrated.samples}), n the window's {leg}s"
        return _unknown(name, subject, observed, predicted, stated, observed.missing or "not observed")
    tol = tolerance(name, observed.samples, calibrated.samples)
    stated = (
        f"x{1 + tol:.3g} either way: {FLOOR} + {Z:g} x {CV[name]} x sqrt(1/{observed.samples} "
        f"{'pulls' if leg == 'pull' else 'prefills'} + 1/{calibrated.samples} calibration probes)"
    )
    if busy is not None:
        return _unknown(name, subject, observed, predicted, stated, busy)
    if observed.value <= 0 or calibrated.value <= 0:
        return _unknown(name, subject, observed, predicted, stated, f"a {leg} cost of 0 ms a token cannot be compared")
    ratio = observed.value / calibrated.value
    inside = abs(math.log(ratio)) <= math.log1p(tol)
    return Check(
        name=name,
        pod=subject.pod,
        observed=observed.value,
        predicted=predicted,
        tolerance=stated,
        verdict="ok" if inside else "outside",
        reason=f"{_where(subject)}: the {leg} costs {observed.value:.4g} ms a token against the calibration's "
        f"{calibrated.value:.4g} (x{ratio:.3g})",
    )


def failure_p(failed: float, attempted: float, bound: float = FAILURE_BOUND) -> float:
    """P(at least ``failed`` failures in ``attempted`` pulls) were the true rate ``bound``: the binomial test."""
    k, n = int(round(failed)), int(round(attempted))
    if k <= 0 or n <= 0:
        return 1.0
    return float(stats.binom.sf(k - 1, n, bound))


def failure_check(subject: Subject) -> Check:
    observed = subject.figures.pull_failure_rate
    stated = f"above {FAILURE_BOUND:.0%} beyond the counts' noise (one-sided binomial test, p < {FAILURE_ALPHA:g})"
    sums = subject.costs.sums.get("pull_failure_rate")
    if observed.value is None or sums is None:
        return _unknown("pull_failures", subject, observed, None, stated, observed.missing or "not observed")
    failed, attempted, _ = sums
    p_value = failure_p(failed, attempted)
    return Check(
        name="pull_failures",
        pod=subject.pod,
        observed=observed.value,
        predicted=[0.0, FAILURE_BOUND],
        tolerance=stated,
        verdict="outside" if p_value < FAILURE_ALPHA else "ok",
        reason=f"{_where(subject)}: {failed:,.0f} of {attempted:,.0f} pulls failed ({observed.value:.2%}; "
        f"p = {p_value:.2g} at a {FAILURE_BOUND:.0%} rate)",
    )


def busy_reason(fit: FitResult, queue_p90: Observed) -> str | None:
    """Why the prefill check cannot be judged on this window, or None."""
    if fit.cost_model is not None or queue_p90.value is None or queue_p90.value <= QUEUE_P90_IDLE:
        return None
    return (
        f"the window's queue p90 is {queue_p90.value:.3g} (above {QUEUE_P90_IDLE:g}): a queued request's prefill "
        "time holds other requests' compute, and the fit is an idle calibration (no cost model)"
    )


def drift_checks(fit: FitResult, subjects: list[Subject], queue_p90: Observed) -> list[Check]:
    """Each pod's checks for the legs it exposes, then the fleet's (the subject whose pod is None)."""
    side = fit.engine_side
    busy = busy_reason(fit, queue_p90)
    out = []
    for subject in subjects:
        exposes_pull = subject.pod is None or subject.costs.kind is not None
        exposes_prefill = subject.pod is None or subject.costs.prefill_exposed
        if exposes_pull:
            out.append(cost_check("pull_cost_drift", subject, side.pull_ms_per_token if side else None, busy=None))
        if exposes_prefill:
            calibrated = side.prefill_ms_per_token if side else None
            out.append(cost_check("prefill_cost_drift", subject, calibrated, busy=busy))
        if exposes_pull:
            out.append(failure_check(subject))
    return out


def remeasure(checks: list[Check]) -> list[str]:
    """What to measure again for each drift check outside: the pod, the leg, how far it moved."""
    out = []
    for check in checks:
        if check.verdict != "outside" or check.name not in (*LEGS, "pull_failures"):
            continue
        who = f"pod {check.pod}" if check.pod else "the fleet"
        if check.name == "pull_failures":
            out.append(
                f"{check.reason}: {who}'s transport is failing pulls (vLLM's kv_load_failure_policy fails or "
                "recomputes them); mend the link or the peer, then run kvcal sweep on a pair of this fleet"
            )
            continue
        leg = LEGS[check.name][1]
        what = (
            "its link or transport changed: run kvcal sweep on a producer/consumer pair whose link is "
            f"{who}'s (the pulling side)"
            if leg == "pull"
            else "its compute changed (engine flags, driver, clocks, a co-tenant): run kvcal sweep on a pair "
            f"of {who}'s kind"
        )
        out.append(
            f"{check.reason}, outside {check.tolerance.split(':')[0]}: {what}, then kvcal fit; kvcal observe "
            "--propose gives the threshold these costs imply meanwhile"
        )
    return out
