"""``kvcal observe --propose``: the threshold the production costs imply, beside the deployed one.

1. **Production against the calibration**, fleet-wide: the transfer time per pulled token
   and the prefill time per computed token over the window (:mod:`kvcal.observe.costs`),
   against fit.json's ``engine_side``. The pull moves by their difference; recompute by their
   ratio (left at 1, with a note, where the window cannot say: no prefill pod, no
   engine-side prefill in the fit, or a queue p90 above 1 on an idle calibration).
2. **The adjusted fit** (:mod:`kvcal.observe.adjust`), decided by the call emit-config
   makes, :func:`kvcal.threshold.choose.compute_threshold`, so the proposal follows whatever
   rule decides the threshold.
3. **Its interval from batch means**: the window is cut into :data:`BATCHES` sub-windows;
   each production cost is a ratio estimate over them, its standard error from the batches'
   residuals ``num_j - R den_j`` (the ratio estimator's linearisation), and the interval is
   Student's t at the fit's confidence with ``BATCHES - 1`` degrees of freedom. The threshold's
   interval is emit-config's threshold at the two corners (the pull at its low end and the
   prefill at its high end gives the low threshold, and the other way round); an end where
   no P2P is cheapest is open (null).
4. **What the move is worth**: the deployed threshold's expected regret on the adjusted fit
   (:func:`kvcal.threshold.choose.regret_model`), in % of TTFT and in ms.

Too few pulls (fewer than :data:`MIN_PULLS` in the window, or in fewer than
:data:`MIN_BATCHES_WITH_PULLS` sub-windows) or no P2P cheapest on the adjusted curves: no
proposal, exit 3 with the numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from kvcal.errors import KvcalError
from kvcal.observe.adjust import Move, adjusted
from kvcal.observe.costs import CostReader, PodCosts, combined
from kvcal.observe.result import Proposal
from kvcal.observe.series import Window
from kvcal.records.fit import FitResult
from kvcal.records.fit_engine import EngineCost, EngineSide, ProposedFrom
from kvcal.threshold.choose import compute_threshold, regret_model

BATCHES = 20
MIN_BATCHES_WITH_PULLS = 10
MIN_PULLS = 20


@dataclass(frozen=True)
class Estimate:
    """A production cost over the window: the ratio over all batches, its standard error, and its events."""

    value: float
    se: float
    events: float
    batches_with_events: int


def sub_windows(reader: CostReader, window: Window) -> list[PodCosts]:
    """The fleet's counts in each of :data:`BATCHES` equal sub-windows of ``window``."""
    step = window.seconds / BATCHES
    out = []
    for j in range(BATCHES):
        sub = Window(window.start + j * step, window.start + (j + 1) * step if j < BATCHES - 1 else window.end)
        out.append(combined(list(reader.pods(sub).values())))
    return out


def batch_ratio(batches: list[PodCosts], figure: str, scale: float) -> Estimate | None:
    """The fleet's ``figure`` over the batches and its batch-means standard error; None where no batch gives it."""
    sums = [b.sums.get(figure, (0.0, 0.0, 0.0)) for b in batches]
    nums, dens = np.array([s[0] for s in sums]), np.array([s[1] for s in sums])
    total_den = float(dens.sum())
    if total_den <= 0:
        return None
    ratio = float(nums.sum()) / total_den
    k = len(batches)
    se = math.sqrt(float(np.sum((nums - ratio * dens) ** 2)) / (k * (k - 1))) / (total_den / k)
    return Estimate(scale * ratio, scale * se, float(sum(s[2] for s in sums)), int(np.sum(dens > 0)))


@dataclass
class Production:
    """The fleet's pull and prefill costs and how they move the fit (notes: what was left at the calibration's)."""

    pull: Estimate | None
    prefill: Estimate | None
    notes: list[str] = field(default_factory=list)


def too_few(pull: Estimate | None, window: Window) -> str | None:
    """Why the window holds too few pulls to propose a threshold, with the numbers, or None."""
    pulls = pull.events if pull is not None else 0.0
    batches = pull.batches_with_events if pull is not None else 0
    if pulls >= MIN_PULLS and batches >= MIN_BATCHES_WITH_PULLS:
        return None
    return (
        f"too few pulls to propose a threshold: {pulls:,.0f} pulls in the window, in {batches} of its {BATCHES} "
        f"sub-windows of {window.seconds / BATCHES:.3g} s (at least {MIN_PULLS} pulls, in at least "
        f"{MIN_BATCHES_WITH_PULLS} sub-windows, are needed): widen the window (--since) or wait for more traffic"
    )


def _threshold(fit: FitResult, move: Move, side: EngineSide, provenance: ProposedFrom) -> int | None:
    """emit-config's threshold on the fit moved by ``move``; None where it refuses (no P2P cheapest)."""
    try:
        return compute_threshold(adjusted(fit, move, side, provenance)).min_cached_token_delta
    except KvcalError:
        return None


def _corners(pull: Estimate, prefill: Estimate | None, fit: FitResult, confidence: float) -> list[Move]:
    """The moves at the low-threshold and the high-threshold corners of the two costs' intervals."""
    calibrated = fit.engine_side.pull_ms_per_token.value  # type: ignore[union-attr]
    t = float(stats.t.ppf(0.5 + confidence / 2, BATCHES - 1))
    pulls = (max(pull.value - t * pull.se, 0.0), pull.value + t * pull.se)
    if prefill is None:
        prefills = (1.0, 1.0)
    else:
        base = fit.engine_side.prefill_ms_per_token.value  # type: ignore[union-attr]
        prefills = (
            max(prefill.value + t * prefill.se, 1e-12) / base,
            max(prefill.value - t * prefill.se, 1e-12) / base,
        )
    return [Move(p - calibrated, r) for p, r in zip(pulls, prefills)]


def _high(end: int | None, threshold: int) -> int | None:
    return None if end is None else max(end, threshold)


def measure_production(reader: CostReader, window: Window, fit: FitResult, busy: str | None) -> Production:
    """The fleet's pull and prefill estimates; the prefill left at the calibration's (None, a note) where the window
    cannot say."""
    batches = sub_windows(reader, window)
    pull = batch_ratio(batches, "pull_ms_per_token", 1e3)
    prefill = batch_ratio(batches, "prefill_ms_per_token", 1e3)
    side = fit.engine_side
    notes = []
    why = None
    if side is None or side.prefill_ms_per_token is None:
        why = "the fit records no engine-side prefill cost"
    elif busy is not None:
        why = busy
    elif prefill is None:
        why = "no prefill pod computed a prompt token in the window"
    if why is not None:
        notes.append(f"--propose: recompute's costs are left at the calibration's ({why})")
        prefill = None
    return Production(pull, prefill, notes)


@dataclass(frozen=True)
class Proposed:
    """The proposal record, the adjusted fit to write (None when refused), and why it was refused."""

    proposal: Proposal
    fit: FitResult | None
    refused: str | None


def propose(
    fit: FitResult, production: Production, window: Window, provenance: ProposedFrom, deployed: int | None
) -> Proposed:
    """The proposal (module docstring); ``refused`` set (exit 3) when the window or the adjusted curves cannot say."""
    pull, prefill = production.pull, production.prefill
    empty = {"threshold": None, "interval": None, "deployed": deployed, "regret_pct_of_deployed": None}
    counts = {"batches": BATCHES, "pulls": pull.events if pull is not None else 0.0}
    why = too_few(pull, window)
    if why is not None or pull is None:
        return Proposed(
            Proposal(**empty, **counts, pull_ms_per_token_delta=None, prefill_ratio=None, refused=why), None, why
        )
    side = fit.engine_side
    assert side is not None and side.pull_ms_per_token is not None  # checked before any query (run.py)
    ratio = prefill.value / side.prefill_ms_per_token.value if prefill and side.prefill_ms_per_token else 1.0
    move = Move(pull.value - side.pull_ms_per_token.value, ratio)
    now = EngineSide(
        pull_ms_per_token=EngineCost(value=pull.value, samples=max(1, int(pull.events))),
        prefill_ms_per_token=EngineCost(value=prefill.value, samples=max(1, int(prefill.events))) if prefill else None,
    )
    provenance = provenance.model_copy(
        update={"pull_ms_per_token_delta": move.pull_ms_per_token, "prefill_ratio": ratio}
    )
    proposed = adjusted(fit, move, now, provenance)
    shown = {"pull_ms_per_token_delta": move.pull_ms_per_token, "prefill_ratio": ratio}
    try:
        threshold = compute_threshold(proposed).min_cached_token_delta
    except KvcalError as err:
        why = f"no threshold on the costs production implies: {err}"
        return Proposed(Proposal(**empty, **counts, **shown, refused=why), None, why)
    ends = [_threshold(fit, corner, now, provenance) for corner in _corners(pull, prefill, fit, fit.confidence)]
    model = regret_model(proposed)
    price = model.figures(deployed) if model is not None and deployed is not None else None
    proposal = Proposal(
        threshold=threshold,
        interval=[min(ends[0], threshold) if ends[0] is not None else threshold, _high(ends[1], threshold)],
        deployed=deployed,
        regret_pct_of_deployed=price.expected_regret_pct if price else None,
        regret_ms_of_deployed=price.expected_regret_ms if price else None,
        **shown,
        **counts,
    )
    return Proposed(proposal, proposed, None)
