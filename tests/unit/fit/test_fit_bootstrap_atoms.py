"""The bootstrap of a large table from per-length atoms (issue 45) against the row-by-row path it replaces."""

from __future__ import annotations

import numpy as np
import pytest

from factories import sim_table
from kvcal.engines.sim import SimCosts
from kvcal.fit import fit_table
from kvcal.fit import bootstrap_atoms
from kvcal.fit.tables import from_rows
from kvcal.records import FitSource

CPU = SimCosts()  # break-even ~682 tokens
LADDER = [256, 384, 512, 768, 1024, 2048, 4096, 8192]


def _campaign(reps: int, seed: int, stall_share: float = 0.0, single_at: int | None = None):
    """A long campaign on the simulated pair's curves (lognormal noise, cv 5 %), some pulls stalled 4x."""
    rng = np.random.default_rng(seed)
    sigma = np.sqrt(np.log1p(CPU.noise_cv**2))
    rows = []
    for n in LADDER:
        truth = {"recompute": CPU.recompute_intercept_ms + CPU.recompute_per_token_us * n / 1e3
                 + CPU.recompute_per_token2_ns * n**2 / 1e6,
                 "pull": CPU.pull_intercept_ms + CPU.pull_per_token_us * n / 1e3}
        for leg, curve in truth.items():
            for rep in range(1 if n == single_at else reps):
                ttft = curve * rng.lognormal(-sigma**2 / 2, sigma) * (4.0 if rng.random() < stall_share else 1.0)
                rows.append({"prefix_tokens": n, "leg": leg, "ttft_ms": float(ttft), "rep": rep})
    return from_rows(rows, origin=FitSource(kind="test"))


def _interval(table, monkeypatch, *, atoms: bool) -> tuple[float, list[float]]:
    monkeypatch.setattr(bootstrap_atoms, "ROW_PATH_ELEMENTS", 0 if atoms else float("inf"))
    fit = fit_table(table, n_resamples=1000, seed=3)
    return fit.break_even_tokens, fit.break_even_ci


@pytest.mark.parametrize("seed, stalls, single_at", [(1, 0.0, None), (2, 0.03, None), (3, 0.0, 768)])
def test_atoms_give_the_row_by_row_interval_within_its_monte_carlo_error(monkeypatch, seed, stalls, single_at):
    # Reps within length (clean, then with stalls the Huber weights must tame), and the residual scheme
    # (one length with a single probe). 1,000 resamples: an endpoint's Monte Carlo sd is ~2% of the width.
    table = _campaign(300, seed, stalls, single_at)
    point, rows = _interval(table, monkeypatch, atoms=False)
    point_atoms, atoms = _interval(table, monkeypatch, atoms=True)
    assert point_atoms == point  # the point fit never uses the atoms
    width = rows[1] - rows[0]
    assert width > 0
    assert abs(atoms[0] - rows[0]) < 0.12 * width and abs(atoms[1] - rows[1]) < 0.12 * width, (rows, atoms)


def test_a_sweeps_campaign_is_bootstrapped_row_by_row_as_before(monkeypatch):
    table = sim_table(CPU, LADDER, 5, seed=4)
    default = fit_table(table, n_resamples=500)
    monkeypatch.setattr(bootstrap_atoms, "ROW_PATH_ELEMENTS", float("inf"))
    assert fit_table(table, n_resamples=500).model_dump(exclude={"created_at"}) == \
        default.model_dump(exclude={"created_at"})


def test_atoms_keep_every_lengths_share_and_the_values_mean_and_spread():
    rng = np.random.default_rng(0)
    values = rng.lognormal(0, 0.3, 1000)
    mean, square, start, share = bootstrap_atoms._bins(values, np.ones_like(values), 64)
    assert share.sum() == pytest.approx(1.0) and len(share) == 64
    assert (share * mean).sum() == pytest.approx(values.mean())
    assert (share * square).sum() == pytest.approx((values**2).mean())
    assert np.all(np.diff(mean) > 0) and np.all(start == 1.0)
