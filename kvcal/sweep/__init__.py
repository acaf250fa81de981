"""Sweep stage: settings, probe plan, the probe session that drives an engine pair, the summaries of its record.

Public API: :func:`run_sweep` (the one entry that runs or resumes a planned or adaptive
campaign), :func:`plan_dry_run`, :class:`SweepConfig` and :func:`resolve_config`,
:class:`RunFolder`, :class:`SweepOutcome` / :class:`AdaptiveOutcome`, :class:`SweepProgress`.
(``kvcal plan``, which simulates campaigns with this stage's adaptive controller, is :mod:`kvcal.plan`, above it.)
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
}
__all__ = list(_API)
__getattr__ = public_api(__name__, _API)
