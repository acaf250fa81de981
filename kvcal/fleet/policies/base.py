"""What a fleet policy is: the rows a study runs of it, when it pulls from a peer, and how its rows are drawn.

Everything that reads a policy (the study, the result's rows, the plot, the report, kvcal
observe) asks these attributes, never the policy's name, so a new policy is one module.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:  # the fit and the cost rule are numpy's and pydantic's: the registry stays light
    from kvcal.fleet.costs import CostRule
    from kvcal.records.fit import FitResult


@dataclass(frozen=True)
class Policy(ABC):
    """One policy a study runs; the simulation asks it, for each routed request, whether to pull."""

    name: ClassVar[str]
    summary: ClassVar[str]
    """One line for docs/fleet.md's list of policies."""
    swept: ClassVar[bool] = False
    """True: one row per threshold (the curve the thresholds are chosen on); False: one flat row."""
    flat_line: ClassVar[tuple[str, str] | None] = None
    """A flat row drawn across the threshold axis: (matplotlib linestyle, SVG dash array); None: not drawn."""
    pulls_whenever_a_peer_holds_more: ClassVar[bool] = False
    """True: it pulls as a threshold of one block does (kvcal observe's row for a deployed 1)."""
    absent_note: ClassVar[str | None] = None
    """The result's note when a study ran none of it (its for_study found the fit cannot drive it)."""

    threshold: int | None = None  # tokens: the swept threshold, or a rule's floor
    rule: CostRule | None = None

    @classmethod
    def for_study(cls, fit: FitResult, thresholds: list[int]) -> list[Policy]:
        """The instances a study over these thresholds runs (none when the fit cannot drive it)."""
        return [cls()]

    @property
    def row_threshold(self) -> int | None:
        """The threshold its result row carries: the swept one, else None."""
        return self.threshold if self.swept else None

    @abstractmethod
    def pulls(self, delta: int, running: int, source_waiting: int, computing_waiting: int) -> bool:
        """Pull ``delta`` more cached tokens from the best peer (``running``: the computing pod's batch)?"""
