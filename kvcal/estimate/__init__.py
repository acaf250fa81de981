"""First-principles estimates: model and hardware profiles, predicted curves, sanity checks of a measurement.

Public API: :func:`predict`, :func:`sanity_for_fit`, :func:`kv_bytes_per_token`, and ``kvcal plan``'s
:func:`plan_campaigns` with its priors (:func:`prior_from_fit`, :func:`prior_from_profiles`).
"""

from kvcal.lazy import public_api

_API = {
    "predict": "kvcal.estimate.predict", "sanity_for_fit": "kvcal.estimate.sanity",
    "kv_bytes_per_token": "kvcal.estimate.profiles", "plan_campaigns": "kvcal.estimate.campaign_plan",
    "prior_from_fit": "kvcal.estimate.campaign_plan", "prior_from_profiles": "kvcal.estimate.campaign_plan",
}
__all__ = list(_API)
__getattr__ = public_api(__name__, _API)
