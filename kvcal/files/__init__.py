"""The files a command reads and writes, on the ground floor's lowest step.

What it holds: writing outputs whole or not at all (:mod:`~kvcal.files.writing`), reading the files a user
names (:mod:`~kvcal.files.reading`), YAML that refuses ``yes``/``no`` numbers (:mod:`~kvcal.files.yaml_guard`),
the engine and Prometheus URLs a user gives (:mod:`~kvcal.files.urls`), the provenance stamped on every
artifact (:mod:`~kvcal.files.provenance`) and start times read as instants (:mod:`~kvcal.files.instants`).

May import: the root modules only (errors, redact, terminal_text, lazy).
"""
