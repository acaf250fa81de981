"""``kvcal plan``: before booking engines, each design's campaigns simulated on a prior's curves and compared.

What it holds: the prior a plan is simulated on, from an earlier run or fit or from ``kvcal predict``'s profiles
(:mod:`~kvcal.plan.priors`); the adaptive, ladder and oracle campaigns simulated on it and summarised side by side
(:mod:`~kvcal.plan.simulate_designs`); the command's settings model (:mod:`~kvcal.plan.settings`), its bounds as
plain numbers for the flags (:mod:`~kvcal.plan.limits`) and its one library call (:mod:`~kvcal.plan.run`).

May import: every package below it: the sweep (the adaptive controller a simulated campaign runs, the default
design's lengths, the regret stop), the fit, the engines (the simulated pair), the estimate (the profiles), the
ground floor and the root modules. Nothing below imports it: the sweep runs campaigns, it never plans them.

Public API: :func:`plan_campaigns` with its priors (:func:`prior_from_fit`, :func:`prior_from_profiles`),
:class:`PlanConfig` and :func:`plan_from_config`.
"""

from kvcal.lazy import public_api

_API = {
    "plan_campaigns": "kvcal.plan.simulate_designs",
    "prior_from_fit": "kvcal.plan.priors",
    "prior_from_profiles": "kvcal.plan.priors",
    "PlanConfig": "kvcal.plan.settings",
    "plan_from_config": "kvcal.plan.run",
}
__all__ = list(_API)
__getattr__ = public_api(__name__, _API)
