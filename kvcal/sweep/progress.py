"""Progress hooks the probe session calls; the library never prints.

The CLI hands in an implementation (a rich live display on a terminal, plain lines
otherwise); tests and library callers may pass none.
"""

from __future__ import annotations

from typing import Protocol

from kvcal.records.run import ProbeRecord


class SweepProgress(Protocol):
    def on_phase(self, message: str) -> None:
        """A long step began (starting engines, warming the pair)."""

    def on_start(self, total: int, already_done: int) -> None:
        """The probe loop starts; ``already_done`` probes were finished by an earlier run."""

    def on_probe(self, record: ProbeRecord, done: int, total: int) -> None:
        """One probe attempt ended (valid or not) and is on disk."""

    def on_complete(self, done: int, total: int) -> None:
        """The probe loop ended (normally or not)."""

    # Adaptive sweeps also call ``on_round(view)`` (a kvcal.sweep.adaptive_run.RoundView) after each
    # refit when the implementation has it: the current interval, the stop rule and the next round.


class NullProgress:
    def on_round(self, view: object) -> None:
        pass

    def on_phase(self, message: str) -> None:
        pass

    def on_start(self, total: int, already_done: int) -> None:
        pass

    def on_probe(self, record: ProbeRecord, done: int, total: int) -> None:
        pass

    def on_complete(self, done: int, total: int) -> None:
        pass
