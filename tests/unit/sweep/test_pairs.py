"""A campaign over several pairs (kvcal sweep --pairs), its cold sessions, and the fit per link class (sim pairs)."""

from __future__ import annotations

import json

import pytest

import factories

from kvcal.fit import fit_input
from kvcal.records.run import Leg
from kvcal.records.manifest import RunManifest
from kvcal.records.fit import FitSettings
from kvcal.records.run_folder import RunFolder
from kvcal.settings.sweep import SweepConfig
from kvcal.sweep.runner import make_pair, run_sweep

FAST = {"pull_intercept_ms": 20.0, "pull_per_token_us": 3.0, "session_ms": 0.0}
SLOW = {"pull_intercept_ms": 30.0, "pull_per_token_us": 12.0, "session_ms": 400.0}
PAIRS = [{"name": "a", "class": "near", "sim": FAST}, {"name": "b", "class": "near", "sim": FAST},
         {"name": "c", "class": "far", "sim": SLOW}, {"name": "d", "class": "far", "sim": SLOW}]


def pairs_config(tmp_path, **overrides) -> SweepConfig:
    base = dict(engine="sim", prefix_lengths=[256, 512, 1024, 2048, 4096], reps=3, output_dir=tmp_path, name="run",
                pairs=PAIRS)
    return SweepConfig.model_validate({**base, **overrides})


def test_probes_of_every_pair_interleave_in_one_order_each_tagged_with_its_pair_and_class(tmp_path):
    outcome = run_sweep(pairs_config(tmp_path))
    run = RunFolder(outcome.run_dir)
    records = run.read_probes()
    planned = [r for r in records if r.session != "cold"]
    assert outcome.total == len(planned) == 4 * 5 * 2 * 3
    assert all(r.pair in "abcd" and r.link_class == ("near" if r.pair in "ab" else "far") for r in records)
    assert all(r.probe_id.startswith(f"{r.pair}-") for r in records)
    first_ten = {r.pair for r in planned[:10]}
    assert len(first_ten) >= 3, "one seeded order across pairs, not one pair after another"
    cold = [r for r in records if r.session == "cold"]
    assert [r.pair for r in cold] == ["a", "b", "c", "d"] and all(r.valid and r.bytes_moved for r in cold)
    assert {r.session for r in planned if r.leg is Leg.PULL} == {"warm"}
    manifest = RunManifest.model_validate_json(run.manifest_path.read_text())
    assert manifest.schema_ == "kvcal.run/4" and {p.pair for p in manifest.plan} == set("abcd")


def test_the_fit_reports_each_class_its_session_cost_and_that_the_classes_differ(tmp_path):
    outcome = run_sweep(pairs_config(tmp_path))
    fit = fit_input(outcome.run_dir, settings=FitSettings(n_resamples=200))
    near, far = fit.classes["near"], fit.classes["far"]
    assert near.pairs == ["a", "b"] and far.pairs == ["c", "d"]
    assert far.pull_us_per_token == pytest.approx(12.0, rel=0.1) and near.pull_us_per_token == pytest.approx(3.0, rel=0.15)
    assert far.break_even_tokens > near.break_even_tokens
    assert far.session_cost_ms == pytest.approx(400.0, rel=0.05) and far.session_cost_ci[0] < far.session_cost_ms
    assert near.session_cost_ci[0] < 50 and far.fit.session_cost.n_cold == 2
    assert fit.class_difference.differ and fit.class_difference.classes == ["far", "near"]
    raw = json.loads(fit.model_dump_json(by_alias=True))
    assert set(raw["classes"]["far"]) >= {"break_even_tokens", "break_even_ci", "pull_fixed_ms", "pull_us_per_token",
                                           "session_cost_ms"}


def test_classes_with_one_curve_are_not_called_different(tmp_path):
    same = [{**p, "sim": FAST} for p in PAIRS]
    fit = fit_input(run_sweep(pairs_config(tmp_path, pairs=same)).run_dir, settings=FitSettings(n_resamples=100))
    assert fit.class_difference is not None and not fit.class_difference.differ


def test_a_one_pair_fit_has_no_classes_but_its_session_cost(tmp_path):
    config = SweepConfig.model_validate(dict(engine="sim", prefix_lengths=[256, 1024, 4096], reps=3, output_dir=tmp_path,
                                             name="one", cold_sessions=4, sim=SLOW))
    outcome = run_sweep(config)
    cold = [r for r in RunFolder(outcome.run_dir).read_probes() if r.session == "cold"]
    assert [r.probe_id for r in cold] == [f"cold{i}-L256-pull-r0" for i in range(4)] and {r.pair for r in cold} == {None}
    fit = fit_input(outcome.run_dir, settings=FitSettings(n_resamples=100))
    assert fit.classes is None and fit.class_difference is None
    cost = fit.session_cost
    assert cost.n_cold == 4 and cost.value_ms == pytest.approx(400.0, rel=0.03) and cost.ci[0] < cost.value_ms < cost.ci[1]


class Crash(Exception):
    pass


def crashing_pairs(after: int):
    """The campaign's pairs, all dying together after ``after`` measurements in all (a killed sweep)."""
    calls = {"n": 0}

    def factory(config, run):
        pairs = make_pair(config, run)
        for member in pairs.members().values():
            original = member.measure

            def measure(leg, ids, original=original):
                calls["n"] += 1
                if calls["n"] > after:
                    raise Crash("killed")
                return original(leg, ids)

            member.measure = measure
        return pairs

    return factory


def test_a_campaign_over_pairs_killed_and_resumed_loses_and_repeats_nothing(tmp_path):
    config = pairs_config(tmp_path, prefix_lengths=[256, 1024], reps=2)
    with pytest.raises(Crash):
        run_sweep(config, pair_factory=crashing_pairs(4 * 2 + 9))  # 4 pairs opened (2 calls each), 9 probes
    run = RunFolder(tmp_path / "run")
    before = run.read_probes()
    assert len([r for r in before if r.session != "cold"]) == 9
    outcome = run_sweep(config, resume=True)
    after = run.read_probes()
    assert after[:len(before)] == before and outcome.done_before == 9 and outcome.measured == 4 * 2 * 2 * 2 - 9
    planned_ids = [r.probe_id for r in after if r.session != "cold"]
    assert len(planned_ids) == len(set(planned_ids)) == len(run.manifest().plan)
    cold_ids = [r.probe_id for r in after if r.session == "cold"]
    assert len(cold_ids) == len(set(cold_ids)) == 8  # each pair's restart opened a fresh session: a new sample


def test_pairs_beside_a_producer_url_and_bad_pair_files_exit_2(tmp_path, kvcal):
    pairs = tmp_path / "pairs.yaml"
    pairs.write_text("pairs:\n  - {name: a, class: near, producer-url: 'http://10.0.0.1:8000', "
                     "consumer_url: 'http://10.0.0.2:8000'}\n")
    both = kvcal("sweep", "--pairs", pairs, "--producer-url", "http://10.0.0.1:8000", "--consumer-url",
                 "http://10.0.0.3:8000", "--output-dir", tmp_path, "--dry-run")
    assert both.code == 2 and "drop --producer-url/--consumer-url" in both.err and "Traceback" not in both.err
    for text, says in (("pairs: []\n", "must hold 'pairs:'"), ("pairs:\n  - {name: a}\n", "class"),
                       ("pairs:\n  - {name: a, class: x}\n  - {name: a, class: y}\n", "listed twice"),
                       ("pairs:\n  - {name: a, class: x}\n", "give both producer_url and consumer_url")):
        pairs.write_text(text)
        result = kvcal("sweep", "--pairs", pairs, "--output-dir", tmp_path, "--dry-run")
        assert result.code == 2 and says in result.err, (text, result.err)


def test_a_version_3_run_json_loads_unchanged(tmp_path):
    run_sweep(SweepConfig.model_validate(dict(engine="sim", prefix_lengths=[256], reps=1, output_dir=tmp_path,
                                              name="r")))
    path = tmp_path / "r" / "run.json"
    raw = json.loads(path.read_text())
    for entry in raw["plan"]:
        del entry["pair"], entry["link_class"]
    raw["settings"] = factories.flat_settings(RunFolder(tmp_path / "r").manifest().settings)  # flat until version 4
    for key in ("pairs", "cold_sessions"):
        del raw["settings"][key]
    raw["schema"] = "kvcal.run/3"
    path.write_text(json.dumps(raw))
    manifest = RunFolder(tmp_path / "r").manifest()
    assert manifest.schema_ == "kvcal.run/4" and [p.probe_id for p in manifest.plan] == [e["probe_id"] for e in raw["plan"]]
    assert manifest.settings.pairs is None and manifest.settings.probe.cold_sessions == 1


def test_a_cold_pull_after_a_failed_handshake_is_kept_out_of_the_session_cost():
    from kvcal.fit.session_cost import session_cost
    from kvcal.records.fit import CurveFit
    from kvcal.records.run import ProbeRecord

    def cold(attempt, ttft, valid=True):
        return ProbeRecord(probe_id=f"cold{attempt}-L256-pull-r0", plan_index=0, attempt=attempt, prefix_tokens=256,
                           leg=Leg.PULL, rep=0, ttft_ms=ttft, bytes_moved=2048 * 256 if valid else 0, valid=valid,
                           started_at="2026-01-01T00:00:00+00:00", session="cold", bytes_metric="consumer/x")

    warm = CurveFit(model="affine", intercept_ms=20.0, per_token_us=0.0, per_token2_ns=0.0)
    records = [cold(0, 520.0), cold(0, 25.0, valid=False), cold(1, 80.0)]  # the second pair's retry paid part
    cost = session_cost(records, warm, 0.9)
    assert cost.value_ms == 500.0 and cost.n_cold == 1 and cost.n_retried == 1 and cost.ci is None
    assert cost.pulls_by_proof == {"consumer/x": 1}
    assert session_cost([cold(1, 80.0)], warm, 0.9) is None
