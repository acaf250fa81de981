"""The threshold rules are one table (kvcal/threshold/rules/): a rule registered there is a --rule choice, in the
help, in docs/emit.md's list and on the run page, checked, with no other edit; the table's module stays light."""

from __future__ import annotations

import subprocess
import sys
import types
from types import SimpleNamespace

import pytest

from factories import make_fit
from kvcal.emit.options import EmitOptions
from kvcal.errors import InputError
from kvcal.threshold import rules
from kvcal.threshold.choose import compute_threshold
from kvcal.report.run_page import rule_text
from kvcal.threshold.decision import decide
from tests.docs_lists import docs_block


@pytest.fixture
def dummy_rule(monkeypatch):
    """A rule registered by its line in the table alone: it picks the shortest measured length, on a block."""

    def choose(w, *, margin, deltas, allow_extrapolation):
        threshold = -(-w.n_min // w.block) * w.block
        return rules.Chosen(threshold, decide(w.fit, block_size=w.block, deltas=deltas), carries_decision=False)

    module = types.ModuleType("dummy_rule_module")
    module.choose = choose  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "dummy_rule_module", module)
    entry = rules.Rule("shortest", "dummy_rule_module", "the shortest measured length", takes_margin=False)
    monkeypatch.setattr(rules, "TABLE", (*rules.TABLE, entry))
    return entry


def test_a_registered_rule_is_a_choice_in_the_help_checked_and_run(dummy_rule):
    assert rules.rule_names()[-1] == "shortest"
    assert "or shortest." in rules.rule_help() and "shortest: the shortest measured length." in rules.rule_help()
    assert EmitOptions(rule="shortest").rule == "shortest"
    with pytest.raises(InputError, match="--margin applies only to --rule upper"):
        EmitOptions(rule="shortest", margin=0.1)
    chosen = compute_threshold(make_fit(), rule="shortest")
    assert (chosen.rule, chosen.min_cached_token_delta, chosen.decision) == ("shortest", 256, None)
    assert rules.docs_list().splitlines()[-1] == "* `shortest`: the shortest measured length."
    page = rule_text(SimpleNamespace(emitted=SimpleNamespace(threshold=chosen), fit=make_fit()))
    assert "The rule (--rule shortest): the shortest measured length." in page
    assert set(chosen.alternatives) == {"upper", "recipe"}  # priced against the rules the table marks, not itself


def test_the_docs_list_is_the_table():
    assert docs_block("emit.md", "rules") == rules.docs_list(), "run scripts/docs_lists.py"


def test_each_rule_words_the_run_page_from_its_entry():
    words = {rule.name: rule.report_words(0.25, 64) for rule in rules.TABLE}
    assert words["upper"].startswith("The rule (--rule upper): ") and "margin 0.25" in words["upper"]
    assert words["expected-cost"].startswith("The rule (expected cost, the default): ") and "block size 64" in words[
        "expected-cost"]


def test_the_help_names_every_rule_and_the_default_first():
    assert rules.DEFAULT_RULE == "expected-cost" == rules.rule_names()[0]
    assert rules.rule_help().startswith("How the threshold is chosen: expected-cost or upper. expected-cost: ")


@pytest.mark.parametrize("rule, margin, match", [
    ("cheapest", None, r"unknown --rule 'cheapest'; choose one of expected-cost, upper"),
    ("expected-cost", 0.2, r"--margin applies only to --rule upper \(the expected-cost rule has no margin\)"),
    ("upper", -1.0, r"--margin must be a fraction from 0 to 100"),
])
def test_rule_and_margin_are_checked_in_one_place_for_emit_config_and_the_library(rule, margin, match):
    with pytest.raises(InputError, match=match):
        rules.resolve_rule(rule, margin)
    with pytest.raises(InputError, match=match):
        EmitOptions(rule=rule, margin=margin)
    with pytest.raises(InputError, match=match):
        compute_threshold(make_fit(), rule=rule, margin=margin)


def test_upper_takes_its_default_margin_and_expected_cost_none():
    assert rules.resolve_rule("upper", None) == 0.25 and rules.resolve_rule("expected-cost", None) is None


def test_the_table_loads_no_rule_and_no_record():
    code = ("import sys; from kvcal.threshold import rules; rules.rule_help(); "
            "print(sorted(m for m in sys.modules if m.startswith('kvcal.') or m == 'pydantic'))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "kvcal.threshold.rules.upper" not in loaded and "kvcal.threshold.rules.expected_cost" not in loaded
    assert "kvcal.records.fit" not in loaded and "pydantic" not in loaded
