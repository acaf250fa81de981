"""Report stage: comparing runs, plotting fits, trends over history.

Public API: :func:`run_compare`, :func:`run_history`, :func:`plot_input`.
"""

from kvcal.lazy import public_api

_API = {
    "run_compare": "kvcal.gate.compare",
    "run_history": "kvcal.gate.history",
    "plot_input": "kvcal.gate.plot",
}
__all__ = list(_API)
__getattr__ = public_api(__name__, _API)
