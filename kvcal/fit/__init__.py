"""Fitting stage: cost curves per leg, the break-even and its bootstrap interval.

Public API (other stages call these; names and signatures are stable):

* :func:`fit_table` - fit a loaded :class:`~kvcal.fit.tables.ProbeTable`;
* :func:`fit_input` - load any accepted input (run folder, probe CSV, llm-d table) and fit;
* :func:`load_fit` - read a ``fit.json``;
* :func:`load_or_fit` - a fit.json, a run folder (its fit.json if present) or a table;
* :func:`fit_and_write`, :func:`write_fit`, :func:`dumps`, :func:`default_output` - what ``kvcal fit`` writes, where;
* :func:`curve_ms` - evaluate a fitted curve in ms.

The method is described in ``docs/method.md``; each submodule's docstring gives its formulas.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from kvcal.errors import InputError
from kvcal.fit.bootstrap import residual_df, run_bootstrap
from kvcal.fit.breakeven import break_even_tokens, classify
from kvcal.fit.curves import LegData, fit_leg, poly_ms
from kvcal.fit.result import build_result
from kvcal.records import FIT_SCHEMA, CurveFit, FitResult
from kvcal.fit.tables import ProbeTable, load_probe_table

__all__ = ["fit_table", "fit_input", "fit_and_write", "load_fit", "load_or_fit", "write_fit", "dumps", "default_output", "curve_ms",
           "break_even_tokens", "classify", "FitResult", "CurveFit"]

log = logging.getLogger(__name__)

RECOMPUTE_MODELS = ("affine", "quadratic")
PULL_MODELS = ("affine",)


def curve_ms(curve: CurveFit, n: Any) -> np.ndarray:
    """t(n) = intercept_ms + per_token_us*n/1e3 + per_token2_ns*n^2/1e6, in ms, at lengths n (tokens)."""
    return poly_ms(np.array([curve.intercept_ms, curve.per_token_us, curve.per_token2_ns]), np.asarray(n, dtype=float))


def fit_table(table: ProbeTable, *, confidence: float = 0.9, seed: int = 0, n_resamples: int = 2000) -> FitResult:
    """Fit both legs, find the break-even and bootstrap its interval at ``confidence``."""
    _check_settings(confidence, seed, n_resamples)
    legs = _leg_data(table)
    recompute = fit_leg(legs["recompute"], RECOMPUTE_MODELS)
    pull = fit_leg(legs["pull"], PULL_MODELS)
    notes: list[str] = []
    boot = None
    if n_resamples == 0:
        notes.append("--resamples 0: no bootstrap, no intervals")
    else:
        starved = [f.data.name for f in (recompute, pull) if residual_df(f) < 1]
        if starved:
            notes.append(f"{', '.join(starved)}: as many coefficients as probes, so no interval can be estimated; "
                         "add reps or lengths")
        else:
            boot = run_bootstrap(recompute, pull, n_resamples=n_resamples, seed=seed, confidence=confidence)
    result = build_result(table, recompute, pull, boot, confidence=confidence, seed=seed, n_resamples=n_resamples,
                          notes=notes)
    log.info("fit %s: %s at %s tokens", table.source.get("path"), result.status, result.break_even_tokens)
    return result


def fit_input(path: str | Path, *, confidence: float = 0.9, seed: int = 0, n_resamples: int = 2000) -> FitResult:
    """Load a run folder, probe CSV or llm-d table and fit it."""
    return fit_table(load_probe_table(path), confidence=confidence, seed=seed, n_resamples=n_resamples)


def load_fit(path: str | Path) -> FitResult:
    """Read a fit.json; InputError if the file is missing or is not one."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such fit.json")
    text = p.read_text(encoding="utf-8", errors="replace")
    try:
        return FitResult.model_validate_json(text)
    except ValidationError as err:
        try:
            schema = json.loads(text).get("schema") if text.strip().startswith("{") else None
        except json.JSONDecodeError:
            schema = None
        what = f"schema {schema!r}, expected {FIT_SCHEMA!r}" if schema != FIT_SCHEMA else err.errors()[0].get("msg", "invalid")
        raise InputError(f"{p}: not a kvcal fit.json ({what})") from None


def load_or_fit(path: str | Path, **kw: Any) -> FitResult:
    """A fit.json as is; a run folder's fit.json if present, else a fit on the fly; a table: a fit on the fly."""
    p = Path(path)
    if p.is_dir() and (p / "fit.json").is_file():
        return load_fit(p / "fit.json")
    if p.is_file() and _is_json(p):
        return load_fit(p)
    return fit_input(p, **kw)


def default_output(path: str | Path) -> Path:
    """Where ``kvcal fit`` writes without --output: ``<run>/fit.json``, else ``<input stem>.fit.json`` beside it."""
    p = Path(path)
    return p / "fit.json" if p.is_dir() else p.with_name(f"{p.stem}.fit.json")


def write_fit(result: FitResult, path: str | Path) -> Path:
    """Write fit.json (key ``schema`` by alias); InputError when the place cannot be written."""
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(dumps(result) + "\n", encoding="utf-8")
    except OSError as err:
        raise InputError(f"{p}: cannot write ({err.strerror})") from None
    return p


def dumps(result: FitResult) -> str:
    """fit.json text: indented, but each list of bootstrap samples on one line (14,000 numbers stay readable)."""
    data = json.loads(result.model_dump_json(by_alias=True))
    boot = data.get("bootstrap", {})
    compact: dict[str, str] = {}

    def park(holder: dict[str, Any], key: str) -> None:
        marker = f"@@samples{len(compact)}@@"
        compact[marker] = json.dumps(holder[key], separators=(",", ":"))
        holder[key] = marker

    if isinstance(boot.get("break_even_samples"), list):
        park(boot, "break_even_samples")
    for name in ("recompute_samples", "pull_samples"):
        for key in list(boot.get(name) or {}):
            park(boot[name], key)
    text = json.dumps(data, indent=1)
    for marker, values in compact.items():
        text = text.replace(f'"{marker}"', values)
    return text


def _is_json(p: Path) -> bool:
    if p.suffix.lower() == ".json":
        return True
    with p.open("rb") as handle:
        return handle.read(64).lstrip().startswith(b"{")


def _check_settings(confidence: float, seed: int, n_resamples: int) -> None:
    if not 0.0 < confidence < 1.0:
        raise InputError(f"--confidence must lie between 0 and 1 (exclusive), got {confidence}")
    if seed < 0:
        raise InputError(f"--seed must be non-negative, got {seed}")
    if n_resamples < 0:
        raise InputError(f"the number of resamples must be non-negative, got {n_resamples}")
    if 0 < n_resamples < 100:
        raise InputError(f"{n_resamples} resamples are too few for a {confidence:.0%} interval; use at least 100")


def _leg_data(table: ProbeTable) -> dict[str, LegData]:
    where = table.source.get("path") or "input"
    if table.probes.empty:
        raise InputError(f"{where}: no probes to fit")
    n_ref = float(table.probes["prefix_tokens"].max())
    out = {}
    for name in ("recompute", "pull"):
        rows = table.leg(name)
        if rows.empty:
            raise InputError(f"{where}: no {name} probes (a leg is missing); both legs are needed for a break-even")
        lengths = sorted(rows["prefix_tokens"].unique())
        if len(lengths) < 2:
            raise InputError(f"{where}: the {name} leg has one prefix length only ({lengths[0]}); "
                             "a fit needs at least two lengths")
        out[name] = LegData.from_frame(name, rows, n_ref)
    return out


def fit_and_write(path: str | Path, output: str | Path | None = None, *, confidence: float = 0.9, seed: int = 0,
                  n_resamples: int = 2000) -> tuple[FitResult, Path]:
    """What ``kvcal fit`` does: fit the input and write fit.json (``output`` or :func:`default_output`)."""
    result = fit_input(path, confidence=confidence, seed=seed, n_resamples=n_resamples)
    return result, write_fit(result, output or default_output(path))
