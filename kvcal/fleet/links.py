"""Link classes in the fleet model: each ordered pod pair is of one class, each pull is charged its class's curve,
and the first pull of a pair its class's session cost (a fit with classes: ``kvcal fit`` on a ``kvcal sweep --pairs``
run; docs/method.md, link classes and session cost).

The workload names the classes' shares of the ordered pod pairs (``link_classes``; default: each class's share of
the campaign's pairs); the pairs are dealt to classes in those proportions (largest remainders), in a seeded order.
A pair's session opens at its first pull and stays open for the run. The engines' own prefill stays the pooled
recompute curve (the same model on every pod); resamples vary the pooled curves, the classes' pulls stay their
point fits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvcal.errors import InputError
from kvcal.records.fit import FitResult


@dataclass(frozen=True)
class LinkClass:
    """One class's pull curve (ms, us/token, ns/token^2) and session cost (ms)."""

    pull: tuple[float, float, float]
    session_ms: float
    share: float  # of the campaign's pairs: the default share of the fleet's pod pairs


def link_classes(fit: FitResult) -> dict[str, LinkClass] | None:
    """The fit's classes as the fleet charges them; None for a one-class fit."""
    if not fit.classes:
        return None
    counts = {name: max(len(cls.pairs), 1) for name, cls in fit.classes.items()}
    return {
        name: LinkClass(
            cls.fit.pull.coefficients, max(0.0, cls.session_cost_ms or 0.0), counts[name] / sum(counts.values())
        )
        for name, cls in fit.classes.items()
    }


class PairLinks:
    """Which class each ordered pod pair is, and which pairs have opened their session."""

    def __init__(self, classes: dict[str, LinkClass], shares: dict[str, float] | None, pods: int, seed: int) -> None:
        shares = shares if shares is not None else {name: cls.share for name, cls in classes.items()}
        unknown = sorted(set(shares) - set(classes))
        if unknown:
            raise InputError(
                f"the workload's link_classes name {', '.join(unknown)}, which the fit does not have "
                f"(its classes: {', '.join(classes)})"
            )
        pairs = [(a, b) for a in range(pods) for b in range(pods) if a != b]
        names = sorted(name for name in shares if shares[name] > 0)
        exact = np.array([shares[name] * len(pairs) for name in names])
        counts = np.floor(exact).astype(int)
        counts[np.argsort(counts - exact)[: len(pairs) - counts.sum()]] += 1  # largest remainders
        dealt = [name for name, count in zip(names, counts) for _ in range(count)]
        order = np.random.default_rng([seed, 11]).permutation(len(pairs))
        self.class_of = {pairs[int(i)]: dealt[k] for k, i in enumerate(order)}
        self.classes = classes
        self.opened: set[tuple[int, int]] = set()
        self.sessions_opened = 0

    def pull(self, source: int, dest: int) -> LinkClass:
        return self.classes[self.class_of[(source, dest)]]

    def session_ms(self, source: int, dest: int) -> float:
        """The session cost when this is the pair's first pull (then its session is open), else 0."""
        if (source, dest) in self.opened:
            return 0.0
        self.opened.add((source, dest))
        self.sessions_opened += 1
        return self.pull(source, dest).session_ms
