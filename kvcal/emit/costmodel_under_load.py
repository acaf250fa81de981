"""The ``costModel`` keys from a cost model fitted under load (kvcal.fit.costmodel), with intervals.

Every key kvcal calibrated is filled, with its interval in a comment; ``fleetWeight``
is a fleet policy (how much the computing pod's running requests should count against
a pull), not something a calibration measures, so it is left to the user. A negative
fitted F, S or Q (noise around zero) is emitted as 0: the router adds them as costs.
P, T and F come from the same fit as S and Q (F above the request's base, P the recompute
slope), so the set is consistent; :mod:`kvcal.emit.costmodel_block` uses these when the fit has one.
"""

from __future__ import annotations

from typing import Any

from kvcal.records.fit_costmodel import CostModelFit, Estimate

KEYS = (
    ("prefillMicrosecondsPerToken", "us/token, idle recompute slope"),
    ("transferMicrosecondsPerToken", "us/token, idle pull slope"),
    ("transferFixedMs", "ms, pull fixed cost above the request's base"),
    ("sourceWaitMs", "ms, extra when the source's queue is busy"),
    ("requeueMs", "ms, extra when the computing pod's queue is busy"),
)
CLAMPED = ("transferFixedMs", "sourceWaitMs", "requeueMs")


def loaded_values(cost: CostModelFit) -> tuple[dict[str, Any], list[str], list[str]]:
    """Router key -> value for every key the loaded fit calibrated, and the notes/warnings behind them."""
    values: dict[str, Any] = {}
    warnings = [f"cost model: {w}" for w in cost.warnings]
    for key, _ in KEYS:
        value = getattr(cost, key).value
        if key in CLAMPED and value < 0:
            warnings.append(f"{key} fitted negative ({value:.3g}); emitted as 0")
            value = 0.0
        values[key] = round(value, 3)
    values["busyQueueThreshold"] = cost.busyQueueThreshold
    notes = [
        f"costModel from the {cost.design} fit under load: F, S, Q (with base and q) by weighted least squares; "
        "P and T from the idle curves"
    ]
    return values, notes, warnings


def _interval(e: Estimate, level: str) -> str:
    return f"{level} {e.ci[0]:.4g} to {e.ci[1]:.4g}" if e.ci else "no interval"


def render_loaded_costmodel(cost: CostModelFit, origin: str, label: str) -> tuple[str, list[str], list[str]]:
    """The block text (first line ``label``), notes and warnings for ``emit-config --format costmodel``."""
    level = f"{cost.confidence:.0%}"
    values, notes, warnings = loaded_values(cost)
    lines = [
        label,
        f"# kvcal: costModel fitted under load ({cost.design}, {cost.n_requests} requests"
        f"{', ' + origin if origin else ''}); place under the p2p-source-producer parameters.",
        "costModel:",
    ]
    lines += [f"  {key}: {values[key]}  # {meaning}; {_interval(getattr(cost, key), level)}" for key, meaning in KEYS]
    lines.append(
        f"  busyQueueThreshold: {cost.busyQueueThreshold}  "
        "# busy = waiting requests >= this, as the probes were classified"
    )
    lines.append(
        "  # fleetWeight: yours to set: how much the computing pod's running requests R(d) count against a pull "
        "(a fleet policy, not measured)"
    )
    return "\n".join(lines) + "\n", notes, warnings
