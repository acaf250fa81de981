"""The session cost: what the first pull on a fresh session adds (cold probes, :mod:`kvcal.sweep.coldstart`).

Each cold sample is one first pull whose bytes were proven; its excess over the warm pull
curve at its own length is one measurement of the set-up (handshake, registration):

    session_cost = mean_i( cold_ttft_i - pull(n_i) )

with a Student t interval at the fit's confidence when there are two samples or more
(several pairs of a class, or ``--cold-sessions N``), none with one. A cold pull that
followed a failed try (attempt above 0) is kept out: the failed handshake may have done
part of the set-up.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable

import numpy as np
from scipy import stats

from kvcal.costs.cost_curve import cost_ms
from kvcal.records.fit import CurveFit
from kvcal.records.fit_links import SessionCost
from kvcal.records.run import ProbeRecord


def session_cost(records: Iterable[ProbeRecord], pull: CurveFit, confidence: float) -> SessionCost | None:
    """The session cost of the cold pulls among ``records`` against the warm ``pull`` curve; None without one."""
    cold = [r for r in records if r.session == "cold" and r.valid and r.ttft_ms is not None]
    first_tries = [r for r in cold if r.attempt == 0]
    if not first_tries:
        return None
    excess = np.array(
        [float(r.ttft_ms or 0.0) - float(cost_ms(pull.coefficients, r.prefix_tokens)) for r in first_tries]
    )  # ttft_ms is set: cold holds only valid, timed pulls
    mean = float(excess.mean())
    interval = None
    if len(excess) >= 2:
        half = float(stats.t.ppf((1 + confidence) / 2, len(excess) - 1) * excess.std(ddof=1) / math.sqrt(len(excess)))
        interval = [round(mean - half, 3), round(mean + half, 3)]
    proofs = Counter(r.bytes_metric for r in first_tries if r.bytes_metric)
    return SessionCost(
        value_ms=round(mean, 3),
        ci=interval,
        n_cold=len(first_tries),
        n_retried=len(cold) - len(first_tries),
        lengths=sorted({r.prefix_tokens for r in first_tries}),
        pulls_by_proof=dict(sorted(proofs.items())),
    )
