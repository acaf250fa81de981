"""The router's part: pick the computing pod, then apply the P2P rule (llm-d's p2p-source-producer).

Pod choice: the highest ``prefix_weight * cached/prompt + queue_weight * (1 - waiting/max
waiting) + kv_weight * (1 - KV in use)`` over all pods (prefix-cache-scorer, queue-scorer and
kv-cache-utilization-scorer behind max-score-picker; ties broken at random). Cached counts
are whole blocks, and at least one token of the prompt is always computed. P2P rule: pull
when the best peer holds at least the threshold more cached tokens than the computing pod;
the source is drawn among the peers within one block of the best, each weighted
``1 / (1 + waiting)``. The costModel
variant instead pulls when its per-request comparison says so (kvcal.fleet.costs.CostRule),
with its floor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from kvcal.fleet.cache import FleetIndex
from kvcal.fleet.policies.base import Policy
from kvcal.fleet.traffic import TurnRequest


class FleetView(Protocol):
    """What the router reads of the fleet (kvcal.fleet.sim.FleetSim is one)."""

    block: int
    index: FleetIndex
    queues: np.ndarray  # waiting requests per pod
    kv_use: np.ndarray  # share of each pod's KV in use
    pods: list[Any]  # each with running() and queue()
    policy: Policy
    route_rng: np.random.Generator
    w: Any  # the workload: its router weights


@dataclass(frozen=True)
class Route:
    pod: int
    cached: int  # tokens the computing pod holds (whole blocks)
    cached_key: tuple
    source: int | None = None
    delta: int = 0


def route(sim: FleetView, req: TurnRequest, now: float) -> Route:
    block, n = sim.block, req.prompt
    limit = (n - 1) // block * block
    session = req.session
    cached: dict[int, int] = {}
    keys: dict[int, tuple] = {}
    if session.sys_tokens:
        for pod, tokens in sim.index.held(session.sys_key).items():
            cached[pod], keys[pod] = tokens, session.sys_key
    for pod, tokens in sim.index.held(session.key).items():
        if tokens >= cached.get(pod, 0):
            cached[pod], keys[pod] = tokens, session.key
    for pod, tokens in cached.items():
        cached[pod] = min(limit, tokens // block * block)
    queues = sim.queues
    top = queues.max()
    weights = sim.w.router
    scores = weights.queue_weight * (1.0 - queues / top) if top > 0 else np.full(len(queues), weights.queue_weight)
    scores = scores + weights.kv_weight * (1.0 - sim.kv_use) + sim.route_rng.random(len(queues)) * 1e-9
    for pod, tokens in cached.items():
        scores[pod] += weights.prefix_weight * tokens / n
    chosen = int(scores.argmax()) if weights.pick == "score" else (session.turn - 1) % len(queues)
    mine = cached.get(chosen, 0)
    best = max(cached.values(), default=0)
    delta = best - mine
    if delta <= 0:
        return Route(chosen, mine, keys.get(chosen, session.key))
    pod = sim.pods[chosen]
    if not sim.policy.pulls(
        delta, pod.running(), int(_best_source_queue(cached, best, block, queues, chosen)), pod.queue()
    ):
        return Route(chosen, mine, keys.get(chosen, session.key))
    peers = [p for p, tokens in cached.items() if tokens >= best - block and p != chosen]
    weights_ = np.array([1.0 / (1.0 + queues[p]) for p in peers])
    source = peers[int(sim.route_rng.choice(len(peers), p=weights_ / weights_.sum()))] if len(peers) > 1 else peers[0]
    delta = cached[source] - mine
    if delta <= 0:
        return Route(chosen, mine, keys.get(chosen, session.key))
    return Route(chosen, mine, keys.get(chosen, session.key), source, delta)


def _best_source_queue(cached: dict[int, int], best: int, block: int, queues: np.ndarray, chosen: int) -> float:
    """The shortest waiting queue among the candidate sources (what a costModel router sees before it draws one)."""
    return min((queues[p] for p, tokens in cached.items() if tokens >= best - block and p != chosen), default=0.0)
