"""``--format env``: the threshold as environment variables."""

from __future__ import annotations

from kvcal.emit.options import EmitResult
from kvcal.emit.renderers.base import OutputFormat, Render
from kvcal.emit.router import render_env


def render(r: Render) -> EmitResult:
    return r.result(render_env(r.threshold))


FORMAT = OutputFormat("env", render)
