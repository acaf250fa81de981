"""First-principles estimates: model and hardware profiles, predicted curves, sanity checks of a measurement.

Public API: :func:`predict`, :func:`sanity_for_fit`, :func:`kv_bytes_per_token`. (``kvcal plan`` simulates
campaigns with the sweep's own controller: :mod:`kvcal.plan.simulate_designs`.)
"""

from kvcal.lazy import public_api

_API = {
    "predict": "kvcal.estimate.predict",
    "sanity_for_fit": "kvcal.estimate.sanity",
    "kv_bytes_per_token": "kvcal.estimate.profiles",
}
__all__ = list(_API)
__getattr__ = public_api(__name__, _API)
