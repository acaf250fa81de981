"""The prior a ``kvcal plan`` is simulated on: cost curves, noise and allowed lengths, from a fit or the profiles.

A prior comes from an earlier run or fit (its fitted curves and noise) or from ``kvcal predict``'s profiles (a
quadratic recompute and an affine pull fitted to the predicted curves); :mod:`kvcal.plan.simulate_designs`
runs campaigns on it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import ValidationError
from scipy.optimize import nnls

from kvcal.engines.sim import SimCosts
from kvcal.errors import InputError
from kvcal.estimate.hfconfig import load_model
from kvcal.estimate.predict import PredictSettings, build_cost_model
from kvcal.estimate.profiles import load_profiles
from kvcal.fit.entry import load_or_fit
from kvcal.records.run_folder import RunFolder
from kvcal.settings.sweep_groups import DEFAULT_BLOCK_SIZE
from kvcal.sweep.lengths.adaptive_design import allowed_range

DEFAULT_LIMIT = 65536  # a prior fit whose run does not say its model limit: kvcal sweep's sim default
DEFAULT_NOISE_CV = 0.05  # probe noise when neither --noise-cv nor the prior fit gives one (kvcal plan --help says it)
PROFILE_LIMIT = 131072  # a profile prior's longest length unless --max-model-len: the model's context, 128K at most


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


def prior_from_fit(path: str, *, noise_cv: float | None, block_size: int | None, max_model_len: int | None) -> Prior:
    """Curves and noise from an earlier run folder or fit.json (its fit is computed if absent)."""
    fit = load_or_fit(path)
    r, p = fit.recompute, fit.pull
    noise = noise_cv if noise_cv is not None else max(r.noise_cv or DEFAULT_NOISE_CV, p.noise_cv or DEFAULT_NOISE_CV)
    curves = dict(
        recompute_intercept_ms=r.intercept_ms,
        recompute_per_token_us=r.per_token_us,
        recompute_per_token2_ns=r.per_token2_ns,
        pull_intercept_ms=p.intercept_ms,
        pull_per_token_us=p.per_token_us,
    )
    try:
        costs = SimCosts(**curves, noise_cv=noise)
    except (
        ValidationError
    ) as err:  # a fitted curve may dip below zero (the gpt-oss ladder's -75 ms intercept); SimCosts may not
        refused = ", ".join(f"{e['loc'][0]} {curves[e['loc'][0]]:g}" for e in err.errors() if e["loc"][0] in curves)
        raise InputError(
            f"{path}: the fitted curves cannot drive a simulated pair ({refused}: the simulator "
            "takes coefficients of 0 or more); plan from --model and --hardware, or from a fit with more lengths"
        ) from None
    block = block_size or fit.block_size or DEFAULT_BLOCK_SIZE
    limit = max_model_len or max(_run_limit(path) or DEFAULT_LIMIT, fit.measured_range[1] + 1)
    low, high = allowed_range(None, block, limit)
    notes = ["pull curvature dropped: the simulated pull is affine"] if p.per_token2_ns else []
    return Prior(costs, f"fit of {path}", low, high, block, tuple(notes))


def _run_limit(path: str) -> int | None:
    """The model limit a run folder swept under, when its settings say (sim runs always do)."""
    if not RunFolder.is_run_folder(path):
        return None
    settings = RunFolder(path).manifest().settings
    return settings.engine.max_model_len or (settings.sim.max_model_len if settings.engine.kind == "sim" else None)


def prior_from_profiles(
    model: str,
    hardware: str,
    link: str | None,
    *,
    noise_cv: float | None,
    block_size: int | None,
    max_model_len: int | None,
) -> Prior:
    """Curves from ``kvcal predict``'s profiles, as a quadratic recompute and an affine pull."""
    profiles = load_profiles()
    spec = load_model(model)
    accelerator = profiles.accelerator(hardware)
    cost = build_cost_model(spec, accelerator, profiles.link(link or accelerator.default_link), PredictSettings())
    block = block_size or DEFAULT_BLOCK_SIZE
    low, high = allowed_range(None, block, max_model_len or min(spec.max_position_embeddings, PROFILE_LIMIT))
    n = np.geomspace(low, high, 40)
    rec = _poly_fit(n, np.array([cost.recompute_ms(x) for x in n]), 3)
    pull = _poly_fit(n, np.array([cost.pull_ms(x) for x in n]), 2)
    costs = SimCosts(
        recompute_intercept_ms=rec[0],
        recompute_per_token_us=rec[1] * 1e3,
        recompute_per_token2_ns=rec[2] * 1e6,
        pull_intercept_ms=pull[0],
        pull_per_token_us=pull[1] * 1e3,
        noise_cv=DEFAULT_NOISE_CV if noise_cv is None else noise_cv,
    )
    notes = (
        []
        if noise_cv is not None
        else [f"noise {DEFAULT_NOISE_CV:.0%} (the default; give --noise-cv from a run of this pair)"]
    )
    return Prior(costs, f"kvcal predict {spec.name} on {accelerator.name}", low, high, block, tuple(notes))


def _poly_fit(n: np.ndarray, y: np.ndarray, p: int) -> np.ndarray:
    """Non-negative coefficients of 1, n, n^2 (first p) by relative least squares: the predicted curves' shape."""
    x = np.stack([n**j for j in range(p)], axis=1) / y[:, None]
    scale = np.abs(x).max(axis=0)
    beta, _ = nnls(x / scale, np.ones_like(y))
    out = np.zeros(3)
    out[:p] = beta / scale
    return out
