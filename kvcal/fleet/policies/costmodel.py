"""``costmodel``: the costModel variant, which pulls above its floor when its per-request comparison says so."""

from __future__ import annotations

from dataclasses import dataclass

from kvcal.emit.costmodel_block import COSTMODEL_FLOOR_TOKENS
from kvcal.fleet.costs import cost_rule
from kvcal.fleet.policies.base import Policy
from kvcal.records.fit import FitResult


@dataclass(frozen=True)
class CostModelPolicy(Policy):
    name = "costmodel"
    summary = (
        "the costModel variant: above its floor, pull when its per-request comparison (the calibrated S and Q "
        "under load) says so; run only when the fit calibrated a costModel"
    )
    absent_note = (
        "no costmodel row: the fit calibrated no costModel under load (kvcal sweep --load-states, or "
        "kvcal fit --per-request/--epp-log)"
    )

    @classmethod
    def for_study(cls, fit: FitResult, thresholds: list[int]) -> list[Policy]:
        rule = cost_rule(fit)
        return [] if rule is None else [cls(COSTMODEL_FLOOR_TOKENS, rule)]

    def pulls(self, delta: int, running: int, source_waiting: int, computing_waiting: int) -> bool:
        if delta <= 0 or delta < (self.threshold or 1):
            return False
        return self.rule is None or self.rule.pulls(delta, running, source_waiting, computing_waiting)


POLICY = CostModelPolicy
