"""Sweep stage: settings, probe plan, the probe session that drives an engine pair, the append-only recorder.

Public API: :func:`run_sweep` (the one entry that runs or resumes a planned or adaptive
campaign), :func:`plan_dry_run`, :class:`SweepConfig` and :func:`resolve_config`,
:class:`RunFolder`, :class:`SweepOutcome` / :class:`AdaptiveOutcome`, :class:`SweepProgress`.
"""

from kvcal.lazy import public_api

_API = {
    "run_sweep": "kvcal.sweep.runner", "plan_dry_run": "kvcal.sweep.runner", "make_pair": "kvcal.sweep.runner",
    "SweepConfig": "kvcal.sweep.config", "resolve_config": "kvcal.sweep.config",
    "load_campaign_file": "kvcal.sweep.config", "RunFolder": "kvcal.sweep.recorder",
    "SweepOutcome": "kvcal.sweep.session", "ProbeSession": "kvcal.sweep.session",
    "AdaptiveOutcome": "kvcal.sweep.adaptive_run", "SweepProgress": "kvcal.sweep.progress",
}
__all__ = list(_API)
__getattr__ = public_api(__name__, _API)
