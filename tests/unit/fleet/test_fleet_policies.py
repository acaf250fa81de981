"""The fleet policies' table: each policy's rule, the docs' list, and a new policy being one module."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import pytest

from kvcal.errors import InputError
from kvcal.fleet import policies
from kvcal.fleet.costs import CostRule
from kvcal.fleet.policies.always_pull import AlwaysPull
from kvcal.fleet.policies.base import Policy
from kvcal.fleet.policies.costmodel import CostModelPolicy
from kvcal.fleet.policies.no_p2p import NoP2P
from kvcal.fleet.policies.threshold import ThresholdPolicy
from kvcal.fleet.result import FleetRow
from kvcal.fleet.study import policies as study_policies
from tests.docs_lists import docs_block, loaded_after_import
from tests.factories import make_fit


def test_the_table_names_every_policy_module_in_the_study_order():
    assert policies.policy_names() == ("no-p2p", "always-pull", "threshold", "costmodel")
    assert [cls.name for cls in policies.policy_classes()] == list(policies.policy_names())
    with pytest.raises(InputError, match="unknown fleet policy 'sometimes'; choose one of: no-p2p, always-pull"):
        policies.policy_class("sometimes")


def test_naming_the_policies_loads_no_policy_code():
    heavy = ["numpy", "pandas", "pydantic", "kvcal.fleet.policies.threshold", "kvcal.fleet.policies.base"]
    assert loaded_after_import("kvcal.fleet.policies", heavy) == []


def test_each_policy_pulls_by_its_own_rule():
    assert not any(NoP2P().pulls(d, 0, 0, 0) for d in (1, 10**6))
    assert AlwaysPull().pulls(1, 0, 0, 0) and not AlwaysPull().pulls(0, 0, 0, 0)
    assert [ThresholdPolicy(512).pulls(d, 0, 0, 0) for d in (0, 511, 512)] == [False, False, True]
    never = CostRule(0.0, 1.0, 1e9, 0.0, 0.0, busy_queue=1, fleet_weight=0.0)
    assert not CostModelPolicy(256, never).pulls(10**5, 0, 0, 0)
    assert not CostModelPolicy(256).pulls(255, 0, 0, 0) and CostModelPolicy(256).pulls(256, 0, 0, 0)


def test_only_the_swept_policy_rows_carry_a_threshold():
    assert ThresholdPolicy(512).row_threshold == 512 and CostModelPolicy(256).row_threshold is None


def test_the_docs_list_is_the_table():
    assert docs_block("fleet.md", "policies") == policies.docs_list(), "run scripts/docs_lists.py"


@dataclass(frozen=True)
class SometimesPull(Policy):
    name = "sometimes"
    summary = "pull every other delta (a test's policy)"

    def pulls(self, delta: int, running: int, source_waiting: int, computing_waiting: int) -> bool:
        return delta % 2 == 1


POLICY = SometimesPull


def test_a_new_policy_is_one_module(monkeypatch):
    monkeypatch.setitem(policies.POLICIES, "sometimes", __name__)
    assert sys.modules[__name__].POLICY is SometimesPull
    assert "sometimes" in policies.policy_names()
    assert "* `sometimes`: pull every other delta (a test's policy)." in policies.docs_list().splitlines()
    assert SometimesPull() in study_policies(make_fit(), [512])  # the study runs it
    figure = {"value": 1.0, "ci": [1.0, 1.0]}
    keys = ("goodput_rps", "completed_rps", "input_tokens_per_s", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms",
            "ttft_mean_ms", "prefill_queue_p90", "pull_share", "tokens_moved_per_s", "busy_share")
    assert FleetRow(policy="sometimes", threshold=None, **dict.fromkeys(keys, figure)).policy == "sometimes"
