"""Fitting stage: cost curves per leg, the break-even and its bootstrap interval.

Public API (other stages call these; names and signatures are stable):

* :func:`load_fit_input` - any accepted input (run folder, fit.json, probe CSV, llm-d Job log) as a :class:`FitInput`;
* :func:`fit_table` - fit a loaded :class:`~kvcal.fit.tables.ProbeTable`;
* :func:`fit_input` - load a run folder, probe CSV or llm-d table and fit it now;
* :func:`load_fit` - read a ``fit.json``;
* :func:`load_or_fit` - an input's existing fit, else a fit made now;
* :func:`fit_and_write`, :func:`write_fit`, :func:`dumps`, :func:`default_output` - what ``kvcal fit`` writes, where;
* :func:`curve_ms` - evaluate a fitted curve in ms;
* :func:`mean_curves`, :func:`mean_scales` - each leg's mean cost (what the router pays) over its fitted curve.

The method is described in ``docs/method.md``; each submodule's docstring gives its formulas.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from kvcal.cost_curve import cost_ms
from kvcal.fit.breakeven import break_even_tokens, classify
from kvcal.fit.fitting import fit_table
from kvcal.fit.inputs import FitInput, load_fit_input
from kvcal.fit.io import default_output, dumps, load_fit, looks_like_json, write_fit
from kvcal.fit.mean_cost import mean_curves, mean_scales
from kvcal.records import FIT_DEFAULTS, CurveFit, FitResult, FitSettings, RunSetup

__all__ = [
    "CurveFit",
    "FitInput",
    "FitResult",
    "break_even_tokens",
    "classify",
    "curve_ms",
    "default_output",
    "dumps",
    "fit_and_write",
    "fit_input",
    "fit_table",
    "load_fit",
    "load_fit_input",
    "load_or_fit",
    "looks_like_json",
    "mean_curves",
    "mean_scales",
    "write_fit",
]


def curve_ms(curve: CurveFit, n: Any) -> np.ndarray:
    """A fitted curve's t(n) in ms at lengths n (tokens); see :mod:`kvcal.cost_curve`."""
    return cost_ms(curve.coefficients, n)


def fit_input(path: str | Path, settings: FitSettings = FIT_DEFAULTS, *, supplied: RunSetup | None = None,
              busy_queue_threshold: int | None = None) -> FitResult:
    """Fit the probes of any input now (a fit.json's own probes, when they can be found).

    A loaded run also yields the router's cost model, busy classified against
    ``busy_queue_threshold`` (default: the run's).
    """
    source = load_fit_input(path, supplied=supplied, stored_fit=False)
    return source.fresh_fit(settings, busy_queue_threshold=busy_queue_threshold)


def load_or_fit(path: str | Path, settings: FitSettings = FIT_DEFAULTS) -> FitResult:
    """An input's existing fit (a fit.json, a run folder's fit.json), else a fit of its probes made now."""
    return load_fit_input(path, probes=False).fitted(settings)


def fit_and_write(path: str | Path, output: str | Path | None = None, settings: FitSettings = FIT_DEFAULTS, *,
                  supplied: RunSetup | None = None, busy_queue_threshold: int | None = None) -> tuple[FitResult, Path]:
    """What ``kvcal fit`` does: fit the input and write fit.json (``output`` or :func:`default_output`)."""
    result = fit_input(path, settings, supplied=supplied, busy_queue_threshold=busy_queue_threshold)
    return result, write_fit(result, output or default_output(path))
