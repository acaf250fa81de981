"""A fleet whose engines export vLLM's transfer, failure and prefill counters, for kvcal observe's production costs.

Served by tests/fake_prometheus.py (``FakePrometheus(cost_fleet)``), one scrape every 15 s from
30 minutes before the server's start (``anchor``) to 15 minutes after. Per scrape:

- ``decode-a`` (NIXL consumer, TP 2): 4 pulls of 2,048 tokens, each transfer observed on both
  ranks (so the histogram counts 8 and sums twice the wire time), :data:`WIRE_US` us a token;
  vLLM counts its pulled prompts as computed (8,192 a scrape) in a few ms of "prefill";
- ``decode-slow``: the same, its link :data:`SLOW` x slower from :data:`SLOWED_BEFORE_S` before the
  anchor (mid-window of a 15-minute window ending at the anchor);
- ``decode-failing``: the same, plus one failed pull per scrape (4 of 5 succeed; counted on both ranks);
- ``prefill-p`` (NIXL producer): NIXL's histograms at zero (it posts no reads), 3 prefills of 1,000
  tokens at :data:`PREFILL_US` us a token;
- ``prefill-slow``: a producer whose prefill costs :data:`SLOW` x as much;
- ``tier-q`` (P2P tier, no TP pooling): 2,048 tokens from the ``1:p2p`` tier at :data:`WIRE_US`, 32
  chunks, no promotion-failure series (vLLM creates it at the first failure), 1,000 tokens prefilled;
- ``plain``: prompt tokens only (no transfer nor prefill counters);
- ``busy``: like ``prefill-p`` but its queue holds 5 requests (the fleet's queue p90 above 1).

Queues are 0 except ``busy``'s; every pod counts its requests and TTFT.
"""

from __future__ import annotations

from typing import Any

STEP = 15.0
SPAN_S = 1800.0
AHEAD_S = 900.0
TP = 2
WIRE_US = 1.5
PREFILL_US = 20.0
SLOW = 10.0
SLOWED_BEFORE_S = 450.0
PULL_TOKENS = 2048
BYTES_PER_TOKEN = 2048
BUCKETS = ((0.1, 2), (0.25, 3), (0.5, 4), (float("inf"), 4))


def _decode(k_time: float, slow_from: float | None = None, failed: int = 0) -> dict:
    factor = SLOW if slow_from is not None and k_time > slow_from else 1.0
    tokens = 4 * PULL_TOKENS
    return {
        "nixl_xfer_sum": tokens * WIRE_US * 1e-6 * factor * TP, "nixl_xfer_count": 4 * TP,
        "nixl_bytes_sum": tokens * BYTES_PER_TOKEN, "nixl_failed": failed * TP,  # each rank's transfer fails
        "external": tokens, "computed": 64, "local": 0,
        "prefill_sum": 4 * 0.003, "prefill_count": 4, "prefill_tokens": tokens,  # a pull's tokens count as computed
    }


def _prefill(factor: float = 1.0, nixl: bool = True) -> dict:
    tokens = 3000
    out = {"external": 0, "computed": tokens, "local": 500,
           "prefill_sum": tokens * PREFILL_US * 1e-6 * factor, "prefill_count": 3, "prefill_tokens": tokens}
    if nixl:
        out |= {"nixl_xfer_sum": 0.0, "nixl_xfer_count": 0, "nixl_bytes_sum": 0.0, "nixl_failed": 0}
    return out


def _tier() -> dict:
    return {"tier_time": PULL_TOKENS * WIRE_US * 1e-6, "tier_bytes": PULL_TOKENS * BYTES_PER_TOKEN,
            "cached_p2p": PULL_TOKENS, "chunks": PULL_TOKENS // 64, "external": PULL_TOKENS, "computed": 1000,
            "local": 0, "prefill_sum": 1000 * PREFILL_US * 1e-6, "prefill_count": 2, "prefill_tokens": 1000}


def pods(anchor: float) -> dict[str, tuple[dict, object]]:
    """Pod -> (labels, increments at a scrape time)."""
    slow_from = anchor - SLOWED_BEFORE_S
    return {
        "decode-a": ({}, lambda t: _decode(t)),
        "decode-slow": ({}, lambda t: _decode(t, slow_from=slow_from)),
        "decode-failing": ({}, lambda t: _decode(t, failed=1)),
        "prefill-p": ({}, lambda t: _prefill()),
        "prefill-slow": ({}, lambda t: _prefill(SLOW)),
        "tier-q": ({}, lambda t: _tier()),
        "plain": ({}, lambda t: {"external": 0, "computed": 900, "local": 100}),
        "busy": ({"queue": 5}, lambda t: _prefill()),
    }


NAMES = {
    "nixl_xfer_sum": ("vllm:nixl_xfer_time_seconds_sum", {}),
    "nixl_xfer_count": ("vllm:nixl_xfer_time_seconds_count", {}),
    "nixl_bytes_sum": ("vllm:nixl_bytes_transferred_sum", {}),
    "nixl_failed": ("vllm:nixl_num_failed_transfers_total", {}),
    "tier_time": ("vllm:kv_offload_tiering_read_time_total", {"tier": "1:p2p"}),
    "tier_bytes": ("vllm:kv_offload_tiering_read_bytes_total", {"tier": "1:p2p"}),
    "chunks": ("vllm:kv_offload_tiering_chunk_hits_total", {"tier": "1:p2p"}),
    "cached_p2p": ("vllm:prompt_tokens_cached_by_source_total", {"source": "p2p"}),
    "external": ("vllm:prompt_tokens_by_source_total", {"source": "external_kv_transfer"}),
    "computed": ("vllm:prompt_tokens_by_source_total", {"source": "local_compute"}),
    "local": ("vllm:prompt_tokens_by_source_total", {"source": "local_cache_hit"}),
    "prefill_sum": ("vllm:request_prefill_time_seconds_sum", {}),
    "prefill_count": ("vllm:request_prefill_time_seconds_count", {}),
    "prefill_tokens": ("vllm:request_prefill_kv_computed_tokens_sum", {}),
}


def cost_fleet(anchor: float) -> list[tuple[dict, list[tuple[float, float]]]]:
    """Every series of the fleet: (labels with __name__, samples), counters far from zero when the window opens."""
    times = [anchor + k * STEP for k in range(int(-SPAN_S // STEP), int(AHEAD_S // STEP) + 1)]
    out = []
    for pod, (extra, step) in pods(anchor).items():
        base = {"job": "vllm", "engine": "0", "model_name": "m", "pod": pod, "instance": f"{pod}:8000"}
        increments = [step(t) for t in times]
        keys = set(increments[0])
        for key in sorted(keys):
            name, labels = NAMES[key]
            running, samples = 1000.0 * (increments[0][key] or 1.0), []
            for t, inc in zip(times, increments):
                running += inc[key]
                samples.append((t, running))
            out.append(({"__name__": name, **base, **labels}, samples))
        prompt = [sum(inc.get(k, 0) for k in ("external", "computed", "local")) for inc in increments]
        out.append(({"__name__": "vllm:prompt_tokens_total", **base}, _cumulative(times, prompt)))
        out.append(({"__name__": "vllm:request_success_total", **base}, _cumulative(times, [4] * len(times))))
        out.append(({"__name__": "vllm:num_requests_waiting", **base}, [(t, float(extra.get("queue", 0))) for t in times]))
        for le, count in BUCKETS:
            labels = {"le": "+Inf" if le == float("inf") else str(le)}
            out.append(({"__name__": "vllm:time_to_first_token_seconds_bucket", **base, **labels},
                        _cumulative(times, [count] * len(times))))
    return out


def _cumulative(times: list[float], steps: list[float]) -> list[tuple[float, float]]:
    total, out = 1e6, []
    for t, inc in zip(times, steps):
        total += inc
        out.append((t, total))
    return out


def calibration_fit(**update: Any):
    """A fitted simulated campaign (bootstrap draws kept) whose engine side is this fleet's healthy costs, TP 2."""
    from factories import sim_table
    from kvcal.engines.sim import SimCosts
    from kvcal.fit.fitting import fit_table
    from kvcal.fit_record import FitSettings
    from kvcal.records_engine import EngineCost, EngineSide

    table = sim_table(SimCosts(), [256, 512, 1024, 2048, 4096, 8192], 3, seed=3)
    fit = fit_table(table, settings=FitSettings(n_resamples=300, seed=1))
    side = EngineSide(pull_ms_per_token=EngineCost(value=WIRE_US / 1e3, samples=40),
                      prefill_ms_per_token=EngineCost(value=PREFILL_US / 1e3, samples=40))
    setup = fit.setup.model_copy(update={"tensor_parallel_size": TP, "transport": "nixl-pd"})
    return fit.model_copy(update={"engine_side": side, "setup": setup, **update})
