"""The bootstrap of a large table from per-length atoms (issue 45) against the row-by-row path it replaces."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from factories import sim_table
from kvcal.engines.sim import SimCosts
from kvcal.fit import fit_table
from kvcal.fit import bootstrap_atoms
from kvcal.fit.tables import from_rows
from kvcal.records.fit import FitSource
from kvcal.records.fit import FitSettings

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
    fit = fit_table(table, settings=FitSettings(n_resamples=1000, seed=3))
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
    default = fit_table(table, settings=FitSettings(n_resamples=500))
    monkeypatch.setattr(bootstrap_atoms, "ROW_PATH_ELEMENTS", float("inf"))
    assert fit_table(table, settings=FitSettings(n_resamples=500)).model_dump(exclude={"created_at"}) == \
        default.model_dump(exclude={"created_at"})


def test_atoms_keep_every_lengths_share_and_the_values_mean_and_spread():
    rng = np.random.default_rng(0)
    values = rng.lognormal(0, 0.3, 1000)
    mean, square, start, share = bootstrap_atoms._bins(values, np.ones_like(values), 64)
    assert share.sum() == pytest.approx(1.0) and len(share) == 64
    assert (share * mean).sum() == pytest.approx(values.mean())
    assert (share * square).sum() == pytest.approx((values**2).mean())
    assert np.all(np.diff(mean) > 0) and np.all(start == 1.0)


# --- exact agreement: where every atom is one probe, the two paths must give the same sums ----------------------


class _Scripted:
    """Stands for the numpy Generator of both paths, so that they resample the very same probes.

    ``picks`` (B, N): what each probe's slot draws, any pooled deviation (pooled scheme) or any residual (residual
    scheme). ``drawn`` is what the atoms path's multinomial returns.
    """

    def __init__(self, fit, picks: np.ndarray, drawn: np.ndarray | None = None):
        self.picks, self.drawn = picks, drawn
        self.asked: list[tuple[np.ndarray, np.ndarray]] = []

    def integers(self, low, high, size):
        assert (low, size) == (0, self.picks.shape)
        return self.picks

    def multinomial(self, n, pvals, size):
        assert self.drawn is not None and size == self.drawn.shape[:2]
        self.asked.append((np.asarray(n), np.asarray(pvals)))
        return self.drawn


def _leg(seed: int, counts: list[int], twice: bool = False):
    """A recompute leg with the given probes per length, some stalled; ``twice``: each value measured twice."""
    from kvcal.fit.curves import LegData, fit_leg

    rng = np.random.default_rng(seed)
    rows = []
    for n, m in zip(LADDER, counts):
        copies = 2 if twice else 1
        values = [(20 + 0.05 * n) * rng.lognormal(0, 0.05) * (3.0 if rng.random() < 0.08 else 1.0)
                  for _ in range(m // copies)]
        rows += [{"prefix_tokens": n, "rep": rep, "ttft_ms": value} for rep, value in enumerate(np.repeat(values, copies))]
    return fit_leg(LegData.from_frame("recompute", pd.DataFrame(rows), float(max(LADDER))), ("affine", "quadratic"))


def _atom_of_each_choice(values: np.ndarray, atoms) -> np.ndarray:
    """(K, choices) the atom holding each value a length can draw (nan: none); every real atom holds one at least."""
    real = atoms.share > 0
    found = np.isclose(values[:, :, None], atoms.value[:, None, :], rtol=1e-12, atol=0) & real[:, None, :]
    assert np.array_equal(found.sum(axis=2), ~np.isnan(values)) and np.all(found.sum(axis=1)[real] >= 1)
    return found.argmax(axis=2)


@pytest.mark.parametrize("scheme, counts, twice", [
    ("pooled", [2, 6, 1, 9, 4, 7, 5, 3], False),  # 29 pooled deviations (the single probe has none): one an atom
    ("residual", [1, 1, 1, 1, 1, 1, 1, 2], False),  # no pure error to pool: the model's residuals
    ("pooled", [16, 16, 16, 16, 16, 16, 16, 16], True),  # 128 deviations, each twice: the 64 atoms of two
], ids=["pooled", "residual", "pooled-binned"])
def test_where_each_atom_holds_one_value_the_atoms_give_the_row_by_rows_sums(scheme, counts, twice):
    """Atoms of one value each are exact: the same draws must give the same per-length sums, weights and all.

    One deviation (or residual) an atom; or (``twice``) every value measured twice, cut into the 64 atoms of two.
    Fails on a weight, a value, a share or a count moved to a neighbouring probe or length.
    """
    from kvcal.fit import bootstrap

    fit = _leg(5, counts, twice)
    data, n_resamples = fit.data, 40
    assert fit.f_scale is not None and fit.weights.min() < 1  # the Huber re-weighting is exercised
    assert bootstrap.scheme(fit) == (bootstrap.RESIDUAL if scheme == "residual" else bootstrap.POOLED)
    draw = bootstrap._draw_residuals if scheme == "residual" else bootstrap._draw_pooled
    rng = np.random.default_rng(7)
    first = np.concatenate([[0], np.cumsum(data.counts)[:-1]])  # each length's first probe
    choices = data.n_probes if scheme == "residual" else len(bootstrap._pool(fit)[1])
    atoms = bootstrap.scheme_atoms(fit, draw)
    every = np.repeat(np.arange(choices)[:, None], data.n_probes, axis=1)  # row r: every slot draws choice r
    values, start = draw(fit, _Scripted(fit, every), choices)
    values, g, r = values[:, first].T, data.group[None, :], np.arange(choices)[:, None]
    assert np.array_equal(atoms.start[g, _atom_of_each_choice(values, atoms)[g, r]], start)  # each atom's weight
    picks = rng.integers(0, choices, (n_resamples, data.n_probes))
    atom = _atom_of_each_choice(values, atoms)[data.group[None, :], picks]  # (B, N): the atom each slot drew
    drawn = np.zeros((n_resamples, len(data.lengths), atoms.value.shape[1]))
    np.add.at(drawn, (np.arange(n_resamples)[:, None], data.group[None, :], atom), 1)
    scripted = _Scripted(fit, picks, drawn)
    by_atoms = bootstrap_atoms.atom_sums(fit, atoms, scripted, n_resamples)
    by_rows = bootstrap._resampled_sums(fit, draw, _Scripted(fit, picks), n_resamples)
    (counts, pvals), = scripted.asked
    assert np.array_equal(counts, data.counts)
    held = np.zeros_like(pvals)  # how many of the values a length can draw each atom holds
    for k in range(len(data.lengths)):
        np.add.at(held[k], _atom_of_each_choice(values, atoms)[k][~np.isnan(values[k])], 1)
    np.testing.assert_allclose(pvals, held / held.sum(axis=1, keepdims=True), rtol=1e-12)  # every value alike
    assert held.max() == (2 if twice else 1)
    for row_sum, atom_sum in zip(by_rows, by_atoms):
        np.testing.assert_allclose(atom_sum, row_sum, rtol=1e-9)
