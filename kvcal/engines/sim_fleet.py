"""A simulated production run in the llm-d recipe's observational formats (tests and benchmarks only).

It writes what the recipe collects from a loaded fleet, inference-perf's per-request
records and the router's ``p2p decision`` log lines, for requests whose TTFT follows
the same truth as :class:`kvcal.engines.sim.SimCosts`:

    ttft = noisy(recompute(uncached) + pulled*(pull(delta) - recompute_intercept_ms))
           + busy(c)*busy_computing_ms + pulled*(busy(s)*source_wait_ms + busy(c)*requeue_ms)

As in the recipe's published run, every pull moves the same number of tokens (the
shared prefix), queues are whatever they happen to be (busy with the given shares),
and requests that are not pulled are served from the computing pod's own cache or
recomputed. Nothing here is a measurement.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kvcal.engines.sim import SimCosts


@dataclass(frozen=True)
class FleetShape:
    """How the simulated production traffic looks."""

    prefix_tokens: int = 8192  # the one pull size
    suffix_tokens: tuple[int, int] = (64, 1024)  # uniform range of each request's own tail
    pulled_share: float = 0.5
    self_share: float = 0.3  # served from the computing pod's own cache; the rest match nothing
    busy_source_share: float = 0.15
    busy_computing_share: float = 0.2


def simulate_production(
    costs: SimCosts, n_requests: int, *, shape: FleetShape = FleetShape(), seed: int = 0
) -> tuple[list[dict[str, Any]], list[str]]:
    """(inference-perf per-request records, EPP log lines) for ``n_requests`` simulated requests."""
    rng = np.random.default_rng([seed, 4242])
    sigma = float(np.sqrt(np.log1p(costs.noise_cv**2)))
    requests: list[dict[str, Any]] = []
    lines: list[str] = ["I1203 09:00:00.000000 1 main.go:80] starting EPP (not a decision line)"]
    clock = 1_764_000_000.0  # the EPP log's wall clock
    epoch = clock - 600.0  # inference-perf's clock is monotonic (time.perf_counter)
    for i in range(n_requests):
        rid = f"{seed:04d}-{i:06d}-{int(rng.integers(1 << 30)):08x}"
        suffix = int(rng.integers(shape.suffix_tokens[0], shape.suffix_tokens[1] + 1))
        n_in = shape.prefix_tokens + suffix
        draw = rng.random()
        outcome = (
            "pulled"
            if draw < shape.pulled_share
            else ("self" if draw < shape.pulled_share + shape.self_share else "no-best-match")
        )
        best = shape.prefix_tokens if outcome != "no-best-match" else 0
        computing = shape.prefix_tokens if outcome == "self" else 0
        source_waiting = int(rng.integers(1, 5)) if rng.random() < shape.busy_source_share else 0
        computing_waiting = int(rng.integers(1, 5)) if rng.random() < shape.busy_computing_share else 0
        pulled = outcome == "pulled"
        uncached = n_in - (best if pulled else computing)
        bs, bc = source_waiting >= 1, computing_waiting >= 1
        curve_ms = float(costs.recompute_ms(uncached)) + pulled * (
            float(costs.pull_ms(best)) - costs.recompute_intercept_ms
        )
        delays_ms = bc * costs.busy_computing_ms + pulled * (bs * costs.source_wait_ms + bc * costs.requeue_ms)
        ttft_s = (curve_ms * float(rng.lognormal(-sigma * sigma / 2, sigma)) + delays_ms) / 1e3
        clock += float(rng.exponential(0.05))
        tokens = [clock + ttft_s + 0.01 * k for k in range(4)]
        requests.append(_perf_record(rid, clock - epoch, [t - epoch for t in tokens], n_in))
        decision = {
            "level": "info",
            "ts": clock,
            "logger": "p2p-source-producer",
            "msg": "p2p decision",
            "requestID": rid,
            "outcome": outcome,
            "bestCachedTokens": best,
            "computingCachedTokens": computing,
            "deltaTokens": best - computing,
            "sourceWaiting": source_waiting,
            "computingWaiting": computing_waiting,
        }
        lines.append("2026-12-03T09:00:00.000000Z " + json.dumps(decision))
    return requests, lines


def _perf_record(rid: str, start: float, token_times: list[float], n_in: int) -> dict[str, Any]:
    """inference-perf 0.7.0's record: a monotonic clock, one chunk per token time, the input tokens under
    request_metrics (info.input_tokens is its deprecated mirror)."""
    chunk = {"id": f"cmpl-{rid}", "object": "text_completion", "choices": [{"index": 0, "text": " a"}]}
    return {
        "start_time": start,
        "end_time": token_times[-1],
        "error": None,
        "info": {
            "request_metrics": {"text": {"input_tokens": n_in}},
            "input_tokens": n_in,
            "response_metrics": {
                "output_tokens": len(token_times),
                "response_chunks": [json.dumps(chunk) for _ in token_times],
                "chunk_times": list(token_times),
                "output_token_times": list(token_times),
            },
        },
    }


def write_production(
    folder: Path, costs: SimCosts, n_requests: int, *, shape: FleetShape = FleetShape(), seed: int = 0
) -> tuple[Path, Path]:
    """Write ``per_request_lifecycle_metrics.json`` and ``epp.log`` into ``folder``; return their paths."""
    requests, lines = simulate_production(costs, n_requests, shape=shape, seed=seed)
    folder.mkdir(parents=True, exist_ok=True)
    per_request = folder / "per_request_lifecycle_metrics.json"
    per_request.write_text(json.dumps(requests, indent=1) + "\n", encoding="utf-8")
    epp = folder / "epp.log"
    epp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return per_request, epp
