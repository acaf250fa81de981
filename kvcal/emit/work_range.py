"""The prefill work-range boundary of llm-d's remaining-work routing, from the measured curves.

In remaining-work routing (llm-d-router PR 2559) the ``p2p-source-producer`` publishes the
reusable tokens ``G = S - D + 1`` of a request and ``context-length-aware`` routes it on its
remaining prefill work, ``total - G``: prefill pods labelled ``llm-d.ai/prefill-work-range``
``"0-B"`` take the short class, ``"B+1-MAX"`` the long one. llm-d's guide derives ``B`` with a
calibrator over a hand-set pull model; here every input is measured:

* ``T``: the threshold this fit emits (:func:`kvcal.threshold.choose.compute_threshold`, through
  the same call ``--format json`` makes, so ``B`` follows whatever rule decides ``T``);
* the **SLO work**: the longest block multiple ``n`` whose mean-cost recompute ``R(n)`` (the
  fitted curve x its mean-cost scale, :func:`kvcal.fit.mean_cost.mean_curves`) is at most
  ``--ttft-penalty-ms``, the work a migration budget pays for; past the longest measured
  length it rests on the curve alone, and a warning says so;
* ``B = min(T, SLO work)``; the band is empty when ``T`` exceeds the SLO work (the guide's
  advice: raise the budget, or do not split the prefill pool);
* ``B``'s interval: the fit's confidence percentiles of each bootstrap draw's own best
  threshold (:func:`kvcal.threshold.decision.draw_thresholds`), each end capped at the SLO work;
* the **crossover**: where the two mean-cost curves cross, shown beside ``B`` as the guide's
  calibrator shows its own.

The labels' ``MAX`` is ``--max-model-len``, else the run's recorded ``max_model_len``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvcal.costs.cost_curve import break_even_tokens, cost_ms, real_roots, slope_us
from kvcal.emit.affinity import AFFINITY_KEY, AFFINITY_TYPE
from kvcal.emit.router import (
    DEFAULT_PREFIX_MATCH_PRODUCER,
    PLUGIN_PARAMETERS,
    PLUGIN_TYPE,
    THRESHOLD_KEY,
    PluginNames,
    yaml_scalar,
)
from kvcal.errors import InputError, NotRecommended
from kvcal.fit.breakeven import interval
from kvcal.fit.mean_cost import mean_curves
from kvcal.records.fit import FitResult
from kvcal.threshold.choose import Threshold, fmt
from kvcal.threshold.decision import draw_thresholds
from kvcal.threshold.delta_weights import Deltas

WORK_RANGE_LABEL = "llm-d.ai/prefill-work-range"
CONTEXT_LENGTH_TYPE = "context-length-aware"
REUSABLE_KEY = "reusableTokensProducerName"
PENALTY_KEY = "maxTTFTPenaltyMs"
WORK_RANGE_PRODUCER = "precise-cache"
"""The precise producer's name in the guide's remaining-work config (``--prefix-match-producer`` renames it)."""
P2P_SOURCE_NAME = "p2p-cache-source"
REMAINING_WORK_DELTA = 1
"""D in remaining-work routing: G = S - D + 1, so a D > 1 lengthens every routed request by D - 1 (the guide pins 1)."""
CONTEXT_LENGTH_LABEL = "llm-d.ai/context-length-range"
EMPTY_BAND_ADVICE = (
    "raise the budget (--ttft-penalty-ms, the filter's maxTTFTPenaltyMs) or do not split the prefill pool"
)


@dataclass(frozen=True)
class Labels:
    """The three label values the prefill pods carry: short ``0-B``, long ``B+1-MAX``, both ``0-MAX``."""

    boundary: int
    max_model_len: int

    def as_dict(self) -> dict[str, str]:
        return {
            "short": f"0-{self.boundary}",
            "long": f"{self.boundary + 1}-{self.max_model_len}",
            "context_length_range": f"0-{self.max_model_len}",
        }

    def line(self) -> str:
        """One stderr line naming the labels and the pods that carry them."""
        d = self.as_dict()
        return (
            f'prefill pods: short class {WORK_RANGE_LABEL}: "{d["short"]}", long class {WORK_RANGE_LABEL}: '
            f'"{d["long"]}", both {CONTEXT_LENGTH_LABEL}: "{d["context_length_range"]}"'
        )


@dataclass(frozen=True)
class WorkRange:
    """The boundary's inputs and result for one fit, threshold and budget (module docstring)."""

    threshold: int
    ttft_penalty_ms: float
    block_size: int
    slo_work_tokens: int | None  # None: the mean-cost recompute never reaches the budget
    crossover_tokens: float | None  # None: the mean-cost curves never cross
    boundary_ci: tuple[int | None, int | None] | None
    max_model_len: int | None
    confidence: float
    warnings: tuple[str, ...] = field(default=())

    @property
    def boundary(self) -> int | None:
        """``B = min(T, SLO work)``; None when the band is empty (``T`` above the SLO work)."""
        if self.slo_work_tokens is None:
            return self.threshold
        return self.threshold if self.threshold <= self.slo_work_tokens else None

    def as_json(self) -> dict[str, Any]:
        """``--format json``'s ``work_range`` object (the contract's keys, nothing else)."""
        return {
            "boundary": self.boundary,
            "boundary_ci": list(self.boundary_ci) if self.boundary_ci is not None else None,
            "crossover_tokens": self.crossover_tokens,
            "slo_work_tokens": self.slo_work_tokens,
            "max_model_len": self.max_model_len,
        }

    def empty_band(self) -> str:
        """Why the band is empty, with the guide's advice (for exit 3 and for helm's warning)."""
        return (
            f"the prefill work-range band is empty: the threshold T {self.threshold:,} tokens is above the SLO work "
            f"{self.slo_work_tokens:,} tokens (the longest prefix whose recompute fits the budget of "
            f"{self.ttft_penalty_ms:g} ms): {EMPTY_BAND_ADVICE}"
        )

    def labels(self) -> Labels:
        """The labels for ``B`` and ``MAX``; NotRecommended on an empty band, InputError without ``MAX``."""
        b = self.boundary
        if b is None:
            raise NotRecommended(self.empty_band())
        if self.max_model_len is None:
            raise InputError(
                "the labels' MAX is the model's longest context, and the fit records none: pass --max-model-len N "
                "(the engines' --max-model-len), e.g. --max-model-len 131072"
            )
        if self.max_model_len <= b:
            raise InputError(
                f"the max model length {self.max_model_len:,} is not above the boundary {b:,}: the long class "
                f'"{b + 1}-{self.max_model_len}" would hold nothing; check --max-model-len'
            )
        return Labels(b, self.max_model_len)

    def comment(self) -> str:
        """The one comment line: ``B``, its interval, the crossover and the SLO work."""
        b = f"B {self.boundary:,}" if self.boundary is not None else "B none (empty band)"
        ci = self.boundary_ci
        level = f"{self.confidence:.0%}"
        shown = (
            f"{level} interval [{_tokens(ci[0])}, {_tokens(ci[1])}] of each draw's own threshold"
            if ci is not None
            else "no interval (the fit kept no bootstrap draws)"
        )
        slo = f"{self.slo_work_tokens:,}" if self.slo_work_tokens is not None else "unbounded"
        return (
            f"# kvcal: work-range {b} tokens, {shown}; mean-cost curves cross at {_tokens(self.crossover_tokens)} "
            f"tokens; SLO work {slo} tokens (recompute within {self.ttft_penalty_ms:g} ms); "
            f"B = min(T {self.threshold:,}, SLO work)"
        )


def _tokens(value: float | None) -> str:
    return "never" if value is None else fmt(value)


def work_range(
    fit: FitResult, t: Threshold, ttft_penalty_ms: float, max_model_len: int | None, deltas: Deltas | None = None
) -> WorkRange:
    """The work range of ``fit`` for the threshold ``t`` it emits and the TTFT budget (module docstring)."""
    block = t.block_size
    rec, pull = mean_curves(fit)
    slo, warnings = slo_work(fit, rec, ttft_penalty_ms, block)
    crossing = float(break_even_tokens(rec, pull))
    return WorkRange(
        threshold=t.min_cached_token_delta,
        ttft_penalty_ms=ttft_penalty_ms,
        block_size=block,
        slo_work_tokens=slo,
        crossover_tokens=round(crossing, 1) if math.isfinite(crossing) else None,
        boundary_ci=_boundary_ci(fit, block, slo, deltas),
        max_model_len=max_model_len,
        confidence=fit.confidence,
        warnings=tuple(warnings),
    )


def slo_work(fit: FitResult, rec: np.ndarray, budget_ms: float, block: int) -> tuple[int | None, list[str]]:
    """The longest block multiple whose mean-cost recompute ``rec`` is within ``budget_ms``, and warnings.

    0 when even one block costs more; None when the curve never rises through the budget.
    """
    if float(cost_ms(rec, block)) > budget_ms:
        return 0, [f"recompute of one block ({block} tokens) already costs more than --ttft-penalty-ms {budget_ms:g}"]
    c0, c1, c2 = (float(c) for c in rec)
    rising = [r for r in real_roots(c0 - budget_ms, c1 / 1e3, c2 / 1e6) if r > block and slope_us(rec, r) > 0]
    if not rising:
        return None, [
            f"the mean-cost recompute curve never reaches --ttft-penalty-ms {budget_ms:g}: the SLO work is "
            "unbounded and B is the threshold"
        ]
    n = block * math.floor(min(rising) / block)
    while n > 0 and float(cost_ms(rec, n)) > budget_ms:  # the floor of a root computed in floating point
        n -= block
    longest = int(fit.measured_range[-1]) if fit.measured_range else None
    if longest is not None and n > longest:
        return n, [
            f"the SLO work {n:,} tokens lies beyond the longest measured length {longest:,}: it rests on the "
            f"fitted recompute curve alone; sweep up to it to measure it (kvcal sweep --prefix-lengths ...,{n})"
        ]
    return n, []


def _boundary_ci(
    fit: FitResult, block: int, slo: int | None, deltas: Deltas | None
) -> tuple[int | None, int | None] | None:
    """The confidence percentiles of each draw's own best threshold, each end capped at the SLO work."""
    draws = draw_thresholds(fit, block_size=block, deltas=deltas)
    if draws is None or not draws.size:
        return None
    low, high = interval(draws, fit.confidence)
    cap = math.inf if slo is None else float(slo)
    ends = (min(low, cap), min(high, cap))
    return (_end(ends[0]), _end(ends[1]))


def _end(value: float) -> int | None:
    return int(value) if math.isfinite(value) else None


def penalty_value(ms: float) -> int | float:
    """``maxTTFTPenaltyMs`` as written: a whole number of ms without a decimal point."""
    return int(ms) if float(ms).is_integer() else float(ms)


def work_range_entries(names: PluginNames, peak_tokens_per_s: int, ttft_penalty_ms: float) -> list[dict[str, Any]]:
    """The EPP entries to merge, in the guide's order: producer, P2P source, the work-range filter, affinity."""
    p2p = {
        "prefixMatchInfoProducerName": names.prefix_match_producer,
        "prefillProfileName": names.prefill_profile,
        THRESHOLD_KEY: REMAINING_WORK_DELTA,
    }
    assert set(p2p) <= set(PLUGIN_PARAMETERS)
    return [
        {"type": DEFAULT_PREFIX_MATCH_PRODUCER, "name": names.prefix_match_producer},
        {"type": PLUGIN_TYPE, "name": P2P_SOURCE_NAME, "parameters": p2p},
        {
            "type": CONTEXT_LENGTH_TYPE,
            "parameters": {"label": WORK_RANGE_LABEL, "enableFiltering": False, REUSABLE_KEY: P2P_SOURCE_NAME},
        },
        {
            "type": AFFINITY_TYPE,
            "parameters": {AFFINITY_KEY: peak_tokens_per_s, PENALTY_KEY: penalty_value(ttft_penalty_ms)},
        },
    ]


def render_work_range(wr: WorkRange, labels: Labels, entries: list[dict[str, Any]], *, about: str) -> str:
    """The labels and the entries as YAML, after the comment line and ``about`` (a second comment)."""
    lines = [wr.comment(), f"# {about}", "labels:"]
    lines += [f"  {k}: {_scalar(v)}" for k, v in labels.as_dict().items()]
    lines.append("plugins:")
    for entry in entries:
        lines.append(f"  - type: {_scalar(entry['type'])}")
        if "name" in entry:
            lines.append(f"    name: {_scalar(entry['name'])}")
        if entry.get("parameters"):
            lines.append("    parameters:")
            lines += [f"      {k}: {_scalar(v)}" for k, v in entry["parameters"].items()]
    return "\n".join(lines) + "\n"


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return yaml_scalar(value)
