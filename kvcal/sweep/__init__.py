"""Sweep stage: settings, probe plan, the probe session that drives an engine pair, the summaries of its record.

Public API: :func:`run_sweep` (the one entry that runs or resumes a planned or adaptive
campaign), :func:`plan_dry_run`, :class:`SweepConfig` and :func:`resolve_config`,
:class:`RunFolder`, :class:`SweepOutcome` / :class:`AdaptiveOutcome`, :class:`SweepProgress`;
``kvcal plan``'s :func:`plan_campaigns` with its priors (:func:`prior_from_fit`, :func:`prior_from_profiles`).
"""

from kvcal.lazy import public_api

_API = {
    "run_sweep": "kvcal.sweep.runner",
    "plan_dry_run": "kvcal.sweep.runner",
    "make_pair": "kvcal.sweep.runner",
    "SweepConfig": "kvcal.settings.sweep",
    "resolve_config": "kvcal.sweep.validate",
    "load_campaign_file": "kvcal.sweep.validate",
    "RunFolder": "kvcal.records.run_folder",
    "SweepOutcome": "kvcal.sweep.session",
    "ProbeSession": "kvcal.sweep.session",
    "AdaptiveOutcome": "kvcal.sweep.adaptive_run",
    "SweepProgress": "kvcal.sweep.progress",
    "plan_campaigns": "kvcal.sweep.lengths.simulate_designs",
    "prior_from_fit": "kvcal.sweep.lengths.priors",
    "prior_from_profiles": "kvcal.sweep.lengths.priors",
}
__all__ = list(_API)
__getattr__ = public_api(__name__, _API)
