"""Stage 7, above fleet: the deployed fleet read back from Prometheus and checked against the calibration
(``kvcal observe``).

``client.py`` (the bounded Prometheus API client), ``series.py`` (counter increases with
resets, pods, histogram quantiles), ``figures.py`` (the queries and each pod's and the
fleet's figures), ``checks.py`` (against the fit and a ``kvcal fleet`` row), ``result.py``
(``kvcal.observe/1``), ``run.py`` (the entry point).
"""

from kvcal.lazy import public_api

_API = {
    "ObserveConfig": "kvcal.observe.run",
    "run_observe": "kvcal.observe.run",
    "ObserveResult": "kvcal.observe.result",
}
__getattr__ = public_api(__name__, _API)
__all__ = list(_API)
