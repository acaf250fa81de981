"""The fit stage's entry points: fit an input now, reuse its fit or make one, fit and write fit.json; a curve's t(n).

Other stages reach these through :mod:`kvcal.fit`'s public API, imported on first use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from kvcal.costs.cost_curve import cost_ms
from kvcal.fit.inputs import load_fit_input
from kvcal.fit.io import default_output, write_fit
from kvcal.records.fit import FIT_DEFAULTS, CurveFit, FitResult, FitSettings
from kvcal.records.run import RunSetup

__all__ = ["curve_ms", "fit_and_write", "fit_input", "load_or_fit"]


def curve_ms(curve: CurveFit, n: Any) -> np.ndarray:
    """A fitted curve's t(n) in ms at lengths n (tokens); see :mod:`kvcal.costs.cost_curve`."""
    return cost_ms(curve.coefficients, n)


def fit_input(
    path: str | Path,
    settings: FitSettings = FIT_DEFAULTS,
    *,
    supplied: RunSetup | None = None,
    busy_queue_threshold: int | None = None,
) -> FitResult:
    """Fit the probes of any input now (a fit.json's own probes, when they can be found).

    A loaded run also yields the router's cost model, busy classified against
    ``busy_queue_threshold`` (default: the run's).
    """
    source = load_fit_input(path, supplied=supplied, stored_fit=False)
    return source.fresh_fit(settings, busy_queue_threshold=busy_queue_threshold)


def load_or_fit(path: str | Path, settings: FitSettings = FIT_DEFAULTS) -> FitResult:
    """An input's existing fit (a fit.json, a run folder's fit.json), else a fit of its probes made now."""
    return load_fit_input(path, probes=False).fitted(settings)


def fit_and_write(
    path: str | Path,
    output: str | Path | None = None,
    settings: FitSettings = FIT_DEFAULTS,
    *,
    supplied: RunSetup | None = None,
    busy_queue_threshold: int | None = None,
) -> tuple[FitResult, Path]:
    """What ``kvcal fit`` does: fit the input and write fit.json (``output`` or :func:`default_output`)."""
    result = fit_input(path, settings, supplied=supplied, busy_queue_threshold=busy_queue_threshold)
    return result, write_fit(result, output or default_output(path))
