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

Each name is imported on first use (:mod:`kvcal.lazy`), as in every other stage. The method is described in
``docs/method.md``; each submodule's docstring gives its formulas.
"""

from kvcal.lazy import public_api

_API = {
    "CurveFit": "kvcal.records.fit",
    "FitResult": "kvcal.records.fit",
    "FitInput": "kvcal.fit.inputs",
    "load_fit_input": "kvcal.fit.inputs",
    "break_even_tokens": "kvcal.fit.breakeven",
    "classify": "kvcal.fit.breakeven",
    "fit_table": "kvcal.fit.fitting",
    "curve_ms": "kvcal.fit.entry",
    "fit_input": "kvcal.fit.entry",
    "load_or_fit": "kvcal.fit.entry",
    "fit_and_write": "kvcal.fit.entry",
    "default_output": "kvcal.fit.io",
    "dumps": "kvcal.fit.io",
    "load_fit": "kvcal.records.fit",
    "looks_like_json": "kvcal.fit.io",
    "write_fit": "kvcal.fit.io",
    "mean_curves": "kvcal.fit.mean_cost",
    "mean_scales": "kvcal.fit.mean_cost",
}
__all__ = list(_API)
__getattr__ = public_api(__name__, _API)
