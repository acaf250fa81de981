"""The records on disk and their readers: a run's probes, run.json, fit.json, the run folder.

What it holds: the records of a probe, of what a run measured on and of its plan (:mod:`~kvcal.records.run`);
``run.json`` (:mod:`~kvcal.records.manifest`); ``fit.json`` (:mod:`~kvcal.records.fit`) and its parts
(``fit_mean_cost``, ``fit_costmodel``, ``fit_engine``, ``fit_links``); reading older schemas
(:mod:`~kvcal.records.old_schemas`); the run folder on disk (:mod:`~kvcal.records.run_folder`); what a probe
record must agree with (:mod:`~kvcal.records.probe_checks`) and the bounds on a probe's ``host_busy``
(:mod:`~kvcal.records.disturbance_bounds`).

May import: settings/, costs/, files/, transports/ and the root modules.
"""
