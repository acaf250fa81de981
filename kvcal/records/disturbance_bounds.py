"""Judging a busy host (measures nothing): the bounds on a probe's ``host_busy``, what is watched, the run's summary.

The monitors that take the readings during a sweep are :mod:`kvcal.sweep.host_monitors`
(its docstring gives the formulas); this base module holds what the sweep and the fit
both read: a probe is disturbed above :data:`PROBE_BOUND`, the run when more than
:data:`RUN_BOUND` of its measured probes are, and :func:`summarise` is what fit.json records.
Unrelated: :mod:`kvcal.fleet.shared_host` simulates engines that share a host in ``kvcal fleet``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kvcal.records.fit import HostDisturbance
from kvcal.records.old_schemas import pair_facts
from kvcal.records.run import PairFacts, ProbeRecord

PROBE_BOUND = 0.15
"""Others' share of the engines' compute above which a probe counts as disturbed."""
RUN_BOUND = 0.10
"""Share of disturbed probes above which the run is disturbed (and emit-config refuses it)."""


def parse_cpus(spec: str | None) -> list[int]:
    """'0-2,5' -> [0, 1, 2, 5]; [] for anything else (e.g. 'auto')."""
    out: list[int] = []
    for part in (spec or "").split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            return []
        out.extend(range(int(lo), int(hi or lo) + 1))
    return sorted(set(out))


def watched(pair: PairFacts | Mapping[str, Any]) -> tuple[str, list[int] | None] | None:
    """What the monitor watches for this pair: ("cpu", cores) or ("cuda", GPUs or None for all visible);
    None: nothing."""
    if not isinstance(pair, PairFacts):  # a pair's own account, as version 2 runs stored it
        pair = PairFacts.model_validate(pair_facts(dict(pair)))
    if not pair.launched_vllm or pair.device not in ("cpu", "cuda"):
        return None
    if pair.device == "cpu":
        return "cpu", sorted({c for role in pair.roles for c in parse_cpus(role.cpus)})
    specs = [role.gpus for role in pair.roles]
    return "cuda", None if any(s is None for s in specs) else sorted({g for s in specs for g in parse_cpus(s)})


def resource_of(pair: PairFacts | Mapping[str, Any]) -> str | None:
    """What :func:`monitor_for` watches for this pair, in words (for fit.json), without starting a monitor."""
    device, units = watched(pair) or (None, None)
    if device == "cpu":
        return "cpu cores " + ",".join(map(str, units)) if units else None
    return None if device is None else "gpu " + (",".join(map(str, units)) if units else "all visible")


def summarise(records: Iterable[ProbeRecord], resource: str | None = None) -> HostDisturbance | None:
    """The run's disturbance from its valid probes' ``host_busy`` (None when nothing was measured)."""
    measured = [(r, r.host_busy) for r in records if r.valid and r.host_busy is not None]
    if not measured:
        return None
    values = sorted(busy for _, busy in measured)
    over = [r for r, busy in measured if busy > PROBE_BOUND]
    mid = len(values) // 2
    median = values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
    return HostDisturbance(
        resource=resource or "the engines' compute",
        bound=PROBE_BOUND,
        run_bound=RUN_BOUND,
        n_measured=len(measured),
        median=round(median, 4),
        max=round(values[-1], 4),
        disturbed_probes=[f"{r.probe_id} ({r.host_busy:.0%})" for r in over],
        disturbed=len(over) > RUN_BOUND * len(measured),
    )
