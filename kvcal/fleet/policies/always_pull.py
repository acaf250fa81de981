"""``always-pull``: pull whenever a peer holds more cached tokens (the plugin's default threshold, 1)."""

from __future__ import annotations

from dataclasses import dataclass

from kvcal.fleet.policies.base import Policy


@dataclass(frozen=True)
class AlwaysPull(Policy):
    name = "always-pull"
    summary = "pull whenever a peer holds more cached tokens (what the plugin's default threshold, 1, does)"
    flat_line = ("--", "9 4")
    pulls_whenever_a_peer_holds_more = True

    def pulls(self, delta: int, running: int, source_waiting: int, computing_waiting: int) -> bool:
        return delta > 0


POLICY = AlwaysPull
