"""What a fleet policy is: its name, its threshold, and when it pulls from a peer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kvcal.fleet.costs import CostRule

PolicyName = Literal["no-p2p", "always-pull", "threshold", "costmodel"]


@dataclass(frozen=True)
class Policy:
    name: PolicyName
    threshold: int | None = None  # tokens: "threshold" rows, and the costmodel rule's floor
    rule: CostRule | None = None

    def pulls(self, delta: int, running: int, source_waiting: int, computing_waiting: int) -> bool:
        if self.name == "no-p2p" or delta <= 0:
            return False
        if self.name == "always-pull":
            return True
        if delta < (self.threshold or 1):
            return False
        return self.rule is None or self.rule.pulls(delta, running, source_waiting, computing_waiting)
