"""A simulated pair with known cost curves and noise, for fast tests and campaign planning.

It is never the default engine and its output is never a measurement: every probe it
yields comes from the curves below, so a fit of its output can be checked against
the truth. Costs, in ms at prefix length n:

    recompute(n) = recompute_intercept_ms + recompute_per_token_us*n/1e3 + recompute_per_token2_ns*n^2/1e6
    pull(n)      = pull_intercept_ms + pull_per_token_us*n/1e3

each multiplied by lognormal noise with coefficient of variation ``noise_cv``; a share
``outlier_rate`` of probes is slowed by ``outlier_factor`` (a scheduler hiccup).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from kvcal.engines.base import EnginePair, LegMeasurement
from kvcal.records import Leg, RunSetup


@dataclass(frozen=True)
class SimCosts:
    """True cost curves of the simulated pair (defaults resemble the tiny CPU model)."""

    recompute_intercept_ms: float = 5.0
    recompute_per_token_us: float = 25.0
    recompute_per_token2_ns: float = 0.012
    pull_intercept_ms: float = 20.0
    pull_per_token_us: float = 3.0
    noise_cv: float = 0.05
    outlier_rate: float = 0.0
    outlier_factor: float = 3.0

    def recompute_ms(self, n: float | np.ndarray) -> Any:
        return self.recompute_intercept_ms + self.recompute_per_token_us * n / 1e3 + self.recompute_per_token2_ns * n**2 / 1e6

    def pull_ms(self, n: float | np.ndarray) -> Any:
        return self.pull_intercept_ms + self.pull_per_token_us * n / 1e3

    def true_break_even(self, upper: float = 1e7) -> float | None:
        """Smallest n > 0 where recompute(n) >= pull(n), solved exactly; None if none below ``upper``."""
        a = self.recompute_per_token2_ns / 1e6
        b = (self.recompute_per_token_us - self.pull_per_token_us) / 1e3
        c = self.recompute_intercept_ms - self.pull_intercept_ms
        if c >= 0:
            return 0.0
        if a == 0:
            return -c / b if b > 0 and -c / b <= upper else None
        disc = b * b - 4 * a * c
        root = (-b + math.sqrt(disc)) / (2 * a)
        return root if 0 < root <= upper else None


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

    @property
    def block_size(self) -> int:
        return self._block_size

    @property
    def max_model_len(self) -> int:
        return self._max_model_len

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    @property
    def kv_bytes_per_token(self) -> int:
        return self._kv_bytes_per_token

    def start(self) -> None:
        self.started = True

    def stop(self) -> None:
        self.started = False

    def warm_up(self, token_ids: list[int]) -> None:
        self.warmed = True

    def _noisy(self, value_ms: float) -> float:
        sigma = math.sqrt(math.log1p(self.costs.noise_cv**2))
        value = value_ms * float(self._rng.lognormal(-sigma * sigma / 2, sigma))
        if self.costs.outlier_rate and self._rng.random() < self.costs.outlier_rate:
            value *= self.costs.outlier_factor
        return value

    def measure(self, leg: Leg, token_ids: list[int]) -> LegMeasurement:
        n = len(token_ids)
        if leg is Leg.PULL:
            if self.fail_pull_rate and self._rng.random() < self.fail_pull_rate:
                # A pull that silently fell back to recompute (e.g. mismatched PYTHONHASHSEED).
                return LegMeasurement(ttft_ms=self._noisy(self.costs.recompute_ms(n)), bytes_moved=0)
            moved = (n // self._block_size) * self._block_size * self._kv_bytes_per_token
            return LegMeasurement(ttft_ms=self._noisy(self.costs.pull_ms(n)), bytes_moved=moved, producer_ttft_ms=None)
        return LegMeasurement(ttft_ms=self._noisy(self.costs.recompute_ms(n)), bytes_moved=0)

    def setup(self) -> RunSetup:
        return super().setup().model_copy(update={"python_hash_seed": self.python_hash_seed})

    def describe(self) -> dict[str, Any]:
        return {"engine": "sim", "simulated": True, "sim_costs": asdict(self.costs)}
