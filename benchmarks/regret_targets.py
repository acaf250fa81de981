"""Engine time to a regret target: ``--target-regret`` against ``--target-width``, the uniform ladder and an oracle.

Used by ``adaptive_crossovers.py --target-regret R``. On each truth (the curve shapes of
``adaptive_efficiency.py`` with the pull's floor moved so the curves cross at ``--at``):

* ``regret``: ``kvcal sweep --adaptive --target-regret R`` (the same Controller, emit-config's judge);
* ``width``: ``kvcal sweep --adaptive --target-width W`` (the old default stop, judged the same way
  at its end: the expected regret of emit-config's threshold on its final fit);
* ``ladder``: the default uniform ladder, whole passes added (doubling, then bisection) until the
  judge's regret plus its Monte Carlo error is within R;
* ``oracle``: every probe at the true break-even, noise and slopes known, as many as make the
  expected regret of a threshold placed at the estimate R: with the estimate's error sigma the
  regret is w(n*) |D'(n*)| sigma^2 / 2 over the best expected TTFT (w the log-uniform deltas'
  density over the allowed range), so sigma^2 = 2 R TTFT / (w D') and m = 2 (cv T* / (D' sigma))^2
  probes a leg. It ignores the rounding to a block, which no design escapes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kvcal.sweep.judge import emit_judge
from kvcal.engines.sim import SimPair
from kvcal.fit import fit_table
from kvcal.fit.tables import from_rows
from kvcal.records.fit import FIT_DEFAULTS
from kvcal.records.run import Leg, RunSetup
from kvcal.plan.priors import Prior
from kvcal.plan.simulate_designs import default_ladder, simulate_adaptive
from kvcal.sweep.regret_stop import meets


@dataclass(frozen=True)
class Result:
    engine_s: float
    n_probes: int
    regret: float | None
    stop: str | None


def adaptive(prior: Prior, target_width: float, target_regret: float | None, seed: int) -> Result:
    run = simulate_adaptive(prior, target_width, seed, target_regret=target_regret, judge=emit_judge)
    return Result(run.engine_s, run.n_probes, run.regret, run.stop)


def ladder(prior: Prior, target_regret: float, seed: int, max_passes: int = 64) -> Result:
    pair = SimPair(prior.costs, block_size=prior.block_size, seed=seed, max_model_len=prior.high + prior.block_size)
    lengths = default_ladder(prior)
    passes: list[list[dict]] = []

    def judged(k: int) -> tuple[Result, bool]:
        while len(passes) < k:
            rep = len(passes)
            passes.append([{"prefix_tokens": n, "leg": leg.value, "ttft_ms": m.ttft_ms, "rep": rep,
                            "bytes_moved": m.bytes_moved}
                           for n in lengths for leg in (Leg.RECOMPUTE, Leg.PULL) for m in [pair.measure(leg, [0] * n)]])
        rows = [row for one in passes[:k] for row in one]
        fit = fit_table(from_rows(rows, setup=RunSetup(engine="sim", model="sim", block_size=prior.block_size)),
                        **FIT_DEFAULTS.model_dump())
        verdict = emit_judge(fit)
        done = verdict.threshold is not None and meets(verdict.regret, verdict.regret_mc_error, target_regret)
        return Result(sum(r["ttft_ms"] for r in rows) / 1e3, len(rows), verdict.regret, "target-regret"), done

    failed, k = 1, 2
    while not judged(k)[1]:
        if k >= max_passes:
            last = judged(k)[0]
            return Result(last.engine_s, last.n_probes, last.regret, "max-passes")
        failed, k = k, min(2 * k, max_passes)
    while k - failed > 1:
        mid = (failed + k) // 2
        failed, k = (failed, mid) if judged(mid)[1] else (mid, k)
    return judged(k)[0]


def oracle(prior: Prior, target_regret: float) -> float | None:
    """The oracle's engine time in s (module docstring); None without a crossover inside the range."""
    c, n = prior.costs, prior.truth
    if n is None or not prior.low < n < prior.high:
        return None
    deltas = np.geomspace(prior.low, prior.high, 2048)
    weights = 1.0 / deltas
    weights /= weights.sum()
    best_ttft = float(np.sum(weights * np.minimum(c.recompute_ms(deltas), c.pull_ms(deltas))))
    density = 1.0 / (n * math.log(prior.high / prior.low))
    slope = (c.recompute_per_token_us - c.pull_per_token_us) / 1e3 + 2 * c.recompute_per_token2_ns * n / 1e6
    sigma2 = 2 * target_regret * best_ttft / (density * slope)
    t_star = float(c.pull_ms(n))
    m = max(1, math.ceil(2 * (c.noise_cv * t_star / slope) ** 2 / sigma2))
    return 2 * m * t_star / 1e3
