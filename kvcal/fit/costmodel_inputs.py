"""What the router's cost model is fitted to: the requests of a loaded run, and the idle curves it holds fixed.

:func:`split_loaded` parts a ``--load-states`` run's probes into the idle ones (the idle
curves, P and T) and the loaded requests (:class:`LoadedProbes`, with their measured
queues); :func:`idle_curves` reads a fit's idle curves with their stored bootstrap samples.
The fit itself is :func:`kvcal.fit.costmodel.fit_cost_model`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kvcal.errors import InputError
from kvcal.records.fit import FitResult
from kvcal.records.manifest import RunManifest
from kvcal.records.run import ProbeRecord
from kvcal.records.run_folder import probe_counts_as_idle
from kvcal.settings.sweep_groups import DEFAULT_BUSY_QUEUE_THRESHOLD

_COEFS = ("intercept_ms", "per_token_us", "per_token2_ns")


@dataclass(frozen=True)
class LoadedProbes:
    """Requests for the cost-model fit, one entry each (arrays of equal length).

    ``stratum`` groups requests that the bootstrap redraws among (same design cell).
    Waiting queues are as measured; classification happens in :func:`fit_cost_model`.
    """

    pulled: np.ndarray  # bool
    uncached: np.ndarray  # tokens prefilled by the computing pod
    delta: np.ndarray  # tokens pulled (0 where not pulled)
    ttft_ms: np.ndarray
    source_waiting: np.ndarray  # int
    computing_waiting: np.ndarray  # int
    stratum: np.ndarray  # int labels
    design: str  # "designed" | "observational"
    n_dropped: int = 0  # requests left out (unknown queues)
    threshold: int = DEFAULT_BUSY_QUEUE_THRESHOLD  # the busy threshold the data were taken with (a designed run's)

    def __len__(self) -> int:
        return len(self.ttft_ms)


@dataclass(frozen=True)
class IdleCurves:
    """The idle curves the cost model holds fixed: point coefficients and bootstrap samples ((B, 3) each)."""

    recompute: np.ndarray  # intercept_ms, per_token_us, per_token2_ns
    pull: np.ndarray
    recompute_samples: np.ndarray
    pull_samples: np.ndarray
    n_eval: float  # tokens at which P (a secant slope) is evaluated


def split_loaded(records: list[ProbeRecord], manifest: RunManifest) -> tuple[list[ProbeRecord], LoadedProbes | None]:
    """A run's records for the idle curves (asked and measured idle), and its loaded probes (None: an idle run)."""
    loaded = from_run_records(records, manifest.settings.load.busy_queue_threshold)
    if loaded is None:
        return records, None
    idle = [r for r in records if probe_counts_as_idle(r, loaded.threshold)]
    if not any(r.valid and not r.off_curve for r in idle):
        raise InputError(
            f"{manifest.name}: no valid probe measured idle: the idle curves (P, T) need the idle state; "
            "sweep with --load-states including idle"
        )
    return idle, loaded


def from_run_records(records: list[ProbeRecord], threshold: int = DEFAULT_BUSY_QUEUE_THRESHOLD) -> LoadedProbes | None:
    """The designed experiment's probes (the last valid attempt of each probe id); None for an idle-only run."""
    chosen: dict[str, ProbeRecord] = {}
    for r in records:
        if r.valid and not r.off_curve and r.ttft_ms is not None and math.isfinite(r.ttft_ms) and r.ttft_ms > 0:
            chosen[r.probe_id] = r
    rows = list(chosen.values())
    if not any(r.load_state not in (None, "idle") for r in rows):
        return None
    known = [r for r in rows if r.source_waiting is not None and r.computing_waiting is not None]
    pulled = np.array([r.leg.value == "pull" for r in known])
    n = np.array([r.prefix_tokens for r in known], dtype=float)
    sw = np.array([r.source_waiting for r in known], dtype=np.int64)
    cw = np.array([r.computing_waiting for r in known], dtype=np.int64)
    keys = [(r.leg.value, r.prefix_tokens, r.source_waiting, r.computing_waiting) for r in known]
    # Strata are refined by the measured class later (fit_cost_model); here: leg x length.
    labels = {k: i for i, k in enumerate(sorted({k[:2] for k in keys}))}
    stratum = np.array([labels[k[:2]] for k in keys], dtype=np.int64)
    return LoadedProbes(
        pulled=pulled,
        uncached=np.where(pulled, 0.0, n),
        delta=np.where(pulled, n, 0.0),
        ttft_ms=np.array([r.ttft_ms for r in known], dtype=float),
        source_waiting=sw,
        computing_waiting=cw,
        stratum=stratum,
        design="designed",
        n_dropped=len(rows) - len(known),
        threshold=threshold,
    )


def coef_samples(fit: FitResult, leg: str) -> np.ndarray | None:
    """A leg's stored bootstrap coefficient samples, (B, 3) intercept_ms, per_token_us, per_token2_ns, finite rows
    only; None if none stored."""
    stored = fit.bootstrap.leg_samples(leg)
    if not isinstance(stored, dict) or not all(isinstance(stored.get(k), list) and stored[k] for k in _COEFS):
        return None
    cols = [np.asarray([math.nan if v is None else v for v in stored[k]], dtype=float) for k in _COEFS]
    if len({len(c) for c in cols}) != 1:
        return None
    samples = np.stack(cols, axis=1)
    samples = samples[np.all(np.isfinite(samples), axis=1)]
    return samples if len(samples) else None


def idle_curves(fit: FitResult) -> IdleCurves:
    """Point coefficients and bootstrap samples of a fit's idle curves (samples as stored in fit.json)."""

    def coef(curve) -> np.ndarray:
        return np.array([curve.intercept_ms, curve.per_token_us, curve.per_token2_ns], dtype=float)

    def samples(name: str, point: np.ndarray) -> np.ndarray:
        stored = coef_samples(fit, name)
        return point[None, :] if stored is None else stored

    rec, pull = coef(fit.recompute), coef(fit.pull)
    if fit.status == "crossover" and fit.break_even_tokens:
        n_eval = float(fit.break_even_tokens)
    else:
        n_eval = float(fit.measured_range[0]) if fit.measured_range else 1.0
    return IdleCurves(rec, pull, samples("recompute", rec), samples("pull", pull), n_eval)
