"""emit-config's verdict on a fit, for the adaptive campaign's stop (kvcal.sweep.regret_stop.Judge).

The default rule's threshold (:mod:`kvcal.threshold`, the package below the sweep) and its expected regret. It
lives in the sweep because it returns the sweep's :class:`~kvcal.sweep.regret_stop.Verdict`; the commands that run
or simulate campaigns hand it in, and a campaign handed none stops on the width alone.
"""

from __future__ import annotations

import numpy as np

from kvcal.errors import NoThreshold, NotRecommended
from kvcal.records.fit import FitResult
from kvcal.sweep.regret_stop import Verdict, regret_mc_error
from kvcal.threshold.choose import compute_threshold
from kvcal.threshold.regret import RegretModel


def emit_judge(fit: FitResult) -> Verdict:
    """The default rule's threshold on ``fit`` and its expected regret (a fraction of TTFT) with its MC error."""
    try:
        chosen = compute_threshold(fit)
    except (NoThreshold, NotRecommended) as refusal:
        return Verdict(None, refusal=str(refusal))
    threshold, decision = chosen.min_cached_token_delta, chosen.decision
    if decision is None or not decision.draws.from_bootstrap:
        return Verdict(threshold)
    model = RegretModel(decision.model)  # the decision's own draws and deltas: priced as it was chosen
    shares = model.regret_ms(threshold) / np.maximum(model.best_cost, 1e-12)
    return Verdict(threshold, float(shares.mean()), regret_mc_error(shares))
