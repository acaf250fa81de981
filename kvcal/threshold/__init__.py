"""Choosing the threshold: the rules, their regret, the deltas they weigh and the class mix.

What it holds: :func:`~kvcal.threshold.choose.compute_threshold`, the one entry every command calls (the rule
chosen, its price and the alternatives), what the rules share (:mod:`~kvcal.threshold.parts`), the rules' names
and the checks on their numbers (:mod:`~kvcal.threshold.limits`), the default rule
(:mod:`~kvcal.threshold.rules.expected_cost` over :mod:`~kvcal.threshold.decision`) and ``--rule upper``
(:mod:`~kvcal.threshold.rules.upper`), the fit's draws of both legs' costs (:mod:`~kvcal.threshold.draw_costs`) and
any threshold's cost per draw (:mod:`~kvcal.threshold.candidate_costs`), regret (:mod:`~kvcal.threshold.regret`),
the deltas as weights (:mod:`~kvcal.threshold.delta_weights`) and read from a file (:mod:`~kvcal.threshold.deltas`),
and one threshold over a mix of link classes (:mod:`~kvcal.threshold.class_mix`).

May import: fit/, engines/, estimate/, the ground floor (records/, settings/, costs/, files/) and base; the sweep,
emit, gate, fleet, observe and report call it. Public API: :func:`compute_threshold` and :class:`Threshold`.
"""

from kvcal.lazy import public_api

_API = {
    "compute_threshold": "kvcal.threshold.choose",
    "Threshold": "kvcal.threshold.choose",
}
__all__ = list(_API)
__getattr__ = public_api(__name__, _API)
