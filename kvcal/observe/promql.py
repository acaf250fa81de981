"""Each figure of ``kvcal observe`` as PromQL, per pod and fleet-wide, generated from :mod:`kvcal.observe.catalog`.

What ``kvcal observe --dashboard`` puts in its panels (:mod:`kvcal.observe.dashboard`). Every
series is the one observe reads (:data:`kvcal.observe.catalog.ALL_QUERIES`), under both
spellings of its name as observe's ``vllm[:_]...`` matches them, with the dashboard's
``$selector`` variable added to its matchers; a ratio is a ratio of ``rate(...[$__rate_interval])``
sums (the increases' ratio: the window's length cancels). How it follows observe's arithmetic:

- **Both spellings, joined with ``or``.** ``rate({__name__=~"vllm[:_]x"}[...])`` drops the
  name, and Prometheus 2.42 refuses a result holding two series that differ only by it
  ("vector cannot contain metrics with the same labelset", checked on Debian's 2.42 while a
  target exposed both): each spelling is its own selector, ``rate(vllm:x...) or rate(vllm_x...)``.
- **Pods as observe names them**: the ``pod`` label, else ``instance``, copied into
  ``kvcal_pod`` with two ``label_replace`` before each ``sum by (kvcal_pod)``.
- **How a pod pulls**: a figure's P2P-tier ratio is kept on pods that expose the tier's
  series (``and on(kvcal_pod)``), its NIXL ratio on the others (``unless``), as
  :data:`kvcal.observe.catalog.KIND_ROLES` tells observe; a ratio marked ``unless_pulled``
  leaves out pods that pulled tokens but not through the tier (P/D decode pods).
- **Missing, never 0 or NaN**: a denominator of zero is filtered (``> 0``), an absent
  series leaves no value; a series created at its first event (``ABSENT_IS_ZERO``) counts 0
  when absent. The fleet adds numerators and denominators over the pods that give both.
- **TP**: NIXL's time is pooled over tensor-parallel ranks, so the ratios that pool them are
  divided by the ``$tp`` variable (the fit's TP, else 1).
- **Quantiles**: TTFT is ``histogram_quantile`` over the buckets' rates by ``le`` (per pod,
  or summed over pods); the queue is ``quantile_over_time`` of each pod's readings (its
  engines added, a subquery at ``$__interval``). PromQL cannot pool samples across series
  and time, so the fleet's queue is the quantile across pods of each pod's: equal to
  observe's pooled figure when the pods' queues are alike, between the lowest and highest
  pod's otherwise.

Where the panels differ from observe: ``rate`` extrapolates to the range's edges (observe
counts exactly), and a restart whose new count passed the old one before a scrape is seen
only through ``_created`` series, which observe reads and PromQL cannot (Prometheus 2.50's
``created-timestamp-zero-ingestion`` feature closes it on the server's side).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass

from kvcal.observe.catalog import ABSENT_IS_ZERO, ALL_QUERIES, EXTERNAL, KIND_ROLES, Figure, Part, Quantile, Ratio

POD = "kvcal_pod"
RANGE = "$__rate_interval"
STEP = "$__interval"
SELECTOR = "$selector"
TP = "$tp"
VARIABLES = (RANGE, STEP, SELECTOR, TP)
"""The Grafana variables the expressions hold (a test substitutes them to evaluate one on Prometheus)."""
P2P_KIND = "p2p-tier"


@dataclass(frozen=True)
class Queries:
    """A figure's two expressions: one series per pod (labelled ``kvcal_pod``) and the fleet's one."""

    per_pod: str
    fleet: str


def spellings(query: str, labels: tuple[tuple[str, str], ...] = ()) -> tuple[str, ...]:
    """The selectors of ``query``'s series under each spelling of its name (``vllm:x`` and ``vllm_x``, every
    colon either way, as observe's ``vllm[:_]x`` matches), with ``labels`` and ``$selector`` added."""
    name, _, rest = query.partition("{")
    matchers = ([rest.rstrip("}")] if rest else []) + [f"{k}={json.dumps(v)}" for k, v in labels] + [SELECTOR]
    pieces = name.split(":")
    names = ["".join(itertools.chain.from_iterable(zip(pieces, (*seps, "")))) for seps in _separators(len(pieces))]
    return tuple(f"{one}{{{','.join(matchers)}}}" for one in names)


def _separators(parts: int) -> list[tuple[str, ...]]:
    return list(itertools.product(":_", repeat=parts - 1))


def _by_pod(inner: str, also: str = "") -> str:
    """``inner``'s series summed per pod (the ``pod`` label, else ``instance``, as observe names pods)."""
    named = f'label_replace(label_replace({inner}, "{POD}", "$1", "instance", "(.*)"), "{POD}", "$1", "pod", "(.+)")'
    return f"sum by ({POD}{also}) ({named})"


def _each(function: str, role: str, labels: tuple[tuple[str, str], ...] = ()) -> str:
    """``function`` over ``role``'s range under each spelling, joined (``or``: one series per label set)."""
    return " or ".join(f"{function}({one}[{RANGE}])" for one in spellings(ALL_QUERIES[role], labels))


def rate(role: str, labels: tuple[tuple[str, str], ...] = ()) -> str:
    """The per-second increase of ``role``'s series (with ``labels``) per pod."""
    return _by_pod(_each("rate", role, labels))


def _present(roles: tuple[str, ...]) -> str:
    """1 for each pod that exposes a series of ``roles`` in the range."""
    return f"group by ({POD}) ({_by_pod(' or '.join(_each('present_over_time', role) for role in roles))})"


P2P_PODS = _present(KIND_ROLES[P2P_KIND])
DECODE_PODS = f"(({rate(EXTERNAL.role, EXTERNAL.labels)} > 0) unless on({POD}) {P2P_PODS})"
"""Pods that took prompt tokens from a peer but not through the P2P tier: NIXL's consumers (P/D decode pods)."""


def _added(parts: tuple[Part, ...], reference: str) -> str:
    """The parts' rates added with their signs, per pod; a part that may be absent (ABSENT_IS_ZERO) counts 0 on
    ``reference``'s pods. Each part is summed per (pod, instance) and the pods named once, on the sum."""
    terms = []
    for part in parts:
        term = f"sum by (pod, instance) ({_each('rate', part.role, part.labels)})"
        if part.role in ABSENT_IS_ZERO:
            term = f"({term} or 0 * {reference})"
        terms.append(("- " if part.sign < 0 else "+ ") + term)
    return _by_pod(" ".join(terms).removeprefix("+ "))


def _sides(ratio: Ratio) -> tuple[str, str | None]:
    """A ratio's numerator and denominator per pod, each divided by ``$tp`` where it pools the ranks."""
    first = ratio.numerator[0]
    reference = f"sum by (pod, instance) ({_each('rate', first.role, first.labels)})"
    if ratio.denominator is not None:
        first = ratio.denominator[0]
        reference = f"sum by (pod, instance) ({_each('rate', first.role, first.labels)})"
    bottom = None if ratio.denominator is None else _added(ratio.denominator, reference)
    top = _added(ratio.numerator, reference)
    if ratio.per_rank in ("numerator", "both"):
        top = f"({top} / {TP})"
    if ratio.per_rank == "both" and bottom is not None:
        bottom = f"({bottom} / {TP})"
    return top, bottom


def _kept(expression: str, kind: str, figure: Figure, ratio: Ratio) -> str:
    """``expression`` on the pods whose kind reads this ratio (module docstring)."""
    if kind == P2P_KIND:
        expression = f"({expression} and on({POD}) {P2P_PODS})"
    elif P2P_KIND in figure.ratios:
        expression = f"({expression} unless on({POD}) {P2P_PODS})"
    if ratio.unless_pulled:
        expression = f"({expression} unless on({POD}) {DECODE_PODS})"
    return expression


def _joined(figure: Figure) -> tuple[str, str | None]:
    """The figure's numerator and denominator per pod, each pod reading its kind's ratio."""
    tops, bottoms = [], []
    for kind, ratio in figure.ratios.items():
        top, bottom = _sides(ratio)
        tops.append(_kept(top, kind, figure, ratio))
        if bottom is not None:
            bottoms.append(_kept(bottom, kind, figure, ratio))
    return " or ".join(tops), (" or ".join(bottoms) if bottoms else None)


def _scaled(scale: float, expression: str) -> str:
    return expression if scale == 1 else f"{scale:g} * {expression}"


def ratio_queries(figure: Figure) -> Queries:
    """A ratio figure per pod and fleet-wide: numerators over denominators, the fleet's added over the pods that
    give both."""
    top, bottom = _joined(figure)
    scale = next(iter(figure.ratios.values())).scale
    if bottom is None:  # a rate over the window's seconds
        return Queries(_scaled(scale, f"({top})"), _scaled(scale, f"sum({top})"))
    per_pod = _scaled(scale, f"({top}) / (({bottom}) > 0)")
    fleet = _scaled(scale, f"sum(({top}) and on({POD}) ({bottom})) / (sum(({bottom}) and on({POD}) ({top})) > 0)")
    return Queries(per_pod, fleet)


def quantile_queries(figure: Quantile) -> Queries:
    """A quantile figure per pod and fleet-wide (module docstring: the fleet's queue)."""
    if figure.of == "histogram":
        per_pod = f"histogram_quantile({figure.q:g}, {_by_pod(_each('rate', figure.role), ', le')})"
        fleet = f"histogram_quantile({figure.q:g}, sum by (le) ({_each('rate', figure.role)}))"
        # no observation in the range is NaN: no value, as observe's figure is missing
        return Queries(_scaled(figure.scale, f"({per_pod} >= 0)"), _scaled(figure.scale, f"({fleet} >= 0)"))
    readings = _by_pod(" or ".join(f"{one} * 1" for one in spellings(ALL_QUERIES[figure.role])))  # * 1: no name
    per_pod = f"quantile_over_time({figure.q:g}, ({readings})[{RANGE}:{STEP}])"
    return Queries(_scaled(figure.scale, per_pod), _scaled(figure.scale, f"quantile({figure.q:g}, {per_pod})"))


def queries(figure: Figure | Quantile) -> Queries:
    """Any figure of the catalog as PromQL."""
    return quantile_queries(figure) if isinstance(figure, Quantile) else ratio_queries(figure)
