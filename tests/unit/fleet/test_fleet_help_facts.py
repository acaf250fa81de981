"""kvcal/fleet/help_facts.py holds what `kvcal fleet --help` shows without the pydantic records: it must be what
the records build (a stale copy fails here, with the literal to paste)."""

from __future__ import annotations

import textwrap

from kvcal.fleet import help_facts, settings, workload


def literal(text: str, width: int = 100) -> str:
    """Python source of ``text`` as implicitly concatenated pieces, each of its lines cut at spaces."""
    pieces = [piece for line in text.splitlines(keepends=True)
              for piece in textwrap.wrap(line, width, drop_whitespace=False, replace_whitespace=False) or [line]]
    return "(\n" + "".join(f"    {piece!r}\n" for piece in pieces) + ")"


def test_the_stored_workload_keys_are_what_the_workload_record_builds():
    built = workload.keys_help()
    assert help_facts.WORKLOAD_KEYS == built, f"kvcal/fleet/help_facts.py is stale; paste:\nWORKLOAD_KEYS = {literal(built)}"


def test_the_literal_printed_for_a_stale_copy_is_the_text():
    namespace: dict = {}
    exec(f"text = {literal(workload.keys_help())}", namespace)
    assert namespace["text"] == workload.keys_help()


def test_the_settings_take_their_bounds_from_the_help_facts():
    assert settings.MAX_PODS is help_facts.MAX_PODS
    assert settings.DEFAULT_MAX_SIMULATED_REQUESTS is help_facts.DEFAULT_MAX_SIMULATED_REQUESTS
