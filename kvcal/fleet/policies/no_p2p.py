"""``no-p2p``: never pull; every request recomputes what its pod lacks (the baseline)."""

from __future__ import annotations

from dataclasses import dataclass

from kvcal.fleet.policies.base import Policy


@dataclass(frozen=True)
class NoP2P(Policy):
    name = "no-p2p"
    summary = "never pull: every request recomputes what its pod does not hold (the baseline)"
    flat_line = (":", "2 3")

    def pulls(self, delta: int, running: int, source_waiting: int, computing_waiting: int) -> bool:
        return False


POLICY = NoP2P
