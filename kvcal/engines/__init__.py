"""Engine pairs that kvcal can drive; each engine is one module behind :class:`EnginePair`.

Public API: :class:`EnginePair` and :class:`LegMeasurement`, the pairs :class:`VllmPair` and
:class:`SimPair`, and :class:`SimCosts`. The KV transports they use are a base package of their own
(:mod:`kvcal.transports`: the settings below the engines validate against their names).
"""

from kvcal.lazy import public_api

_API = {
    "EnginePair": "kvcal.engines.base",
    "LegMeasurement": "kvcal.engines.base",
    "VllmPair": "kvcal.engines.vllm",
    "pair_from_config": "kvcal.engines.vllm",
    "SimPair": "kvcal.engines.sim",
    "SimCosts": "kvcal.costs.simulated",
}
__all__ = list(_API)
__getattr__ = public_api(__name__, _API)
