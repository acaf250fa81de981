"""The in-cluster calibration Jobs `kvcal k8s-job` renders: one pair (job.py), or one pod a pair (pairs_job.py).

May import the sweep's settings and validation and everything below them; nothing above (emit, gate, ...)
imports it. Public API: :class:`JobSpec`, :func:`job_manifest` and :func:`render_job`.
"""

from kvcal.lazy import public_api

_API = {
    "JobSpec": "kvcal.k8s.job",
    "job_manifest": "kvcal.k8s.job",
    "render_job": "kvcal.k8s.job",
}
__all__ = list(_API)
__getattr__ = public_api(__name__, _API)
