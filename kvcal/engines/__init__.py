"""Engine pairs that kvcal can drive; each engine is one module behind :class:`EnginePair`.

Public API: :class:`EnginePair` and :class:`LegMeasurement`, the pairs :class:`VllmPair` and
:class:`SimPair`, :class:`SimCosts`, and the transports (:func:`get_transport`, :func:`transport_names`).
"""

from kvcal.lazy import public_api

_API = {
    "EnginePair": "kvcal.engines.base", "LegMeasurement": "kvcal.engines.base", "VllmPair": "kvcal.engines.vllm",
    "pair_from_config": "kvcal.engines.vllm", "SimPair": "kvcal.engines.sim", "SimCosts": "kvcal.sim_costs",
    "get_transport": "kvcal.engines.transports", "transport_names": "kvcal.engines.transports",
}
__all__ = list(_API)
__getattr__ = public_api(__name__, _API)
