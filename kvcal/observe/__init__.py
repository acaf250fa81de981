"""Stage 7, above fleet: the deployed fleet read back from Prometheus and checked against the calibration
(``kvcal observe``).

``client.py`` (the bounded Prometheus API client), ``series.py`` (counter increases with
resets, pods, histogram quantiles), ``figures.py`` (the queries and each pod's and the
fleet's figures), ``catalog.py`` (every figure's series and arithmetic, declared once),
``promql.py`` and ``dashboard.py`` (``--dashboard``: each figure as PromQL, the Grafana model),
``costs.py`` (the production pull and prefill costs), ``checks.py`` (against the fit and a
``kvcal fleet`` row), ``drift.py`` (the costs against fit.json's engine side, per pod),
``adjust.py`` and ``propose.py`` (``--propose``: the fit moved to production costs and its
threshold), ``result.py`` (``kvcal.observe/1``), ``run.py`` (the entry point).
"""

from kvcal.lazy import public_api

_API = {
    "ObserveConfig": "kvcal.observe.run",
    "run_observe": "kvcal.observe.run",
    "ObserveResult": "kvcal.observe.result",
}
__getattr__ = public_api(__name__, _API)
__all__ = list(_API)
