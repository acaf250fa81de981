"""kvcal compare: the regression rule, status changes, bad input, deployed threshold, reports."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kvcal.gate.regression import BE_CEIL_TOKENS, compare_runs, deployed_check
from kvcal.gate.compare import plot_comparison, render_markdown, run_compare
from kvcal.gate.compare_settings import CompareConfig
from kvcal.gate.loaded_runs import LoadedRun, load_run
from kvcal.emit.deployed_values import read_threshold as read_deployed_threshold
from kvcal.errors import InputError
from kvcal.records.fit import CurveFit, FitResult, FitSettings

import factories

STATUS_BE = {"crossover": 1500.0, "pull-always-wins": None, "recompute-always-wins": None}


def make_fit(
    be: float | None = 1500.0,
    *,
    spread: float = 0.05,
    status: str = "crossover",
    seed: int = 0,
    n_samples: int = 400,
    samples: bool = True,
    model: str = "tiny",
    transport: str = "nixl-pd",
    pull_us: float = 3.0,
    created_at: str = "2026-01-01T00:00:00+00:00",
) -> FitResult:
    """A fit whose break-even bootstrap is lognormal around ``be`` with relative spread ``spread``."""
    rng = np.random.default_rng(seed)
    boot: dict = {"n_resamples": n_samples, "seed": seed, "method": "synthetic"}
    ci = None
    if status == "crossover":
        draws = be * np.exp(rng.normal(0.0, spread, n_samples))
        ci = [float(np.quantile(draws, 0.025)), float(np.quantile(draws, 0.975))]
        if samples:
            boot["break_even_samples"] = [float(v) for v in draws]
            boot["no_crossover_share"] = 0.0
    elif samples:
        boot["break_even_samples"] = [None] * n_samples
        boot["no_crossover_share"] = 1.0
    recompute = CurveFit(model="quadratic", intercept_ms=5.0, per_token_us=25.0, per_token2_ns=0.012,
                         ci={"intercept_ms": [4.5, 5.5], "per_token_us": [24.0, 26.0], "per_token2_ns": [0.010, 0.014]})
    # The pull's floor is set so that the curves really cross at ``be``.
    at = be if status == "crossover" else 1500.0
    floor_ms = 5.0 + 25.0 * at / 1e3 + 0.012 * at**2 / 1e6 - pull_us * at / 1e3
    pull = CurveFit(model="affine", intercept_ms=floor_ms, per_token_us=pull_us, per_token2_ns=0.0,
                    ci={"intercept_ms": [floor_ms * 0.95, floor_ms * 1.05], "per_token_us": [pull_us * 0.95, pull_us * 1.05]})
    return factories.make_fit(
        status=status, break_even_tokens=be if status == "crossover" else None, break_even_ci=ci,
        measured_range=[256, 8192], recompute=recompute, pull=pull,
        n_probes=60, pull_bandwidth_gbps=0.7 if pull_us == 3.0 else 0.7 * 3.0 / pull_us, bootstrap=boot,
        setup={"model": model, "transport": transport}, created_at=created_at,
    )


def run_of(fit: FitResult, name: str = "run") -> LoadedRun:
    return LoadedRun(path=Path(f"/nowhere/{name}/fit.json"), fit=fit, label=name)


def write_fit(folder: Path, fit: FitResult) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "fit.json"
    path.write_text(fit.model_dump_json(by_alias=True, indent=2))
    return path


# ---------------------------------------------------------------- the regression rule


@pytest.mark.parametrize("seed", range(5))
def test_same_break_even_is_not_a_regression(seed):
    base, cur = make_fit(1500, seed=seed), make_fit(1500 * 1.02, seed=seed + 100)
    result = compare_runs(run_of(base), run_of(cur), seed=seed)
    assert not result.regression
    assert result.direction == "none"
    assert result.rows[0].significant is False


@pytest.mark.parametrize("factor, direction", [(1.5, "up"), (0.6, "down")])
def test_significant_move_beyond_tolerance_is_a_regression_either_way(factor, direction):
    result = compare_runs(run_of(make_fit(1500)), run_of(make_fit(1500 * factor, seed=1)))
    assert result.regression
    assert result.direction == direction
    assert result.rows[0].significant is True
    assert result.rows[0].change_rel == pytest.approx(factor - 1)
    assert "REGRESSION" in result.verdict


def test_large_move_that_is_not_significant_passes():
    # Each fit is so uncertain (spread 60%) that a 30% move cannot be told from noise.
    result = compare_runs(run_of(make_fit(1500, spread=0.6)), run_of(make_fit(1950, spread=0.6, seed=3)))
    assert result.rows[0].change_rel == pytest.approx(0.3)
    assert result.rows[0].significant is False
    assert not result.regression
    assert "not significant" in result.verdict


def test_significant_move_within_tolerance_passes():
    # A tight fit makes a 5% move significant, but 5% < tolerance 10%.
    result = compare_runs(run_of(make_fit(1500, spread=0.005)), run_of(make_fit(1575, spread=0.005, seed=2)))
    assert result.rows[0].significant is True
    assert not result.regression
    assert "within tolerance" in result.verdict


def test_tolerance_is_honoured():
    base, cur = run_of(make_fit(1500)), run_of(make_fit(1800, seed=1))
    assert compare_runs(base, cur, tolerance=0.1).regression
    assert not compare_runs(base, cur, tolerance=0.5).regression


def test_without_samples_significance_comes_from_the_intervals():
    result = compare_runs(run_of(make_fit(1500, samples=False)), run_of(make_fit(3000, samples=False, seed=1)))
    assert result.regression
    assert any("approximated" in note for note in result.notes)


# ---------------------------------------------------------------- status changes


def test_pull_no_longer_winning_is_a_regression():
    result = compare_runs(run_of(make_fit(1500)), run_of(make_fit(None, status="recompute-always-wins")))
    assert result.regression and result.direction == "status"
    assert "no longer wins" in result.verdict


def test_pull_always_wins_in_both_compares_coefficients_only():
    base, cur = make_fit(None, status="pull-always-wins"), make_fit(None, status="pull-always-wins", pull_us=6.0)
    result = compare_runs(run_of(base), run_of(cur))
    assert not result.regression
    assert "no break-even" in result.verdict
    pull_slope = next(r for r in result.rows if r.quantity == "pull per_token_us")
    assert pull_slope.change_rel == pytest.approx(1.0)
    assert pull_slope.significant is True


def test_pull_now_winning_everywhere_is_a_downward_move():
    result = compare_runs(run_of(make_fit(1500)), run_of(make_fit(None, status="pull-always-wins")))
    assert result.regression and result.direction == "down"
    assert "status crossover -> pull-always-wins" in result.rows[0].note


def test_pull_starting_to_win_is_not_a_regression():
    result = compare_runs(run_of(make_fit(None, status="recompute-always-wins")), run_of(make_fit(1500)))
    assert not result.regression
    assert "consider enabling" in result.verdict


def test_resamples_where_the_pull_never_catches_up_count_at_the_ceiling():
    # A fit whose resamples partly found no break-even (null samples, as kvcal.fit writes
    # them): they count as "pull never wins", which stretches the ratio's interval upward.
    base = make_fit(6000, spread=0.02)
    samples = base.bootstrap.break_even_samples[:300] + [None] * 100
    cur = base.model_copy(update={"bootstrap": base.bootstrap.model_copy(update={"break_even_samples": samples})})
    result = compare_runs(run_of(base), run_of(cur))
    assert result.rows[0].change_ci[1] > BE_CEIL_TOKENS / 6000 / 10  # the upper quantile reaches the ceiling
    assert result.rows[0].significant is False  # ... yet 75% of it agrees with the baseline


def test_crossover_to_pull_always_wins_uses_the_extrapolated_break_even():
    cur = make_fit(1500, seed=1).model_copy(update={"status": "pull-always-wins", "break_even_tokens": 150.0})
    result = compare_runs(run_of(make_fit(1500)), run_of(cur))
    assert result.rows[0].change_rel == pytest.approx(-0.9)
    assert "extrapolated break-even 150" in result.rows[0].note


# ---------------------------------------------------------------- bad input


def test_different_models_need_force(tmp_path):
    base, cur = run_of(make_fit(1500, model="a")), run_of(make_fit(1500, model="b"))
    with pytest.raises(InputError, match="model 'a' differs from current 'b'.*--force"):
        compare_runs(base, cur)
    forced = compare_runs(base, cur, force=True)
    assert any("forced comparison across models" in note for note in forced.notes)


def test_different_transports_need_force():
    with pytest.raises(InputError, match="transport.*pull cost depends on the transport"):
        compare_runs(run_of(make_fit(transport="nixl-pd")), run_of(make_fit(transport="p2p-tier")))


def test_bad_files_exit_2_with_one_line(tmp_path, kvcal):
    good = write_fit(tmp_path / "good", make_fit())
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text('{"schema": "kvcal.fit/1", "status": "crossover"')
    wrong = tmp_path / "wrong.json"
    data = json.loads(good.read_text())
    data["break_even_tokens"] = "many"
    wrong.write_text(json.dumps(data))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"hello": 1}))
    for bad, message in ((tmp_path / "missing.json", "no such file"), (corrupt, "corrupt fit: not JSON"),
                         (wrong, "corrupt fit: break_even_tokens"), (other, "not a kvcal fit")):
        result = kvcal("compare", good, bad)
        assert result.code == 2, (bad, result.err)
        assert message in result.err
        assert result.err.count("\n") == 1 and "Traceback" not in result.err


def test_model_mismatch_exits_2_and_force_proceeds(tmp_path, kvcal):
    a = write_fit(tmp_path / "a", make_fit(model="m1"))
    b = write_fit(tmp_path / "b", make_fit(model="m2", seed=4))
    refused = kvcal("compare", a, b)
    assert refused.code == 2 and "--force" in refused.err
    assert kvcal("compare", a, b, "--force").code == 0


# ---------------------------------------------------------------- exit codes through the CLI


def test_cli_exit_codes_and_markdown(tmp_path, kvcal):
    base = write_fit(tmp_path / "base", make_fit(1500))
    same = write_fit(tmp_path / "same", make_fit(1520, seed=7))
    moved = write_fit(tmp_path / "moved", make_fit(2400, seed=8))
    ok = kvcal("compare", base, same, "--markdown", tmp_path / "ok.md")
    assert ok.code == 0, ok.err
    assert "break-even" in ok.out and "OK:" in ok.out
    assert "no regression" in (tmp_path / "ok.md").read_text()
    bad = kvcal("compare", base, moved, "--markdown", tmp_path / "bad.md", "--deployed", "1600")
    assert bad.code == 1
    assert "regression" in bad.err.lower()
    md = (tmp_path / "bad.md").read_text()
    assert "REGRESSION" in md and "| break-even (tokens) | 1500" in md and "UNSAFE" in md


def test_strict_deployed_fails_on_unsafe_threshold_only(tmp_path, kvcal):
    base = write_fit(tmp_path / "base", make_fit(1500))
    same = write_fit(tmp_path / "same", make_fit(1520, seed=7))
    assert kvcal("compare", base, same, "--deployed", "1000").code == 0
    assert kvcal("compare", base, same, "--deployed", "1000", "--strict-deployed").code == 1
    assert kvcal("compare", base, same, "--deployed", "2048", "--strict-deployed").code == 0


@pytest.mark.parametrize("flags, message", [
    (["--tolerance", "0"], "--tolerance must be a relative change"),
    (["--deployed", "0"], "must be >= 1 token"),
    (["--values", "/nonexistent/values.yaml"], "no such values file"),
])
def test_bad_flags_exit_2(tmp_path, kvcal, flags, message):
    base = write_fit(tmp_path / "base", make_fit())
    result = kvcal("compare", base, base, *flags)
    assert result.code == 2 and message in result.err


def test_deployed_and_values_are_exclusive(tmp_path, kvcal):
    base = write_fit(tmp_path / "base", make_fit())
    values = tmp_path / "v.yaml"
    values.write_text("x: 1\n")
    result = kvcal("compare", base, base, "--deployed", "64", "--values", values)
    assert result.code == 2 and "not both" in result.err


# ---------------------------------------------------------------- deployed threshold


@pytest.mark.parametrize("threshold, verdict", [(2048, "safe"), (1500, "uncertain"), (1024, "unsafe")])
def test_deployed_threshold_placement(threshold, verdict):
    check = deployed_check(make_fit(1500), make_fit(1500), threshold, "--deployed")
    assert check.verdict == verdict
    if verdict == "unsafe":
        assert check.pull_minus_recompute_ms > 0  # a pull at the threshold really costs more
        assert "raise it to >= 1664" in check.message  # next block multiple above the interval


def test_deployed_threshold_after_break_even_rose():
    check = deployed_check(make_fit(1000), make_fit(3000), 2048, "values.yaml")
    assert check.verdict == "unsafe" and check.baseline_verdict == "safe"
    assert "it was safe against the baseline" in check.message


def test_deployed_threshold_when_pull_never_wins():
    check = deployed_check(make_fit(1500), make_fit(None, status="recompute-always-wins"), 4096, "--deployed")
    assert check.verdict == "unsafe" and "disable P2P" in check.message


VALUES = """\
# keep this comment
router:
  epp:
    pluginsConfigFile: "p2p-kv-cache-sharing-plugins.yaml"
    pluginsCustomConfig:
      p2p-kv-cache-sharing-plugins.yaml: |
        apiVersion: llm-d.ai/v1alpha1
        kind: EndpointPickerConfig
        plugins:
          - type: precise-prefix-cache-producer
            parameters:
              tokenProcessorConfig: {blockSize: 64}
          - type: p2p-source-producer
            parameters:
              prefixMatchInfoProducerName: precise-prefix-cache-producer
              prefillProfileName: default
              minCachedTokenDelta: 2048
"""


def test_values_file_threshold_is_read_from_the_embedded_config(tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text(VALUES)
    assert read_deployed_threshold(values) == 2048
    nested = tmp_path / "old.yaml"
    nested.write_text("inferenceExtension:\n  plugins:\n    - type: p2p-source-producer\n      parameters: {}\n")
    assert read_deployed_threshold(nested) == 1  # the plugin's default


@pytest.mark.parametrize("text, message", [
    ("router: {}\n", "no 'p2p-source-producer' plugin"),
    ("a: [1, 2\n", "not valid YAML"),
    ("plugins:\n  - type: p2p-source-producer\n    parameters: {minCachedTokenDelta: -3}\n", "integer >= 1"),
])
def test_values_file_errors(tmp_path, text, message):
    values = tmp_path / "values.yaml"
    values.write_text(text)
    with pytest.raises(InputError, match=message):
        read_deployed_threshold(values)


def test_values_flag_end_to_end(tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text(VALUES)
    base = write_fit(tmp_path / "base", make_fit(1500))
    cur = write_fit(tmp_path / "cur", make_fit(2500, seed=5))
    result = run_compare(CompareConfig(baseline=base, current=cur, values_file=values))
    assert result.deployed is not None and result.deployed.threshold_tokens == 2048
    assert result.deployed.verdict == "unsafe" and result.regression


# ---------------------------------------------------------------- loading and reports


def test_load_run_labels_and_markdown_links_plot(tmp_path):
    path = write_fit(tmp_path / "nightly-7", make_fit())
    run = load_run(path)
    assert run.label == "nightly-7" and run.probes is None
    result = compare_runs(run, run)
    text = render_markdown(result, tmp_path / "out" / "cmp.png", tmp_path / "out" / "summary.md")
    assert "![baseline vs current](cmp.png)" in text
    assert text.count("\n|") >= 1 + 1 + 7  # header, rule, break-even + 6 coefficients + bandwidth


# ---------------------------------------------------------------- end to end: simulated campaigns, real fits

LENGTHS = [256, 512, 1024, 2048, 4096, 8192]
TRUTH = dict(pull_intercept_ms=40.0)  # true break-even about 1590 tokens


def campaign(folder: Path, seed: int, **truth) -> Path:
    """A simulated campaign laid out like a committed baseline: probes.csv and its fit.json side by side."""
    from kvcal.engines.sim import SimCosts, SimPair
    from kvcal.fit import fit_input, write_fit
    from kvcal.records.run import Leg

    pair = SimPair(SimCosts(**{**TRUTH, **truth}), seed=seed)
    lines = ["prefix_tokens,leg,ttft_ms,rep,bytes_moved"]
    for rep in range(3):
        for n in LENGTHS:
            for leg in (Leg.RECOMPUTE, Leg.PULL):
                m = pair.measure(leg, [1] * n)
                lines.append(f"{n},{leg.value},{m.ttft_ms:.4f},{rep},{m.bytes_moved}")
    folder.mkdir(parents=True)
    (folder / "probes.csv").write_text("\n".join(lines) + "\n")
    return write_fit(fit_input(folder / "probes.csv", settings=FitSettings(seed=seed, n_resamples=500)), folder / "fit.json")


@pytest.mark.parametrize("seed", range(1, 6))
def test_same_truth_campaigns_pass_across_seeds(tmp_path, kvcal, seed):
    base = campaign(tmp_path / "base", seed=0)
    cur = campaign(tmp_path / "cur", seed=seed)
    result = kvcal("compare", base, cur)
    assert result.code == 0, result.out + result.err
    assert "OK: break-even moved" in result.out


@pytest.mark.parametrize("seed, truth, direction", [
    (1, dict(pull_intercept_ms=60.0), "lose latency"),  # a slower pull floor: break-even up ~57%
    (2, dict(pull_intercept_ms=60.0), "lose latency"),
    (3, dict(pull_intercept_ms=28.0), "refuses pulls that would win"),  # a faster floor: down ~35%
])
def test_shifted_truth_campaigns_regress(tmp_path, kvcal, seed, truth, direction):
    base = campaign(tmp_path / "base", seed=0)
    cur = campaign(tmp_path / "cur", seed=seed, **truth)
    result = kvcal("compare", base, cur, "--markdown", tmp_path / "summary.md")
    assert result.code == 1, result.out + result.err
    assert direction in result.err
    assert "significant" in (tmp_path / "summary.md").read_text()


def test_probe_tables_are_fitted_on_the_fly(tmp_path, kvcal):
    base = campaign(tmp_path / "base", seed=0)
    cur = campaign(tmp_path / "cur", seed=1, pull_intercept_ms=60.0)
    result = kvcal("compare", base.parent / "probes.csv", cur.parent / "probes.csv")
    assert result.code == 1
    found = load_run(base)
    assert found.probes is not None and len(found.probes.probes) == 2 * 3 * len(LENGTHS)  # probes.csv beside fit.json


def test_real_fits_carry_samples_for_every_quantity(tmp_path):
    fit = load_run(campaign(tmp_path / "base", seed=0)).fit
    result = compare_runs(run_of(fit), run_of(fit))
    assert not result.notes  # no approximation was needed
    assert all(row.significant is False for row in result.rows[:7] if row.change_ci is not None)


# ---------------------------------------------------------------- shipped files

ROOT = Path(__file__).resolve().parents[3]


def test_example_workflow_calls_real_commands_and_flags():
    """Every `kvcal CMD --flag` in docs/examples/kvcal-ci.yml exists, so the recipe cannot rot silently."""
    import re

    import typer
    from ruamel.yaml import YAML

    from kvcal.cli.app import app

    workflow = YAML(typ="safe", pure=True).load((ROOT / "docs/examples/kvcal-ci.yml").read_text())
    commands = typer.main.get_command(app).commands
    runs = [step["run"] for step in workflow["jobs"]["calibrate"]["steps"] if "kvcal " in step.get("run", "")]
    calls = ["kvcal " + part for run in runs for part in run.split("kvcal ")[1:]]  # each invocation, to the next
    assert [re.match(r"kvcal (\w+)", call).group(1) for call in calls] == [
        "sweep", "fit", "compare", "history", "report", "report"]
    for call in calls:
        name = re.search(r"kvcal (\w+)", call).group(1)
        assert name in commands, f"the workflow runs `kvcal {name}`, which does not exist"
        known = {opt for param in commands[name].params for opt in param.opts}
        for flag in re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", call.split(f"kvcal {name}", 1)[1]):
            assert flag in known, f"`kvcal {name}` has no {flag}"


BASELINES = sorted((ROOT / "results" / "baselines").glob("*/fit.json"))


@pytest.mark.parametrize("baseline", BASELINES, ids=[p.parent.name for p in BASELINES])
def test_committed_baselines_load_and_self_compare(baseline, kvcal):
    run = load_run(baseline.parent)
    assert run.fit.bootstrap.break_even_samples, "a baseline must keep its bootstrap samples"
    assert kvcal("compare", baseline.parent, baseline.parent).code == 0


# ---------------------------------------------------------------- plots


def test_overlay_plot_draws_both_runs_and_the_deployed_threshold(tmp_path, kvcal):
    from matplotlib.image import imread


    base = campaign(tmp_path / "base", seed=0)
    cur = campaign(tmp_path / "cur", seed=1, pull_intercept_ms=60.0)
    result = compare_runs(load_run(base), load_run(cur), deployed=(2048, "--deployed"))
    ax = plot_comparison(result).axes[0]
    # Per run: 2 fitted curves + 2 probe series + 1 break-even line; plus the deployed line.
    assert len(ax.lines) == 2 * 5 + 1
    assert len(ax.collections) == 2 * 2  # a bootstrap band per leg per run
    assert len(ax.patches) == 2  # each run's break-even interval
    colours = {line.get_color() for line in ax.lines}
    assert {"tab:blue", "tab:red", "black"} <= colours
    out = tmp_path / "cmp.png"
    assert kvcal("compare", base, cur, "--plot", out, "--deployed", "2048").code == 1
    assert imread(out).shape[:2] == (600, 1000)


def test_overlay_plot_without_probes_or_coefficient_samples(tmp_path):

    result = compare_runs(run_of(make_fit(1500)), run_of(make_fit(None, status="recompute-always-wins")))
    ax = plot_comparison(result).axes[0]
    assert len(ax.lines) == 2 + 1 + 2  # baseline curves + its break-even; current curves (no break-even)
    assert len(ax.collections) == 0


def test_unwritable_plot_is_bad_input(tmp_path, kvcal):
    base = write_fit(tmp_path / "base", make_fit())
    result = kvcal("compare", base, base, "--plot", tmp_path / "cmp.nosuchformat")
    assert result.code == 2 and "cannot write plot" in result.err
