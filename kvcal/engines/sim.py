"""A simulated pair with known cost curves and noise, for fast tests and campaign planning.

It is never the default engine and its output is never a measurement: every probe it
yields comes from the curves below, so a fit of its output can be checked against
the truth. Costs are :class:`~kvcal.costs.simulated.SimCosts` curves (recompute
quadratic, pull affine, in :mod:`kvcal.costs.cost_curve`'s form), each multiplied by
lognormal noise with coefficient of variation ``noise_cv``; a share ``outlier_rate``
of probes is slowed by ``outlier_factor`` (a scheduler hiccup).

Load. Background streams (kvcal.sweep.load) attach to the simulated producer or
consumer; each attached stream keeps one request waiting, so an engine's simulated
``vllm:num_requests_waiting`` is its number of streams. With the consumer (the
computing pod) busy every probe gains ``busy_computing_ms`` and a pull gains
``requeue_ms`` more; with the producer (the source) busy a pull gains
``source_wait_ms``. The delays are added as they are, after the noise of the curve.
"""

from __future__ import annotations

import math
import threading
from operator import attrgetter
from typing import Any

import numpy as np

from kvcal.costs.simulated import SimCosts
from kvcal.engines.base import EnginePair, LegMeasurement, LoadTarget, Role
from kvcal.records.run import Leg, RunSetup

__all__ = ["SimCosts", "SimPair"]


def _fixed(attr: str) -> property:
    """A read-only property that returns the instance's ``attr``."""
    return property(attrgetter(attr))


class SimPair(EnginePair):
    """An in-process pair whose probes come from :class:`SimCosts` (``--engine sim``)."""

    name = "sim"

    def __init__(
        self,
        costs: SimCosts | None = None,
        *,
        block_size: int = 64,
        max_model_len: int = 65536,
        kv_bytes_per_token: int = 2048,
        vocab_size: int = 32000,
        seed: int = 0,
        fail_pull_rate: float = 0.0,
        python_hash_seed: int | None = None,
    ) -> None:
        self.costs = costs or SimCosts()
        self._block_size = block_size
        self._max_model_len = max_model_len
        self._kv_bytes_per_token = kv_bytes_per_token
        self._vocab_size = vocab_size
        self._rng = np.random.default_rng(seed)
        self.fail_pull_rate = fail_pull_rate
        # No process hashes anything here; the seed a launched pair would share is recorded
        # so that a simulated run exercises the same setup -> emit path as a real one.
        self.python_hash_seed = python_hash_seed
        self.started = False
        self.warmed = False
        self.session_open = False  # the first pull on a fresh session pays costs.session_ms
        self.streams: dict[str, int] = {"producer": 0, "consumer": 0}
        self._lock = threading.Lock()

    # EnginePair declares these read-only (types there); a simulated pair fixes them when it is built.
    block_size = _fixed("_block_size")
    max_model_len = _fixed("_max_model_len")
    vocab_size = _fixed("_vocab_size")
    kv_bytes_per_token = _fixed("_kv_bytes_per_token")

    def start(self) -> None:
        self.started = True
        self.session_open = False

    def stop(self) -> None:
        self.started = False

    def warm_up(self, token_ids: list[int]) -> None:
        self.warmed = True
        self.session_open = True  # the warm-up pays the handshake, as a real pair's does

    def restart_consumer(self) -> None:
        self.session_open = False

    def _noisy(self, value_ms: float) -> float:
        sigma = math.sqrt(math.log1p(self.costs.noise_cv**2))
        value = value_ms * float(self._rng.lognormal(-sigma * sigma / 2, sigma))
        if self.costs.outlier_rate and self._rng.random() < self.costs.outlier_rate:
            value *= self.costs.outlier_factor
        return value

    def measure(self, leg: Leg, token_ids: list[int]) -> LegMeasurement:
        n = len(token_ids)
        computing_busy = self.streams["consumer"] > 0
        source_busy = self.streams["producer"] > 0
        wait = self.costs.busy_computing_ms if computing_busy else 0.0
        if leg is Leg.PULL:
            if self.fail_pull_rate and self._rng.random() < self.fail_pull_rate:
                # A pull that silently fell back to recompute (e.g. mismatched PYTHONHASHSEED).
                return LegMeasurement(ttft_ms=self._noisy(self.costs.recompute_ms(n)) + wait, bytes_moved=0)
            wait += (self.costs.requeue_ms if computing_busy else 0.0) + (
                self.costs.source_wait_ms if source_busy else 0.0
            )
            moved = (n // self._block_size) * self._block_size * self._kv_bytes_per_token
            if not self.session_open:
                wait += self.costs.session_ms
                self.session_open = True
            return LegMeasurement(
                ttft_ms=self._noisy(self.costs.pull_ms(n)) + wait, bytes_moved=moved, producer_ttft_ms=None
            )
        return LegMeasurement(ttft_ms=self._noisy(self.costs.recompute_ms(n)) + wait, bytes_moved=0)

    def load_target(self, role: Role) -> LoadTarget:
        return SimLoadTarget(self, role)

    def setup(self) -> RunSetup:
        return super().setup().model_copy(update={"python_hash_seed": self.python_hash_seed})

    def describe(self) -> dict[str, Any]:
        return {"engine": "sim", "simulated": True, "sim_costs": self.costs.model_dump()}


class SimLoadTarget(LoadTarget):
    """A simulated engine under background load: each attached stream is one waiting request."""

    def __init__(self, pair: SimPair, role: Role) -> None:
        self.pair = pair
        self.role = role

    def waiting_requests(self) -> int:
        return self.pair.streams[self.role]

    def serve_background(self, token_ids: list[int], max_tokens: int, stop: threading.Event) -> None:
        stop.wait(0.05)  # a simulated request takes no work, only a little time

    def stream_started(self) -> None:
        with self.pair._lock:
            self.pair.streams[self.role] += 1

    def stream_stopped(self) -> None:
        with self.pair._lock:
            self.pair.streams[self.role] -= 1
