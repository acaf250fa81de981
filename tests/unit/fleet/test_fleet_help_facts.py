"""kvcal/fleet/help_facts.py holds bounds that `kvcal fleet --help` shows and the settings use: declared once, there.
(The workload file's keys are generated into kvcal/cli/help_tables.py: tests/unit/cli/test_help_tables.py.)"""

from __future__ import annotations

from kvcal.fleet import help_facts, settings


def test_the_settings_take_their_bounds_from_the_help_facts():
    assert settings.MAX_PODS is help_facts.MAX_PODS
    assert settings.DEFAULT_MAX_SIMULATED_REQUESTS is help_facts.DEFAULT_MAX_SIMULATED_REQUESTS
