"""The fit's guards around the curve fitting: warm-up exclusion before it, and after it the
host-disturbance summary and the llm-d recipe's verdict in ``fit.json`` (the per-length wins, which
the status answers to, are in :mod:`kvcal.fit.result`).

Each guard's reasoning lives in its own module (:mod:`hygiene`, :mod:`wins`,
:mod:`kvcal.sweep.host_monitors`, :mod:`recipe`); this one only applies them in order.
"""

from __future__ import annotations

from dataclasses import replace

from kvcal.fit.breakeven import RECOMPUTE_ALWAYS
from kvcal.fit.drift import describe as describe_trend
from kvcal.fit.hygiene import WARMUP_NOTE, warmup_test
from kvcal.fit.modes import TOO_FEW_NOTE, describe_unresolved
from kvcal.fit.modes import describe as describe_mode
from kvcal.fit.tables import ProbeTable
from kvcal.fit_record import FitResult

SHOW_PROBES = 5


def exclude_warmup(table: ProbeTable) -> tuple[ProbeTable, int, str | None]:
    """The table without first-in-time probes when their warm-up effect is significant; (table, n excluded, note)."""
    mask, note = warmup_test(table.probes)
    if not mask.any():
        return table, 0, None
    kept = table.probes[~mask].reset_index(drop=True)
    return replace(table, probes=kept), int(mask.sum()), note


def annotate(result: FitResult, table: ProbeTable, n_warmup: int) -> FitResult:
    """``result`` with counts, the host's disturbance and the recipe's verdict."""
    warnings = list(result.warnings)
    update: dict = {
        "n_duplicates_collapsed": table.n_duplicates,
        "n_warmup_excluded": n_warmup,
        "host_disturbance": table.host,
    }
    host = table.host
    if host is not None and host.disturbed_probes:
        shown = ", ".join(host.disturbed_probes[:SHOW_PROBES])
        more = (
            f" and {len(host.disturbed_probes) - SHOW_PROBES} more" if len(host.disturbed_probes) > SHOW_PROBES else ""
        )
        figure = (
            f"other processes took up to {host.max:.0%} of {host.resource} (median {host.median:.0%}; "
            f"{len(host.disturbed_probes)} of {host.n_measured} probes over {host.bound:.0%}: {shown}{more})"
        )
        if host.disturbed:
            warnings.append(
                f"DISTURBED HOST: {figure}; these timings measure a busy machine, not the engines: "
                "rerun `kvcal sweep` when the machine is quiet (emit-config refuses this run unless --allow-disturbed)"
            )
        else:
            warnings.append(
                f"a few probes ran on a busy host: {figure}; under {host.run_bound:.0%} of the run, so it is kept"
            )
    if table.verdict and result.status != RECOMPUTE_ALWAYS:
        warnings.append(
            f"the recipe reported '{table.verdict}': read as recompute-always-wins (pulls fired and never "
            f"won); the fitted curves' {result.status} is overridden"
        )
        update["status"] = RECOMPUTE_ALWAYS
    update["warnings"] = warnings
    return result.model_copy(update=update)


def findings_for_stderr(result: FitResult) -> list[str]:
    """What changed the data or the cost the fit stands for, said on stderr as well as in the report:
    warm-up probes excluded, slow modes, slow pulls that cannot be told from a stall, a leg too small for the
    slow-mode test, drift over time."""
    lines = [w for w in result.warnings if w.startswith((WARMUP_NOTE, TOO_FEW_NOTE))]
    lines += [describe_mode(m) for m in result.slow_modes]
    lines += [describe_unresolved(result.unresolved_slow)] if result.unresolved_slow else []
    return lines + [describe_trend(t) for t in result.time_trends]
