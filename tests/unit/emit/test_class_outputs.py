"""What reads a fit with link classes: emit-config (one threshold over the mix, each class's own and its cost), plot."""

from __future__ import annotations

import json

import pytest

from kvcal.fit import fit_and_write
from kvcal.settings.sweep import SweepConfig
from kvcal.sweep.runner import run_sweep
from kvcal.records.fit import FitSettings

NEAR = {"pull_intercept_ms": 20.0, "pull_per_token_us": 3.0}
FAR = {"pull_intercept_ms": 30.0, "pull_per_token_us": 12.0, "session_ms": 400.0}


@pytest.fixture(scope="module")
def classes_run(tmp_path_factory):
    """A three-pair campaign (near: 2 pairs, far: 1) on simulated pairs, fitted."""
    root = tmp_path_factory.mktemp("classes")
    pairs = [{"name": "a", "class": "near", "sim": NEAR}, {"name": "b", "class": "near", "sim": NEAR},
             {"name": "c", "class": "far", "sim": FAR}]
    config = SweepConfig.model_validate(dict(engine="sim", prefix_lengths=[256, 512, 1024, 2048, 4096], reps=3,
                                             output_dir=root, name="run", pairs=pairs))
    outcome = run_sweep(config)
    fit, _ = fit_and_write(outcome.run_dir, settings=FitSettings(n_resamples=200))
    return outcome.run_dir, fit


def emitted(kvcal, run, *args):
    result = kvcal("emit-config", run, "--format", "json", *args)
    assert result.code == 0, result.err
    return json.loads(result.out), result.err


def test_the_default_mix_is_the_campaigns_pairs_and_the_json_names_every_class(classes_run, kvcal):
    run, fit = classes_run
    out, err = emitted(kvcal, run)
    near, far = out["classes"]["near"], out["classes"]["far"]
    assert near["share"] == pytest.approx(2 / 3) and far["share"] == pytest.approx(1 / 3)
    for block in (near, far):
        assert {"pull_fixed_ms", "pull_us_per_token", "session_cost_ms", "threshold", "cost_at_common_ms"} <= set(block)
    assert far["session_cost_ms"] == pytest.approx(400, rel=0.1) and far["pull_us_per_token"] == pytest.approx(12, rel=0.1)
    assert fit.classes["near"].break_even_tokens < out["minCachedTokenDelta"] < fit.classes["far"].break_even_tokens
    assert near["threshold"] < far["threshold"]
    assert "class far (share 0.333)" in err and "at the common" in err


def test_the_common_threshold_follows_the_mix(classes_run, kvcal):
    run, fit = classes_run
    thresholds = [emitted(kvcal, run, "--class-mix", f"near={1 - far:g},far={far:g}")[0]["minCachedTokenDelta"]
                  for far in (0.0, 0.5, 1.0)]
    assert thresholds == sorted(thresholds) and thresholds[0] < thresholds[-1] and thresholds[0] >= 256  # measured from 256
    for share, threshold in ((0.0, thresholds[0]), (1.0, thresholds[-1])):
        alone = fit.classes["far" if share else "near"].break_even_tokens
        assert abs(threshold - alone) <= 64, "one class alone: its own break-even on the curves, to a block"


def test_the_mix_decides_like_one_class_and_says_which_rule(classes_run, kvcal):
    """Under the default rule the mix is the one decision summed over the classes (its decision block is the mix's,
    a class alone gives that class's own threshold); under --rule upper it keeps the earlier form and says so."""
    run, fit = classes_run
    out, _ = emitted(kvcal, run)
    assert out["rule"] == "expected-cost" and out["decision"]["chosen_cost_ms"] < out["decision"]["no_p2p_cost_ms"]
    near_alone = emitted(kvcal, run, "--class-mix", "near=1")[0]
    assert near_alone["minCachedTokenDelta"] == near_alone["classes"]["near"]["threshold"]
    assert near_alone["classes"]["near"]["cost_at_common_ms"] == 0.0  # its own best threshold costs it nothing
    upper, _ = emitted(kvcal, run, "--rule", "upper")
    assert upper["rule"] == "upper" and upper["decision"] is None


def test_the_mix_reads_the_deltas(classes_run, kvcal, tmp_path):
    """--deltas weighs the mix as it weighs one class: with every delta at 4,000 tokens, pulling pays for both
    classes there, and nothing between 512 and 4,000 is seen, so the highest threshold below it is chosen."""
    run, _ = classes_run
    deltas = tmp_path / "d.txt"
    deltas.write_text("512,1\n4000,9\n")
    plain = emitted(kvcal, run)[0]["minCachedTokenDelta"]
    weighed = emitted(kvcal, run, "--deltas", deltas)[0]
    assert weighed["minCachedTokenDelta"] == 3968 != plain
    assert weighed["classes"]["near"]["threshold"] == 3968  # each class's own threshold over the same deltas


def test_bad_class_mixes_exit_2(classes_run, kvcal, tmp_path):
    run, _ = classes_run
    for mix, says in (("near=0.5,mars=0.5", "does not have"), ("near=0.5,far=0.4", "sum to 1"),
                      ("near=1.5", "between 0 and 1"), ("near", "CLASS=SHARE"), ("near=0.5,near=0.5", "twice")):
        result = kvcal("emit-config", run, "--format", "json", "--class-mix", mix)
        assert result.code == 2 and says in result.err and not result.out, (mix, result.err)
    one = SweepConfig.model_validate(dict(engine="sim", prefix_lengths=[256, 4096], reps=2, output_dir=tmp_path, name="one"))
    result = kvcal("emit-config", run_sweep(one).run_dir, "--class-mix", "near=1")
    assert result.code == 2 and "needs a fit with link classes" in result.err


def test_plot_draws_the_classes_together(classes_run, tmp_path):
    from kvcal.gate.plot import classes_figure, plot_input

    run, fit = classes_run
    figure = classes_figure(fit, run)
    top = figure.axes[0]
    labels = [text.get_text() for text in top.get_legend().get_texts()]
    assert any(label.startswith("near (2 pairs): pull fit") for label in labels)
    assert any(label.startswith("far (1 pair): pull fit") for label in labels)
    assert "link classes" in figure._suptitle.get_text()
    assert plot_input(run, tmp_path / "classes.png").stat().st_size > 0


def test_the_mix_asks_the_rules_table_whether_it_sums_point_curves(classes_run, monkeypatch):
    """The point-curve form is the rule entry's flag, not its name: set on the default rule, its mix takes that form."""
    from dataclasses import replace

    from kvcal.emit.options import EmitOptions
    from kvcal.threshold import rules
    from kvcal.threshold.class_mix import mix_threshold

    _, fit = classes_run
    drawn = mix_threshold(fit, EmitOptions()).threshold
    monkeypatch.setattr(rules, "TABLE", (replace(rules.TABLE[0], mix_on_point_curves=True), *rules.TABLE[1:]))
    curves = mix_threshold(fit, EmitOptions()).threshold
    assert drawn.decision is not None and "expected costs over each class's draws" in drawn.steps[0]
    assert curves.decision is None and "the classes' fitted curves, against choosing per length" in curves.steps[0]


def test_the_rule_is_resolved_once_per_emit(classes_run, monkeypatch):
    """--rule and --margin are checked when the settings are built; the threshold (and each class's own) reads that."""
    from kvcal.emit.formats import emit
    from kvcal.emit.options import EmitOptions
    from kvcal.threshold import rules

    calls = []
    real = rules.resolve_rule
    monkeypatch.setattr(rules, "resolve_rule", lambda name, margin: calls.append(name) or real(name, margin))
    _, fit = classes_run
    for options in ({"format": "json"}, {"format": "json", "rule": "upper", "margin": 0.5}):
        calls.clear()
        result = emit(fit, EmitOptions(**options))
        assert result.threshold is not None and len(json.loads(result.stdout)["classes"]) == 2
        own = [name for name in calls if name == options.get("rule", rules.DEFAULT_RULE)]
        assert own == [options.get("rule", rules.DEFAULT_RULE)], calls  # others: the alternatives' default margins
