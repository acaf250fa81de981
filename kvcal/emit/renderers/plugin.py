"""``--format plugin``: the ``p2p-source-producer`` entry, with the names a values file gives."""

from __future__ import annotations

from kvcal.emit.deployed_values import read_names
from kvcal.emit.options import EmitResult
from kvcal.emit.renderers.base import OutputFormat, Render, transport_of
from kvcal.emit.router import plugin_names, render_plugin


def render(r: Render) -> EmitResult:
    o = r.options
    found = read_names(o.values) if o.values is not None else None
    names = plugin_names(
        prefix_match_producer=o.prefix_match_producer,
        prefill_profile=o.prefill_profile,
        deployment=o.deployment,
        transport=transport_of(r.ctx, o),
        found=found,
    )
    return r.result(render_plugin(r.threshold, names, origin=r.origin), names.notes)


FORMAT = OutputFormat("plugin", render)
