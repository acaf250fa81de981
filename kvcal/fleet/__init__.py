"""Stage 6, above fit and emit: what a calibrated threshold does to a whole fleet under a workload (``kvcal fleet``).

``workload.py`` (the YAML record), ``traffic.py`` (sessions or a replayed trace),
``costs.py`` (the calibration as step, pull and CPU-tier costs), ``cache.py`` (each
engine's tiers, the router's index), ``router.py`` (pod choice), ``policies/`` (the P2P
rules a study compares, one module each),
``sim.py`` (the event loop), ``run_state.py`` (each pod's engine state and the run's
figures), ``host.py`` (engines sharing one host), ``links.py`` (link classes), ``study.py``
(the independent runs: policies, seeds, resamples, and ``run_all``, the loop over them),
``parallel.py`` (where the runs execute: worker processes or Ray tasks),
``choose.py`` (the best and recommended thresholds), ``settings.py`` (every flag and its
bounds), ``size.py`` (the study's size and its cap), ``run.py`` (the entry point),
``result.py`` (the output record), ``plot.py`` (TTFT p90 and goodput against threshold
and load).
"""
