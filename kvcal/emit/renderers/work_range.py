"""``--format work-range``: the prefill work-range labels of remaining-work routing and its EPP entries."""

from __future__ import annotations

from kvcal.emit.affinity import peak_prefill
from kvcal.emit.options import EmitResult
from kvcal.emit.renderers.base import OutputFormat, Render, transport_of, work_range_of
from kvcal.emit.router import plugin_names
from kvcal.emit.work_range import WORK_RANGE_PRODUCER, render_work_range, work_range_entries


def render(r: Render) -> EmitResult:
    """The remaining-work set: labels for B and MAX, and the EPP entries to merge (kvcal.emit.work_range)."""
    o = r.options
    assert o.ttft_penalty_ms is not None
    wr = work_range_of(r)
    labels = wr.labels()  # exit 3 on an empty band, 2 without MAX
    peak = peak_prefill(r.fit, r.ctx, o.chunk_size)
    names = plugin_names(
        prefix_match_producer=o.prefix_match_producer or WORK_RANGE_PRODUCER,
        prefill_profile=o.prefill_profile,
        deployment=o.deployment,
        transport=transport_of(r.ctx, o),
    )
    about = (
        f"{'from ' + r.origin + '; ' if r.origin else ''}T: {r.threshold.cost_line()}; merge these entries into the "
        "EPP config and label the prefill pods"
    )
    entries = work_range_entries(names, peak.tokens_per_s, o.ttft_penalty_ms)
    text = render_work_range(wr, labels, entries, about=about)
    d_note = (
        f"the P2P source keeps minCachedTokenDelta 1 (it publishes S - D + 1 reusable tokens: a larger D lengthens "
        f"every routed request by D - 1); the threshold T {wr.threshold} sets B instead"
    )
    return r.result(text, [d_note, *names.notes, *peak.notes, labels.line()], [*wr.warnings, *peak.warnings])


FORMAT = OutputFormat("work-range", render)
