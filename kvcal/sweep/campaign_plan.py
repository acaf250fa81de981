"""Plan a calibration before booking engines: simulate campaigns on prior curves and compare designs.

Stage owned: ``kvcal plan`` (and ``benchmarks/adaptive_efficiency.py`` reuses the
simulators). A prior is a pair of cost curves with a noise level; it comes from a
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
from pydantic import Field, ValidationError
from scipy import stats
from scipy.optimize import nnls

from kvcal.engines.sim import SimCosts, SimPair
from kvcal.errors import InputError
from kvcal.estimate.hfconfig import load_model
from kvcal.estimate.predict import PredictSettings, build_cost_model
from kvcal.estimate.profiles import load_profiles
from kvcal.fit import fit_table, load_or_fit
from kvcal.fit.bootstrap import t_quantile
from kvcal.fit.ladder import lengths_below
from kvcal.fit.tables import from_rows
from kvcal.records import FIT_DEFAULTS, FitResult, FitSettings, Leg, Record, RunSetup
from kvcal.runfolder import RunFolder
from kvcal.sweep.adaptive import Controller, StopRules, relative_width
from kvcal.sweep.design import allowed_range
from kvcal.sweep.plan import default_prefix_lengths
from kvcal.sweep.regret_stop import Judge

PLAN_SCHEMA = "kvcal.plan/1"
DEFAULT_LIMIT = 65536  # a prior fit whose run does not say its model limit: kvcal sweep's sim default
SCREEN_RESAMPLES = 200  # simulations choose probes on a cheaper bootstrap; every stop is confirmed on the standard fit
COVERAGE_CAMPAIGNS = 40  # below this many campaigns a coverage figure is too loose to judge an interval by


@dataclass(frozen=True)
class Prior:
    """Curves, noise and allowed lengths a campaign is planned on."""

    costs: SimCosts
    label: str
    low: int
    high: int
    block_size: int
    notes: tuple[str, ...] = ()

    @property
    def truth(self) -> float | None:
        return self.costs.true_break_even(upper=1e9)


@dataclass(frozen=True)
class Campaign:
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


def _campaign(design: str, fit: FitResult | None, n_probes: int, engine_ms: float, stop: str | None,
              truth: float | None, search_ms: float = 0.0, regret: float | None = None) -> Campaign:
    ci = fit.break_even_ci if fit else None
    covered = None if ci is None or truth is None else bool(ci[0] <= truth <= ci[1])
    return Campaign(design, n_probes, engine_ms / 1e3, relative_width(fit) if fit else None,
                    fit.break_even_tokens if fit else None, ci, stop, covered, search_ms / 1e3, regret)


def _setup(prior: Prior) -> RunSetup:
    return RunSetup(engine="sim", model="sim", block_size=prior.block_size)


def _rows_from(pair: SimPair, n: int, leg: Leg, count: int, rep0: int) -> list[dict]:
    ids = [0] * n
    out = []
    for rep in range(rep0, rep0 + count):
        m = pair.measure(leg, ids)
        out.append({"prefix_tokens": n, "leg": leg.value, "ttft_ms": m.ttft_ms, "rep": rep, "bytes_moved": m.bytes_moved})
    return out


def simulate_adaptive(prior: Prior, target: float, seed: int, *, max_probes: int = 2000,
                      screen_resamples: int | None = SCREEN_RESAMPLES, target_regret: float | None = None,
                      judge: Judge | None = None) -> Campaign:
    """One adaptive campaign on the prior's simulated pair, as ``kvcal sweep --adaptive`` would run it."""
    pair = SimPair(prior.costs, block_size=prior.block_size, seed=seed, max_model_len=prior.high + prior.block_size)
    rules = StopRules(target_width=target, target_regret=target_regret, max_probes=max_probes)
    controller = Controller(prior.low, prior.high, prior.block_size, rules, screen_resamples=screen_resamples,
                            judge=judge)
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

    Its ladder up to the limit (:func:`kvcal.sweep.plan.default_prefix_lengths`), grown an
    octave at a time below its shortest length while the pull wins there, never below the
    allowed range (:mod:`kvcal.sweep.reach`). A sweep decides each growth on its probes'
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


def simulate_ladder(prior: Prior, target: float | None, seed: int, *, lengths: list[int] | None = None,
                    reps: int = 3, max_passes: int = 128, screen_resamples: int | None = SCREEN_RESAMPLES) -> Campaign:
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
            passes.append([row for n in ladder for leg in (Leg.RECOMPUTE, Leg.PULL) for row in _rows_from(pair, n, leg, 1, rep)])
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
            return _campaign("ladder", result, n, engine_ms, "target-width" if k < max_passes else "max-passes",
                             prior.truth)
        k += 1


def oracle(prior: Prior, target: float, confidence: float = FIT_DEFAULTS.confidence, *,
           noise_known: bool = True) -> Campaign:
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
        return Campaign(name, 0, 0.0, None, n, None, None, None)
    t_star = float(c.pull_ms(n))
    slope = ((c.recompute_per_token_us - c.pull_per_token_us) / 1e3 + 2 * c.recompute_per_token2_ns * n / 1e6)
    p = 0.5 * (1 + confidence)
    base = 2 * (2 * c.noise_cv * t_star / (target * n * slope)) ** 2  # m per unit q^2
    m = max(1, math.ceil(base * float(stats.norm.ppf(p)) ** 2))
    while not noise_known and (m < 2 or m < base * float(t_quantile(m - 1, confidence)) ** 2):
        m += 1  # t shrinks as m grows: the first m that meets its own quantile
    return Campaign(name, 2 * m, 2 * m * t_star / 1e3, target, n, None, "analytic", None)


def summarize(design: str, runs: list[Campaign], target: float, target_regret: float | None = None) -> Summary:
    """Medians over the campaigns; "reached" reads the regret where a regret target is given."""
    probes = np.array([r.n_probes for r in runs], dtype=float)
    engine = np.array([r.engine_s for r in runs], dtype=float)
    widths = [r.width for r in runs if r.width is not None]
    covered = [r.covered for r in runs if r.covered is not None]
    return Summary(
        design=design, campaigns=len(runs),
        probes_median=float(np.median(probes)), probes_p10_p90=[float(x) for x in np.quantile(probes, [0.1, 0.9])],
        engine_s_median=float(np.median(engine)), engine_s_p10_p90=[float(x) for x in np.quantile(engine, [0.1, 0.9])],
        width_median=float(np.median(widths)) if widths else None,
        reached_target_share=float(np.mean([_reached(r, target, target_regret) for r in runs])),
        coverage=float(np.mean(covered)) if covered else None,
        stop_reasons={k: float(np.mean([r.stop == k for r in runs])) for k in sorted({str(r.stop) for r in runs})},
        regret_median=_median([r.regret for r in runs if r.regret is not None]),
    )


def _reached(run: Campaign, target: float, target_regret: float | None) -> bool:
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
    return (f"coverage from {campaigns} campaign(s) is uncertain by about +-{spread:.0%} around the nominal "
            f"{confidence * 100:g}%; give --campaigns {COVERAGE_CAMPAIGNS} or more to judge it")


def plan_campaigns(prior: Prior, target: float, campaigns: int = 10, seed: int = 0, *,
                   target_regret: float | None = None, judge: Judge | None = None) -> CampaignPlan:
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
        notes.append(f"the default ladder has one length within {prior.low}-{prior.high} tokens ({only}), and no fit "
                     f"can use one: no ladder is simulated (kvcal sweep --prefix-lengths {prior.low},{prior.high} "
                     "measures two)")
    else:
        if inside:
            designs.append(summarize("ladder", [simulate_ladder(prior, target, s) for s in seeds], target))
        designs.append(summarize("ladder-3", [simulate_ladder(prior, None, s) for s in seeds], target))
    if inside:
        designs.append(summarize("oracle", [oracle(prior, target)], target))
    else:
        where = "below the shortest" if prior.truth is not None and prior.truth <= prior.low else "beyond the longest"
        notes.append(f"the prior's break-even lies {where} allowed length: an adaptive campaign stops once its "
                     "interval shows that, so no width is targeted and no ladder or oracle is scaled to it")
    c = prior.costs
    return CampaignPlan(
        prior=prior.label,
        curves={k: float(v) for k, v in c.model_dump().items() if isinstance(v, (int, float))},
        true_break_even_tokens=None if prior.truth is None else round(prior.truth, 1),
        allowed_range=[prior.low, prior.high], target_width=target, target_regret=target_regret,
        confidence=FIT_DEFAULTS.confidence,
        designs=designs, notes=notes,
    )


def prior_from_fit(path: str, *, noise_cv: float | None, block_size: int | None, max_model_len: int | None) -> Prior:
    """Curves and noise from an earlier run folder or fit.json (its fit is computed if absent)."""
    fit = load_or_fit(path)
    r, p = fit.recompute, fit.pull
    noise = noise_cv if noise_cv is not None else max(r.noise_cv or 0.05, p.noise_cv or 0.05)
    curves = dict(recompute_intercept_ms=r.intercept_ms, recompute_per_token_us=r.per_token_us,
                  recompute_per_token2_ns=r.per_token2_ns, pull_intercept_ms=p.intercept_ms,
                  pull_per_token_us=p.per_token_us)
    try:
        costs = SimCosts(**curves, noise_cv=noise)
    except ValidationError as err:  # a fitted curve may dip below zero (the gpt-oss ladder's -75 ms intercept); SimCosts may not
        refused = ", ".join(f"{e['loc'][0]} {curves[e['loc'][0]]:g}" for e in err.errors() if e["loc"][0] in curves)
        raise InputError(f"{path}: the fitted curves cannot drive a simulated pair ({refused}: the simulator "
                         "takes coefficients of 0 or more); plan from --model and --hardware, or from a fit with more lengths") from None
    block = block_size or fit.block_size or 64
    limit = max_model_len or max(_run_limit(path) or DEFAULT_LIMIT, fit.measured_range[1] + 1)
    low, high = allowed_range(None, block, limit)
    notes = ["pull curvature dropped: the simulated pull is affine"] if p.per_token2_ns else []
    return Prior(costs, f"fit of {path}", low, high, block, tuple(notes))


def _run_limit(path: str) -> int | None:
    """The model limit a run folder swept under, when its settings say (sim runs always do)."""
    if not RunFolder.is_run_folder(path):
        return None
    settings = RunFolder(path).manifest().settings
    return settings.max_model_len or (settings.sim.max_model_len if settings.engine == "sim" else None)


def prior_from_profiles(model: str, hardware: str, link: str | None, *, noise_cv: float | None, block_size: int | None,
                        max_model_len: int | None) -> Prior:
    """Curves from ``kvcal predict``'s profiles, as a quadratic recompute and an affine pull."""
    profiles = load_profiles()
    spec = load_model(model)
    accelerator = profiles.accelerator(hardware)
    cost = build_cost_model(spec, accelerator, profiles.link(link or accelerator.default_link), PredictSettings())
    block = block_size or 64
    low, high = allowed_range(None, block, max_model_len or min(spec.max_position_embeddings, 131072))
    n = np.geomspace(low, high, 40)
    rec = _poly_fit(n, np.array([cost.recompute_ms(x) for x in n]), 3)
    pull = _poly_fit(n, np.array([cost.pull_ms(x) for x in n]), 2)
    costs = SimCosts(recompute_intercept_ms=rec[0], recompute_per_token_us=rec[1] * 1e3,
                     recompute_per_token2_ns=rec[2] * 1e6, pull_intercept_ms=pull[0], pull_per_token_us=pull[1] * 1e3,
                     noise_cv=0.05 if noise_cv is None else noise_cv)
    notes = [] if noise_cv is not None else ["noise 5% (the default; give --noise-cv from a run of this pair)"]
    return Prior(costs, f"kvcal predict {spec.name} on {accelerator.name}", low, high, block, tuple(notes))


def _poly_fit(n: np.ndarray, y: np.ndarray, p: int) -> np.ndarray:
    """Non-negative coefficients of 1, n, n^2 (first p) by relative least squares: the predicted curves' shape."""
    x = np.stack([n**j for j in range(p)], axis=1) / y[:, None]
    scale = np.abs(x).max(axis=0)
    beta, _ = nnls(x / scale, np.ones_like(y))
    out = np.zeros(3)
    out[:p] = beta / scale
    return out
