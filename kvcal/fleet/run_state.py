"""What the fleet's event loop (:mod:`kvcal.fleet.sim`) keeps: each pod's engine state and the run's figures."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from kvcal.fleet.cache import PodCache
from kvcal.fleet.traffic import TurnRequest


class Pod:
    """One engine of the fleet: its queues, its caches, the KV it holds and the step in progress."""

    __slots__ = (
        "busy",
        "busy_ms",
        "cache",
        "decoding",
        "finishing",
        "id",
        "kv_held",
        "landed",
        "link_free_ms",
        "pending",
        "prefilling",
        "step_due",
        "step_no",
        "step_version",
        "to_post",
        "waiting",
        "work_left_ms",
    )

    def __init__(self, pod: int, cache: PodCache) -> None:
        self.id, self.cache = pod, cache
        self.waiting: deque[TurnRequest] = deque()
        self.pending = 0  # pulling or loading from the CPU tier: counted in the waiting queue, as vLLM does
        self.decoding: list[tuple[int, int, TurnRequest]] = []
        self.step_no = 0
        self.busy = False
        self.finishing: list[TurnRequest] = []
        self.link_free_ms = 0.0
        self.busy_ms = 0.0
        self.prefilling = 0
        self.kv_held = 0  # tokens reserved by admitted requests (prompt and output): not evictable
        self.to_post: list[tuple[TurnRequest, int, int]] = []  # hand-offs to read: (request, source, tokens)
        self.landed: list[TurnRequest] = []  # reads that finished during the step in progress
        self.step_due = -1.0  # on a shared host: when the step in progress ends, as last scheduled
        self.step_version = 0  # on a shared host: the end events of earlier versions are stale
        self.work_left_ms = 0.0

    def queue(self) -> int:
        return len(self.waiting) - self.prefilling + self.pending

    def running(self) -> int:
        return len(self.decoding) + self.prefilling


@dataclass
class RunStats:
    """What one run measured inside the window [warmup, duration)."""

    ttft_ms: list[float] = field(default_factory=list)
    met_slo: int = 0
    completed: int = 0
    completed_prompt_tokens: int = 0
    routed: int = 0
    routed_prompt_tokens: int = 0  # as the engines count prompt tokens: a nixl-pd hand-off's on its source too
    pulled: int = 0
    tokens_moved: int = 0
    queue_samples: list[int] = field(default_factory=list)
    busy_share: float = 0.0
    window_s: float = 0.0
