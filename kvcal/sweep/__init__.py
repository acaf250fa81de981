"""Sweep stage: settings, probe plan, the runner that drives an engine pair, the append-only recorder, progress hooks."""
