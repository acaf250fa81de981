"""The threshold rules (``--rule``): one module per rule, and :data:`TABLE`, the one list that names them.

A rule is a module here with ``choose(w, *, margin, deltas, allow_extrapolation) -> Chosen`` (the threshold, the
decision that prices it, and whether the result carries that decision), and its line in :data:`TABLE`: its name,
the clause ``--rule``'s help and docs/emit.md's list say of it, whether it takes ``--margin``, the run page's
words for it, whether ``--class-mix`` under it sums the classes' point curves, and whether every threshold is
priced against it (then the module also has ``threshold_alone(w, *, margin, allow_extrapolation) -> int``). The
default ``expected-cost`` (:mod:`.expected_cost`) and ``upper`` (:mod:`.upper`) are the two today.

Light on purpose: emit-config's flags read the names and the help from here, so this module imports nothing of
kvcal but errors and the margin's check, and a rule's module is imported only when the rule runs.
May import what :mod:`kvcal.threshold` may.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvcal.errors import InputError
from kvcal.threshold.limits import DEFAULT_MARGIN, validate_margin

if TYPE_CHECKING:
    from kvcal.threshold.decision import Decision
    from kvcal.threshold.delta_weights import Deltas
    from kvcal.threshold.parts import Working


@dataclass(frozen=True)
class Chosen:
    """What a rule's ``choose`` returns: the threshold, the decision that prices it, and whether the
    result carries that decision (the default rule's own) or only its prices (a rule that decides otherwise)."""

    threshold: int
    decision: Decision
    carries_decision: bool


@dataclass(frozen=True)
class Rule:
    """One ``--rule`` value: its name, its module (a dotted name, imported when it runs) and what its help says."""

    name: str
    module: str
    summary: str
    takes_margin: bool = False
    report: str = ""
    """The run page's sentence for it, a template over ``{margin}`` and ``{block_size}``; empty: the summary."""
    mix_on_point_curves: bool = False
    """``--class-mix`` under this rule sums each class's excess on its point mean curves, not the draws' decision."""
    alternative: bool = False
    """Every threshold is priced against this rule's (``alternatives`` in the JSON), by its ``threshold_alone``."""

    def report_words(self, margin: float | None, block_size: int) -> str:
        """What the run page says of the rule that made a threshold."""
        if not self.report:
            return f"The rule (--rule {self.name}): {self.summary}."
        return self.report.format(margin=margin, block_size=block_size)


TABLE: tuple[Rule, ...] = (
    Rule(
        "expected-cost",
        f"{__name__}.expected_cost",
        "the block multiple with the least expected cost over the fit's draws",
        report="The rule (expected cost, the default): where the legs' mean costs, the ones the router pays, cross "
        "for good, rounded to a multiple of the block size {block_size}, never at or below a length where the pull "
        "was measured to lose (docs/emit.md, how the threshold is chosen).",
    ),
    Rule(
        "upper",
        f"{__name__}.upper",
        "the break-even interval's upper end x (1 + --margin), kvcal's earlier rule",
        takes_margin=True,
        report="The rule (--rule upper): the upper end of the break-even's interval, raised by the margin "
        "{margin:g} and rounded up to a multiple of the block size {block_size}, never below the shortest measured "
        "length from which the pull won (docs/emit.md).",
        mix_on_point_curves=True,
        alternative=True,
    ),
)
"""Every rule, the default first."""

DEFAULT_RULE = TABLE[0].name


def rule_names() -> tuple[str, ...]:
    return tuple(rule.name for rule in TABLE)


def rule_help() -> str:
    """``--rule``'s help: the choices, then each rule's clause."""
    clauses = "; ".join(f"{rule.name}: {rule.summary}" for rule in TABLE)
    return f"How the threshold is chosen: {' or '.join(rule_names())}. {clauses}."


def docs_list() -> str:
    """docs/emit.md's list of rules (a test keeps the page equal to it)."""
    lines = []
    for rule in TABLE:
        notes = [n for n, on in (("the default", rule is TABLE[0]), ("takes `--margin`", rule.takes_margin)) if on]
        lines.append(f"* `{rule.name}`" + (f" ({', '.join(notes)})" if notes else "") + f": {rule.summary}.")
    return "\n".join(lines)


def rule_named(name: str) -> Rule:
    for rule in TABLE:
        if rule.name == name:
            return rule
    raise InputError(f"unknown --rule {name!r}; choose one of {', '.join(rule_names())}")


def resolve_rule(name: str, margin: float | None) -> float | None:
    """The one check of ``--rule`` and ``--margin``: the margin the rule uses (its default when none is given, None
    for a rule without one); InputError for an unknown rule, a stray --margin or a margin out of bounds."""
    rule = rule_named(name)
    if not rule.takes_margin:
        if margin is not None:
            takers = [r.name for r in TABLE if r.takes_margin]
            raise InputError(
                f"--margin applies only to {' or '.join(f'--rule {t}' for t in takers)} (the {name} rule has no "
                f"margin); e.g. kvcal emit-config FIT --rule {takers[0]} --margin {DEFAULT_MARGIN:g}"
            )
        return None
    return validate_margin(DEFAULT_MARGIN if margin is None else margin)


@dataclass(frozen=True)
class ResolvedRule:
    """``--rule`` and ``--margin`` once checked: the rule's table entry and the margin it uses (None: it takes none).

    A command's settings resolve it when they are built, so that the check runs once per command."""

    rule: Rule
    margin: float | None

    @classmethod
    def of(cls, name: str, margin: float | None) -> ResolvedRule:
        """:func:`resolve_rule`'s check and its margin; InputError as it gives."""
        return cls(rule_named(name), resolve_rule(name, margin))


def apply_rule(
    name: str, w: Working, *, margin: float | None, deltas: Deltas | None, allow_extrapolation: bool
) -> Chosen:
    """Run the rule called ``name`` on the working state (its module imported now)."""
    module = importlib.import_module(rule_named(name).module)
    chosen: Chosen = module.choose(w, margin=margin, deltas=deltas, allow_extrapolation=allow_extrapolation)
    return chosen


def threshold_alone(rule: Rule, w: Working, *, allow_extrapolation: bool) -> int:
    """An alternative rule's threshold at its default margin, unpriced (its module imported now); it raises where
    the rule refuses."""
    module = importlib.import_module(rule.module)
    threshold: int = module.threshold_alone(
        w, margin=resolve_rule(rule.name, None), allow_extrapolation=allow_extrapolation
    )
    return threshold
