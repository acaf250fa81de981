"""Plots: files by extension, the panels' content, and the reusable per-run drawing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

from kvcal.engines.sim import SimCosts
from kvcal.errors import InputError
from kvcal.fit import curve_ms, fit_input, fit_table, write_fit
from kvcal.gate.plot import crossover_near_short_end, curve_band, draw_run, draw_saving, figure_for, grid, plot_input
from kvcal.records.fit import FitSettings
from factories import sim_table

LADDER = [256, 512, 1024, 2048, 4096, 8192]


@pytest.fixture(scope="module")
def table():
    return sim_table(SimCosts(), LADDER, 3, seed=2)


@pytest.fixture(scope="module")
def fit(table):
    return fit_table(table, settings=FitSettings(n_resamples=300))


@pytest.fixture()
def csv(tmp_path, table) -> Path:
    path = tmp_path / "probes.csv"
    table.probes.to_csv(path, index=False)
    return path


def test_png_and_svg_by_extension(tmp_path, csv):
    png = plot_input(csv, tmp_path / "out.png", settings=FitSettings(confidence=0.9))
    svg = plot_input(csv, tmp_path / "sub" / "out.svg", log_x=True)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<svg" in svg.read_text()[:2000]
    assert png.stat().st_size > 10_000


def test_other_extension_is_a_one_line_error(tmp_path, csv):
    with pytest.raises(InputError, match="use .png or .svg"):
        plot_input(csv, tmp_path / "out.pdf")


def test_panels_hold_probes_curves_bands_break_even_and_units(table, fit):
    figure = figure_for(fit, table)
    top, bottom = figure.axes
    labels = [line.get_label() for line in top.get_lines()]
    assert {"recompute probes", "pull probes", "recompute fit (affine)", "pull fit (affine)"} <= set(labels)
    assert any(label.startswith("break-even") for label in labels)
    probes = next(line for line in top.get_lines() if line.get_label() == "pull probes")
    assert len(probes.get_xdata()) == len(table.leg("pull"))
    assert len(top.collections) >= 2  # one band per leg
    assert "ms" in top.get_ylabel() and "tokens" in bottom.get_xlabel() and "%" in bottom.get_ylabel()
    measured = next(line for line in bottom.get_lines() if "measured" in line.get_label())
    med = table.medians()
    np.testing.assert_allclose(measured.get_ydata(), 100 * (med["recompute_ms"] - med["pull_ms"]) / med["recompute_ms"])
    be_line = next(line for line in top.get_lines() if line.get_label().startswith("break-even"))
    assert be_line.get_xdata()[0] == pytest.approx(fit.break_even_tokens)


def test_log_x_axis(table, fit):
    figure = figure_for(fit, table, log_x=True)
    assert all(ax.get_xscale() == "log" for ax in figure.axes)
    assert grid(fit, log_x=True)[0] > 0


def test_bands_contain_the_fitted_curve(fit):
    n = grid(fit)
    low, high = curve_band(fit, "recompute", n)
    mid = curve_ms(fit.recompute, n)
    inside = (low <= mid + 1e-9) & (mid <= high + 1e-9)
    assert inside.mean() > 0.95


def test_draw_run_overlays_two_runs_in_their_colours(table, fit):
    other = fit_table(sim_table(SimCosts(pull_intercept_ms=30.0), LADDER, 3, seed=3), settings=FitSettings(n_resamples=200))
    ax_top, ax_bottom = Figure().subplots(2, 1)
    draw_run(ax_top, fit, table, color="tab:purple", label="baseline")
    draw_run(ax_top, other, None, color="tab:orange", label="candidate", bands=False)
    draw_saving(ax_bottom, fit, table, color="tab:purple", label="baseline")
    draw_saving(ax_bottom, other, color="tab:orange", label="candidate")
    labels = [line.get_label() for line in ax_top.get_lines()]
    assert "baseline: recompute probes" in labels and "candidate: pull fit (affine)" in labels
    assert not any(label == "candidate: pull probes" for label in labels)
    colours = {line.get_label(): line.get_color() for line in ax_top.get_lines()}
    assert colours["baseline: pull fit (affine)"] == "tab:purple"
    assert colours["candidate: recompute fit (affine)"] == "tab:orange"


def test_plot_from_a_fit_json_follows_its_source_for_points(tmp_path, csv):
    fitted = fit_input(csv, settings=FitSettings(n_resamples=200))
    fit_json = write_fit(fitted, tmp_path / "fit.json")
    out = plot_input(fit_json, tmp_path / "from-fit.png")
    assert out.exists()
    csv.unlink()  # the probes are gone: the curves alone are still drawn
    assert plot_input(fit_json, tmp_path / "curves-only.png").exists()


def test_plot_without_bootstrap_samples_draws_no_bands(table):
    bare = fit_table(table, settings=FitSettings(n_resamples=0))
    figure = figure_for(bare, table)
    assert len(figure.axes[0].collections) == 0


def test_a_crossover_near_the_short_end_gets_a_log_length_axis(tmp_path, fit):
    # the default ladder to 64K with a 180-token crossover: on a linear axis it sat in the first 0.3%
    costs = SimCosts(recompute_intercept_ms=2.0, recompute_per_token_us=100.0, recompute_per_token2_ns=0.0,
                     pull_intercept_ms=20.0, pull_per_token_us=0.0)
    short = fit_table(sim_table(costs, [128, 192, 256, 512, 1024, 4096, 16384, 65472], 3, seed=1), settings=FitSettings(n_resamples=300))
    assert short.status == "crossover"
    assert crossover_near_short_end(short) and not crossover_near_short_end(fit)  # fit: a mid-ladder crossover
    top, bottom = figure_for(short, log_x=crossover_near_short_end(short)).axes[:2]
    assert bottom.get_xscale() == "log" and top.get_yscale() == "log"
    assert figure_for(fit).axes[1].get_xscale() == "linear"
