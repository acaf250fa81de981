"""Emit stage: the threshold rule and every output format (router plugin, Helm values, engine flags).

Public API: :func:`emit` with :class:`EmitOptions` (one module per ``--format``, named in ``renderers.FORMATS``),
:func:`compute_threshold` and :class:`Threshold`.
"""

from kvcal.lazy import public_api

_API = {
    "emit": "kvcal.emit.formats",
    "EmitOptions": "kvcal.emit.options",
    "EmitResult": "kvcal.emit.options",
    "compute_threshold": "kvcal.emit.threshold",
    "Threshold": "kvcal.emit.threshold",
}
__all__ = list(_API)
__getattr__ = public_api(__name__, _API)
