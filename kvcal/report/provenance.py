"""The records around a fit: where it was measured (provenance) and what disturbed it (the disturbance record).

The setup is the typed :class:`~kvcal.records.run.RunSetup` fit.json carries; the run's own
provenance (run.json) is free-form and shown whole, as it was recorded (versions, host,
hardware, the kvcal commit, command line), never read by key.
"""

from __future__ import annotations

from typing import Any

from kvcal import __version__
from kvcal.files.provenance import git_commit
from kvcal.records.fit import FitResult
from kvcal.report.html import bullets, cell, details, esc, key_values, paragraph, section, table, tag
from kvcal.report.run_data import RunData


def flat(node: Any, prefix: str = "") -> dict[str, Any]:
    """Nested objects as dotted keys (``engine_versions.vllm``), so one table shows them."""
    if isinstance(node, dict) and node:
        out: dict[str, Any] = {}
        for key, value in node.items():
            out.update(flat(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): node} if prefix else {}


def setup_rows(fit: FitResult) -> dict[str, Any]:
    """What the run measured on (known facts only), then where the fit came from and when it was made."""
    known = {k: v for k, v in flat(fit.setup.model_dump(mode="json")).items() if v is not None}
    source = {f"source.{k}": v for k, v in fit.source.model_dump(mode="json").items() if v is not None}
    return {**known, **source, "fit kvcal_version": fit.kvcal_version, "fit created_at": fit.created_at}


def provenance_section(run: RunData) -> str:
    body = key_values(setup_rows(run.fit))
    if run.manifest is not None:
        recorded = flat(run.manifest.provenance)
        body += paragraph(f"Run {run.manifest.name}, made {run.manifest.created_at}.")
        body += details(
            f"run.json provenance as recorded ({len(recorded)} entries: versions, host, hardware, git commit, "
            "command line)",
            key_values(recorded),
        )
    else:
        body += paragraph("No run.json was found beside this fit: the setup above is what fit.json records.")
    return section("Provenance", body, anchor="provenance")


def _share(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def disturbance_section(fit: FitResult) -> str:
    """The host's load during the sweep, and everything the fit set aside or flagged about the probes."""
    host = fit.host_disturbance
    if host is None:
        body = paragraph("The host's load was not measured for this run (a probe table, or a run before the monitor).")
    else:
        verdict = "DISTURBED: emit-config refuses it without --allow-disturbed" if host.disturbed else "quiet"
        body = tag(
            "p",
            tag("strong", esc(verdict))
            + esc(
                f": other processes took a median {_share(host.median)} and at most {_share(host.max)} of "
                f"{host.resource} over "
                f"{host.n_measured} probes (a probe counts as disturbed above {host.bound:.0%}, the run above "
                f"{host.run_bound:.0%} of them)."
            ),
        )
        body += (
            details(f"{len(host.disturbed_probes)} disturbed probes", bullets(host.disturbed_probes))
            if host.disturbed_probes
            else ""
        )
    counts = [
        ("invalid probes excluded", fit.n_invalid_excluded),
        ("warm-up probes excluded", fit.n_warmup_excluded),
        ("duplicate rows collapsed", fit.n_duplicates_collapsed),
    ]
    body += table(["set aside", "probes"], [[cell(what), cell(str(n), n)] for what, n in counts])
    lines = [
        f"{m.leg}: a slow mode, {m.n_slow} of {m.n_probes} probes ({m.share:.0%}) at {m.ratio:.2g}x the fast time"
        + (" (the curve is the mean cost)" if m.mean_fitted else "")
        for m in fit.slow_modes
    ]
    if fit.unresolved_slow is not None:
        u = fit.unresolved_slow
        lines.append(
            f"{u.leg}: {u.n_slow} of {u.n_probes} probes set aside at {u.ratio:.2g}x, too few to tell a stall "
            "from a slow mode"
        )
    lines += [
        f"{t.leg}: TTFT drifted {t.change:+.1%} from the first probe to the last (p = {t.p_value:.2g}, order from "
        f"{t.order_source})"
        for t in fit.time_trends
    ]
    return section("Disturbance record", body + bullets(lines), anchor="disturbance")


def footer() -> str:
    commit = git_commit()
    return esc(
        f"Made by kvcal {__version__}"
        + (f" (git {commit[:12]})" if commit else "")
        + ": one self-contained file; nothing is fetched. Hover a probe for its record; print for a PDF."
    )
