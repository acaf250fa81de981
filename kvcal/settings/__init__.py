"""The settings, each declared once: the sweep's, and a command's model built from flags.

What it holds: the sweep's settings as a whole (:mod:`~kvcal.settings.sweep`), in groups
(:mod:`~kvcal.settings.sweep_groups`) and as flags (:mod:`~kvcal.settings.sweep_flags`); a command's settings
model built from its flags, bounds checked (:mod:`~kvcal.settings.from_flags`); what an engine's argument list
says (:mod:`~kvcal.settings.engine_args`). What the helps show of these models is generated from them into
kvcal/cli/help_tables.py (scripts/gen_help_tables.py).

May import: costs/, files/, transports/ and the root modules.
"""
