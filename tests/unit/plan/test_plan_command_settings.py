"""kvcal plan's settings are one model, checked before the prior is built (a run without fit.json is fitted)."""

from __future__ import annotations

import pytest

from kvcal.errors import InputError
from kvcal.plan.settings import PlanConfig


def _no_work(*_args, **_kwargs):
    raise AssertionError("the prior was built")


@pytest.mark.parametrize("flags, says", [
    (["--target-width", "0"], "--target-width must lie between 0 and 10 (exclusive), got 0.0"),
    (["--target-regret", "1.5"], "--target-regret must lie between 0 and 1 (exclusive), got 1.5"),
    (["--noise-cv", "3"], "--noise-cv must lie between 0 and 2 (exclusive), got 3.0"),
    (["--block-size", "0"], "--block-size must be a positive number of tokens, got 0"),
    (["--model", "glm-4.5"], "give either --from"),
])
def test_a_bad_plan_setting_is_refused_before_the_prior_is_built(flags, says, kvcal, monkeypatch, tmp_path):
    monkeypatch.setattr("kvcal.plan.run.prior_from_fit", _no_work)
    monkeypatch.setattr("kvcal.plan.run.plan_campaigns", _no_work)
    done = kvcal("plan", "--from", tmp_path, *flags)
    assert done.code == 2, done.err
    assert says in done.err and len(done.err.strip().splitlines()) == 1


def test_a_plan_needs_one_prior():
    with pytest.raises(InputError, match="no prior"):
        PlanConfig(model="glm-4.5")
    assert PlanConfig(model="glm-4.5", hardware="h200").campaigns == 10
