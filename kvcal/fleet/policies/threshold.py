"""``threshold``: pull when the best peer holds at least the threshold more cached tokens (one row per threshold)."""

from __future__ import annotations

from dataclasses import dataclass

from kvcal.fleet.policies.base import Policy
from kvcal.records.fit import FitResult


@dataclass(frozen=True)
class ThresholdPolicy(Policy):
    name = "threshold"
    summary = (
        "pull when the best peer holds at least minCachedTokenDelta more cached tokens: one row per "
        "threshold tried, the curve the recommended threshold is chosen on"
    )
    swept = True

    @classmethod
    def for_study(cls, fit: FitResult, thresholds: list[int]) -> list[Policy]:
        return [cls(t) for t in thresholds]

    def pulls(self, delta: int, running: int, source_waiting: int, computing_waiting: int) -> bool:
        return delta > 0 and delta >= (self.threshold or 1)


POLICY = ThresholdPolicy
