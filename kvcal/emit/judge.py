"""emit-config's verdict on a fit, for the adaptive campaign's stop (kvcal.sweep.regret_stop.Judge).

The sweep stage sits below emit, so the campaign cannot call the threshold rule itself:
the commands that run or simulate campaigns hand it this function.
"""

from __future__ import annotations

import numpy as np

from kvcal.emit.threshold import compute_threshold, regret_model
from kvcal.errors import NoThreshold, NotRecommended
from kvcal.fit_record import FitResult
from kvcal.sweep.regret_stop import Verdict, regret_mc_error


def emit_judge(fit: FitResult) -> Verdict:
    """The default rule's threshold on ``fit`` and its expected regret (a fraction of TTFT) with its MC error."""
    try:
        threshold = compute_threshold(fit).min_cached_token_delta
    except (NoThreshold, NotRecommended) as refusal:
        return Verdict(None, refusal=str(refusal))
    model = regret_model(fit)
    if model is None:
        return Verdict(threshold)
    shares = model.regret_ms(threshold) / np.maximum(model.best_cost, 1e-12)
    return Verdict(threshold, float(shares.mean()), regret_mc_error(shares))
