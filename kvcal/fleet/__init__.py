"""Stage 6, above fit and emit: what a calibrated threshold does to a whole fleet under a workload (``kvcal fleet``).

``workload.py`` (the YAML record), ``traffic.py`` (sessions or a replayed trace),
``costs.py`` (the calibration as step, pull and CPU-tier costs), ``cache.py`` (each
engine's tiers, the router's index), ``router.py`` (pod choice and the P2P rule),
``sim.py`` (the event loop), ``host.py`` (engines sharing one host), ``study.py``
(policies, seeds, resamples, the best and recommended thresholds), ``parallel.py``
(where the runs execute: worker processes or Ray tasks), ``run.py`` (the
entry point), ``result.py`` (the output record), ``plot.py`` (TTFT p90 and goodput
against threshold and load).
"""
