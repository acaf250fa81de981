"""``kvcal plan``: each design's campaigns simulated on a prior's curves and compared, before booking engines.

Stage owned: ``kvcal plan`` (and ``benchmarks/adaptive_efficiency.py`` reuses the
simulators). A prior (:mod:`kvcal.plan.priors`) is a pair of cost curves with a noise level; it comes from a
``kvcal predict`` profile pair or from an earlier run or fit. Campaigns are then run
in memory on a simulated pair with exactly those curves (:class:`kvcal.engines.sim.SimPair`):

* ``adaptive``: the :class:`kvcal.sweep.adaptive.Controller` that ``kvcal sweep
  --adaptive`` uses, until its stop rule (the width, or with a regret target and emit-config's
  judge, :mod:`kvcal.sweep.regret_stop`, the expected regret of its threshold);
* ``ladder``: the default uniform ladder (``kvcal sweep`` without ``--adaptive``),
  whole passes over every length added one at a time until the standard fit's
  interval is as narrow as the target (at least 2 passes, so every length has reps).
  Its lengths are those the default design ends with (:func:`default_ladder`): the
  ladder from 256 tokens up to the limit, grown below 256 while the pull wins there;
* ``ladder-3``: the default ladder at its default 3 reps, whatever width it reaches;
* ``oracle``: every probe at the true break-even with the slopes known, the floor no
  design can beat (analytic, see :func:`oracle`).

Engine time is the sum of the simulated TTFTs, as in a real run's probes.jsonl.
Every figure is an estimate from the prior; a real pair differs by as much as the
prior is wrong.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from pydantic import Field
from scipy import stats

from kvcal.engines.sim import SimPair
from kvcal.errors import InputError
from kvcal.fit.bootstrap import t_quantile
from kvcal.fit.fitting import fit_table
from kvcal.fit.ladder_steps import lengths_below
from kvcal.fit.tables import from_rows
from kvcal.plan.priors import Prior
from kvcal.records.fit import FIT_DEFAULTS, FitResult, FitSettings
from kvcal.records.run import Leg, Record, RunSetup
from kvcal.sweep.adaptive import Controller, StopRules, relative_width
from kvcal.sweep.lengths.probe_plan import default_prefix_lengths
from kvcal.sweep.regret_stop import Judge

PLAN_SCHEMA = "kvcal.plan/1"
SCREEN_RESAMPLES = 200  # simulations choose probes on a cheaper bootstrap; every stop is confirmed on the standard fit
COVERAGE_CAMPAIGNS = 40  # below this many campaigns a coverage figure is too loose to judge an interval by


@dataclass(frozen=True)
class SimulatedCampaign:
    """One simulated campaign's outcome."""

    design: str
    n_probes: int
    engine_s: float
    width: float | None
    break_even: float | None
    ci: list[float] | None
    stop: str | None
    covered: bool | None  # the truth inside the final interval (None without an interval)
    search_s: float = 0.0  # adaptive: engine time of the seed and the climb, spent finding the crossover
    regret: float | None = None  # the expected regret of emit-config's threshold (with a judge), a share of TTFT


class Summary(Record):
    """One design over many simulated campaigns: medians and 10-90% ranges."""

    design: str
    campaigns: int
    probes_median: float
    probes_p10_p90: list[float]
    engine_s_median: float
    engine_s_p10_p90: list[float]
    width_median: float | None
    reached_target_share: float
    coverage: float | None
    stop_reasons: dict[str, float] = Field(default_factory=dict)
    regret_median: float | None = None


class CampaignPlan(Record):
    """What ``kvcal plan --json`` prints."""

    schema_: str = PLAN_SCHEMA
    prior: str
    curves: dict[str, float]
    true_break_even_tokens: float | None
    allowed_range: list[int]
    target_width: float
    target_regret: float | None = None
    confidence: float
    designs: list[Summary]
    notes: list[str]


def _campaign(
    design: str,
    fit: FitResult | None,
    n_probes: int,
    engine_ms: float,
    stop: str | None,
    truth: float | None,
    search_ms: float = 0.0,
    regret: float | None = None,
) -> SimulatedCampaign:
    ci = fit.break_even_ci if fit else None
    covered = None if ci is None or truth is None else bool(ci[0] <= truth <= ci[1])
    return SimulatedCampaign(
        design,
        n_probes,
        engine_ms / 1e3,
        relative_width(fit) if fit else None,
        fit.break_even_tokens if fit else None,
        ci,
        stop,
        covered,
        search_ms / 1e3,
        regret,
    )


def _setup(prior: Prior) -> RunSetup:
    return RunSetup(engine="sim", model="sim", block_size=prior.block_size)


def _rows_from(pair: SimPair, n: int, leg: Leg, count: int, rep0: int) -> list[dict]:
    ids = [0] * n
    out = []
    for rep in range(rep0, rep0 + count):
        m = pair.measure(leg, ids)
        out.append(
            {"prefix_tokens": n, "leg": leg.value, "ttft_ms": m.ttft_ms, "rep": rep, "bytes_moved": m.bytes_moved}
        )
    return out


def simulate_adaptive(
    prior: Prior,
    target: float,
    seed: int,
    *,
    max_probes: int = 2000,
    screen_resamples: int | None = SCREEN_RESAMPLES,
    target_regret: float | None = None,
    judge: Judge | None = None,
) -> SimulatedCampaign:
    """One adaptive campaign on the prior's simulated pair, as ``kvcal sweep --adaptive`` would run it."""
    pair = SimPair(prior.costs, block_size=prior.block_size, seed=seed, max_model_len=prior.high + prior.block_size)
    rules = StopRules(target_width=target, target_regret=target_regret, max_probes=max_probes)
    controller = Controller(
        prior.low, prior.high, prior.block_size, rules, screen_resamples=screen_resamples, judge=judge
    )
    rows: list[dict] = []
    reps: dict[tuple[int, str], int] = {}
    engine_ms, search_ms, round_index = 0.0, 0.0, 0
    while True:
        table = from_rows(rows, setup=_setup(prior)) if rows else None
        step = controller.step(table, engine_seconds=engine_ms / 1e3, round_index=round_index)
        if step.stop:
            regret = step.verdict.regret if step.verdict else None
            return _campaign("adaptive", step.fit, len(rows), engine_ms, step.stop, prior.truth, search_ms, regret)
        for choice in step.choices:
            key = (choice.prefix_tokens, choice.leg.value)
            new = _rows_from(pair, choice.prefix_tokens, choice.leg, choice.count, reps.get(key, 0))
            reps[key] = reps.get(key, 0) + choice.count
            spent = sum(r["ttft_ms"] for r in new)
            engine_ms += spent
            search_ms += spent if step.kind != "design" else 0.0
            rows += new
        round_index += 1


def default_ladder(prior: Prior) -> list[int]:
    """The lengths ``kvcal sweep``'s default design ends with on the prior's curves.

    Its ladder up to the limit (:func:`kvcal.sweep.lengths.probe_plan.default_prefix_lengths`), grown an
    octave at a time below its shortest length while the pull wins there, never below the
    allowed range (:mod:`kvcal.sweep.lengths.grow_below`). A sweep decides each growth on its probes'
    medians; the plan decides it on the noise-free curves. A ladder of one length grows an
    octave whoever wins there: a limit of 257-320 tokens leaves the one length 256, which no
    fit can use.
    """
    ladder = [n for n in default_prefix_lengths(prior.block_size, prior.high + 1) if n >= prior.low]
    while ladder and (len(ladder) < 2 or prior.costs.pull_ms(ladder[0]) < prior.costs.recompute_ms(ladder[0])):
        below = [n for n in lengths_below(ladder[0], prior.block_size) if n >= prior.low]
        if not below:
            break
        ladder = below + ladder
    return ladder


def simulate_ladder(
    prior: Prior,
    target: float | None,
    seed: int,
    *,
    lengths: list[int] | None = None,
    reps: int = 3,
    max_passes: int = 128,
    screen_resamples: int | None = SCREEN_RESAMPLES,
) -> SimulatedCampaign:
    """The uniform ladder: ``reps`` passes (target None), or the fewest passes whose standard fit reaches ``target``.

    Passes are drawn once, in order; the fewest is found by doubling then bisection on the
    screened fit (a width that shrinks with passes, not strictly: the bisection may land a
    pass or two either side of the first crossing), confirmed on the standard fit.
    """
    pair = SimPair(prior.costs, block_size=prior.block_size, seed=seed, max_model_len=prior.high + prior.block_size)
    ladder = lengths or default_ladder(prior)
    passes: list[list[dict]] = []

    def upto(k: int) -> tuple[list[dict], float]:
        while len(passes) < k:
            rep = len(passes)
            passes.append(
                [row for n in ladder for leg in (Leg.RECOMPUTE, Leg.PULL) for row in _rows_from(pair, n, leg, 1, rep)]
            )
        rows = [row for one in passes[:k] for row in one]
        return rows, sum(row["ttft_ms"] for row in rows)

    def fit(k: int, resamples: int | None) -> tuple[FitResult, int, float]:
        rows, engine_ms = upto(k)
        settings = FitSettings(n_resamples=resamples or FIT_DEFAULTS.n_resamples)  # kvcal fit's level and seed
        return fit_table(from_rows(rows, setup=_setup(prior)), settings), len(rows), engine_ms

    def reached(k: int, resamples: int | None) -> bool:
        width = relative_width(fit(k, resamples)[0])
        return width is not None and target is not None and width <= target

    if target is None:
        result, n, engine_ms = fit(reps, None)
        return _campaign(f"ladder-{reps}", result, n, engine_ms, None, prior.truth)
    failed, k = 1, 2
    while not reached(k, screen_resamples):
        width = relative_width(fit(k, screen_resamples)[0])
        hopeless = width is None or k * (width / target) ** 2 > 2 * max_passes  # 1/sqrt(passes): out of reach
        if k >= max_passes or (hopeless and k >= 8):
            result, n, engine_ms = fit(k, None)
            return _campaign("ladder", result, n, engine_ms, "max-passes", prior.truth)
        failed, k = k, min(2 * k, max_passes)
    while k - failed > 1:
        mid = (failed + k) // 2
        failed, k = (failed, mid) if reached(mid, screen_resamples) else (mid, k)
    while True:
        result, n, engine_ms = fit(k, None)
        width = relative_width(result)
        if (width is not None and width <= target) or k >= max_passes:
            return _campaign(
                "ladder", result, n, engine_ms, "target-width" if k < max_passes else "max-passes", prior.truth
            )
        k += 1


def oracle(
    prior: Prior, target: float, confidence: float = FIT_DEFAULTS.confidence, *, noise_known: bool = True
) -> SimulatedCampaign:
    """The floor: m probes per leg at the true break-even n*, slopes known, noise cv on both legs.

    There recompute and pull cost the same T*, so the two means each have sd cv T* / sqrt(m)
    and n* = n + D / D'(n*) has sd cv T* sqrt(2 / m) / D'(n*). A two-sided interval of
    relative width W then needs m = 2 (2 q cv T* / (W n* D'(n*)))^2 and costs 2 m T* of
    engine time. With the noise known q is the normal quantile z: the floor no design
    beats. With ``noise_known=False`` the oracle estimates each leg's noise from its own
    m probes and q is Student's t on m - 1 df, as kvcal's fit charges any design for the
    weaker leg's estimated noise: the floor for a design whose interval comes from its
    own probes.
    """
    c, n = prior.costs, prior.truth
    name = "oracle" if noise_known else "oracle-t"
    if n is None or n <= 0:
        return SimulatedCampaign(name, 0, 0.0, None, n, None, None, None)
    t_star = float(c.pull_ms(n))
    slope = (c.recompute_per_token_us - c.pull_per_token_us) / 1e3 + 2 * c.recompute_per_token2_ns * n / 1e6
    p = 0.5 * (1 + confidence)
    base = 2 * (2 * c.noise_cv * t_star / (target * n * slope)) ** 2  # m per unit q^2
    m = max(1, math.ceil(base * float(stats.norm.ppf(p)) ** 2))
    while not noise_known and (m < 2 or m < base * float(t_quantile(m - 1, confidence)) ** 2):
        m += 1  # t shrinks as m grows: the first m that meets its own quantile
    return SimulatedCampaign(name, 2 * m, 2 * m * t_star / 1e3, target, n, None, "analytic", None)


def summarize(design: str, runs: list[SimulatedCampaign], target: float, target_regret: float | None = None) -> Summary:
    """Medians over the campaigns; "reached" reads the regret where a regret target is given."""
    probes = np.array([r.n_probes for r in runs], dtype=float)
    engine = np.array([r.engine_s for r in runs], dtype=float)
    widths = [r.width for r in runs if r.width is not None]
    covered = [r.covered for r in runs if r.covered is not None]
    return Summary(
        design=design,
        campaigns=len(runs),
        probes_median=float(np.median(probes)),
        probes_p10_p90=[float(x) for x in np.quantile(probes, [0.1, 0.9])],
        engine_s_median=float(np.median(engine)),
        engine_s_p10_p90=[float(x) for x in np.quantile(engine, [0.1, 0.9])],
        width_median=float(np.median(widths)) if widths else None,
        reached_target_share=float(np.mean([_reached(r, target, target_regret) for r in runs])),
        coverage=float(np.mean(covered)) if covered else None,
        stop_reasons={k: float(np.mean([r.stop == k for r in runs])) for k in sorted({str(r.stop) for r in runs})},
        regret_median=_median([r.regret for r in runs if r.regret is not None]),
    )


def _reached(run: SimulatedCampaign, target: float, target_regret: float | None) -> bool:
    if target_regret is not None:
        return run.regret is not None and run.regret <= target_regret
    return run.width is not None and run.width <= target


def _median(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None


def coverage_note(campaigns: int, confidence: float) -> str | None:
    """A warning when the campaigns are too few for their coverage to be read (binomial 90% spread at nominal)."""
    if campaigns >= COVERAGE_CAMPAIGNS:
        return None
    spread = float(stats.norm.ppf(0.95)) * math.sqrt(confidence * (1 - confidence) / campaigns)
    return (
        f"coverage from {campaigns} campaign(s) is uncertain by about +-{spread:.0%} around the nominal "
        f"{confidence * 100:g}%; give --campaigns {COVERAGE_CAMPAIGNS} or more to judge it"
    )


def plan_campaigns(
    prior: Prior,
    target: float,
    campaigns: int = 10,
    seed: int = 0,
    *,
    target_regret: float | None = None,
    judge: Judge | None = None,
) -> CampaignPlan:
    """Simulate ``campaigns`` adaptive and uniform campaigns on the prior and summarise each design; with
    ``target_regret`` (and emit-config's ``judge``) the adaptive ones stop on the regret, the others on the width."""
    if campaigns < 1:
        raise InputError(f"--campaigns must be at least 1, got {campaigns}")
    if not 0 < target < 10:
        raise InputError(f"--target-width must lie between 0 and 10, got {target}")
    if target_regret is not None and not (0 < target_regret < 1 and judge is not None):
        raise InputError(f"--target-regret must lie between 0 and 1 (exclusive), got {target_regret}")
    seeds = [seed + i for i in range(campaigns)]
    notes = list(prior.notes) + [note for note in [coverage_note(campaigns, FIT_DEFAULTS.confidence)] if note]
    runs = [simulate_adaptive(prior, target, s, target_regret=target_regret, judge=judge) for s in seeds]
    designs = [summarize("adaptive", runs, target, target_regret)]
    inside = prior.truth is not None and prior.low < prior.truth < prior.high
    ladder = default_ladder(prior)
    if len(ladder) < 2:  # one length and no room below it within the range: a sweep could not fit it either
        only = ladder[0] if ladder else "-"
        notes.append(
            f"the default ladder has one length within {prior.low}-{prior.high} tokens ({only}), and no fit "
            f"can use one: no ladder is simulated (kvcal sweep --prefix-lengths {prior.low},{prior.high} "
            "measures two)"
        )
    else:
        if inside:
            designs.append(summarize("ladder", [simulate_ladder(prior, target, s) for s in seeds], target))
        designs.append(summarize("ladder-3", [simulate_ladder(prior, None, s) for s in seeds], target))
    if inside:
        designs.append(summarize("oracle", [oracle(prior, target)], target))
    else:
        where = "below the shortest" if prior.truth is not None and prior.truth <= prior.low else "beyond the longest"
        notes.append(
            f"the prior's break-even lies {where} allowed length: an adaptive campaign stops once its "
            "interval shows that, so no width is targeted and no ladder or oracle is scaled to it"
        )
    c = prior.costs
    return CampaignPlan(
        prior=prior.label,
        curves={k: float(v) for k, v in c.model_dump().items() if isinstance(v, (int, float))},
        true_break_even_tokens=None if prior.truth is None else round(prior.truth, 1),
        allowed_range=[prior.low, prior.high],
        target_width=target,
        target_regret=target_regret,
        confidence=FIT_DEFAULTS.confidence,
        designs=designs,
        notes=notes,
    )
