"""kvcal compare's settings are one model, checked before either run is loaded (a run folder is fitted: slow)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvcal.errors import InputError
from kvcal.gate.compare_settings import CompareConfig


def _no_work(*_args, **_kwargs):
    raise AssertionError("a run was loaded")


@pytest.mark.parametrize("flags, says", [
    (["--tolerance", "-0.1"], "--tolerance must be a relative change in (0, 10), got -0.1"),
    (["--tolerance", "10"], "--tolerance must be a relative change in (0, 10), got 10.0"),
    (["--deployed", "0"], "--deployed must be >= 1 token (minCachedTokenDelta), got 0"),
])
def test_a_bad_compare_setting_is_refused_before_the_runs_load(flags, says, kvcal, monkeypatch, tmp_path):
    monkeypatch.setattr("kvcal.gate.compare.load_run", _no_work)
    done = kvcal("compare", tmp_path / "base", tmp_path / "new", *flags)
    assert done.code == 2, done.err
    assert says in done.err and len(done.err.strip().splitlines()) == 1


def test_the_deployed_threshold_is_given_once():
    with pytest.raises(InputError, match="give the deployed threshold once"):
        CompareConfig(baseline=Path("a"), current=Path("b"), deployed_tokens=2048, values_file=Path("v.yaml"))
