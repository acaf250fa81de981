"""``--format costmodel``: the ``costModel`` block (only for a router build that accepts it)."""

from __future__ import annotations

from kvcal.emit.costmodel_block import render_costmodel
from kvcal.emit.options import EmitResult
from kvcal.emit.renderers.base import OutputFormat, Render, with_threshold_comment


def render(r: Render) -> EmitResult:
    text, more_notes, more_warn = render_costmodel(r.fit, r.origin)
    return r.result(with_threshold_comment(text, r.threshold), more_notes, more_warn)


FORMAT = OutputFormat("costmodel", render)
