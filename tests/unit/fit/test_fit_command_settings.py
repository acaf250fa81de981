"""kvcal fit and kvcal plot take their settings as one object, checked before any probe is read or fitted."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from kvcal.errors import InputError
from kvcal.fit.settings import FitConfig, fit_settings
from kvcal.records.fit import FIT_DEFAULTS, FitSettings


def _no_work(*_args, **_kwargs):
    raise AssertionError("the fit ran")


@pytest.mark.parametrize("flags, says", [
    (["--confidence", "1.5"], "--confidence must lie between 0 and 1 (exclusive), got 1.5"),
    (["--resamples", "50"], "--resamples: 50 resamples are too few"),
    (["--resamples", "99999999999"], "--resamples must lie within 0-1,000,000"),
    (["--seed", "-1"], "--seed must be non-negative, got -1"),
    (["--block-size", "0"], "--block-size must be a positive number of tokens, got 0"),
    (["--transport", "carrier-pigeon"], "--transport must be one of"),
])
def test_a_bad_fit_setting_is_refused_before_the_probes_are_read(flags, says, kvcal, monkeypatch, tmp_path):
    import kvcal.fit.settings as settings

    monkeypatch.setattr(settings, "run_fit", _no_work)
    monkeypatch.setattr("kvcal.fit.inputs.load_probe_table", _no_work)
    table = tmp_path / "probes.csv"
    table.write_text("prefix_tokens,leg,ttft_ms\n")
    done = kvcal("fit", table, *flags)
    assert done.code == 2, done.err
    assert says in done.err and len(done.err.strip().splitlines()) == 1


def test_a_bad_plot_setting_is_refused_before_the_input_is_read(kvcal, monkeypatch, tmp_path):
    monkeypatch.setattr("kvcal.gate.plot.plot_input", _no_work)
    done = kvcal("plot", tmp_path / "missing-run", "-o", tmp_path / "out.png", "--confidence", "0")
    assert done.code == 2 and "--confidence must lie between 0 and 1 (exclusive), got 0.0" in done.err


def test_the_observational_inputs_come_together_or_not_at_all():
    with pytest.raises(InputError, match="takes --per-request FILE"):
        FitConfig(epp_log=Path("epp.log"))
    with pytest.raises(InputError, match="give a run folder"):
        FitConfig()
    config = FitConfig(per_request=[Path("a.json")], epp_log=Path("epp.log"), idle=Path("run"))
    assert config.observational and config.settings is FIT_DEFAULTS


def test_the_cli_defaults_are_the_fit_settings_defaults():
    """kvcal fit and kvcal plot read their defaults from FIT_DEFAULTS, not from literals of their own."""
    import typer

    from kvcal.cli import fit_cmd, plot_cmd

    for module, names in ((fit_cmd, {"confidence": "confidence", "seed": "seed", "resamples": "n_resamples"}),
                          (plot_cmd, {"confidence": "confidence", "seed": "seed"})):
        app = typer.Typer()
        module.register(app)
        params = inspect.signature(app.registered_commands[0].callback).parameters
        for flag, field in names.items():
            assert params[flag].default.default == getattr(FIT_DEFAULTS, field)
    source = "".join(inspect.getsource(m) for m in (fit_cmd, plot_cmd))
    assert "Option(0.9" not in source and "Option(2000" not in source and "Option(0," not in source


def test_one_settings_object_reaches_the_bootstrap(monkeypatch):
    """The settings the command built are the ones the bootstrap and the result see (not re-assembled numbers)."""
    from factories import sim_table
    from kvcal.engines.sim import SimCosts
    from kvcal.fit import fit_table

    seen = []
    import kvcal.fit.fitting as fitting

    original = fitting.run_bootstrap
    monkeypatch.setattr(fitting, "run_bootstrap", lambda *a, **k: seen.append(a[2]) or original(*a, **k))
    chosen = fit_settings(confidence=0.8, seed=3, n_resamples=200)
    fit = fit_table(sim_table(SimCosts(), [256, 1024, 4096], 3, seed=1), chosen)
    assert seen == [chosen] and isinstance(seen[0], FitSettings)
    assert (fit.confidence, fit.bootstrap.seed, fit.bootstrap.n_resamples) == (0.8, 3, 200)
