"""Emit stage: every output format that carries the threshold (router plugin, Helm values, engine flags).

The threshold itself is chosen in :mod:`kvcal.threshold`, below. Public API: :func:`emit` with
:class:`EmitOptions` (one module per ``--format``, named in ``renderers.FORMATS``).
"""

from kvcal.lazy import public_api

_API = {
    "emit": "kvcal.emit.formats",
    "EmitOptions": "kvcal.emit.options",
    "EmitResult": "kvcal.emit.options",
}
__all__ = list(_API)
__getattr__ = public_api(__name__, _API)
