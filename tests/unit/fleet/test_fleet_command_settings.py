"""kvcal fleet's last loose check (the plot's format) is the settings model's, before the fit is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvcal.errors import InputError
from kvcal.fleet.settings import FleetConfig

EXAMPLE = Path(__file__).resolve().parents[3] / "docs" / "examples" / "fleet-workload.yaml"


def _no_work(*_args, **_kwargs):
    raise AssertionError("the fleet study started")


def test_a_plot_of_an_unknown_format_is_refused_before_the_fit_is_read(kvcal, monkeypatch, tmp_path):
    monkeypatch.setattr("kvcal.emit.formats.load_input", _no_work)
    done = kvcal("fleet", tmp_path / "fit.json", "--workload", EXAMPLE, "--plot", tmp_path / "fleet.pdf")
    assert done.code == 2, done.err
    assert "--plot" in done.err and ".png or .svg" in done.err and len(done.err.strip().splitlines()) == 1


@pytest.mark.parametrize("values, says", [
    ({"pods": 0}, "--pods must lie within 1-4096, got 0"),
    ({"seeds": 5000}, "--seeds must lie within 1-1000, got 5000"),
    ({"duration_s": -1.0}, "--duration must be above 0 and at most 86400"),
])
def test_the_fleet_bounds_are_the_models(values, says):
    with pytest.raises(InputError) as err:
        FleetConfig(fit_path=Path("f"), workload_path=EXAMPLE, **values)
    assert says in str(err.value)
