"""--format work-range and --format json's work_range: the prefill work-range boundary of remaining-work routing."""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
import yaml

from factories import make_fit, sim_table
from kvcal.costs.cost_curve import cost_ms
from kvcal.emit import formats as em
from kvcal.threshold.decision import draw_thresholds
from kvcal.emit.router import PluginNames
from kvcal.emit.work_range import Labels, WorkRange, render_work_range, slo_work, work_range, work_range_entries
from kvcal.engines.sim import SimCosts
from kvcal.errors import InputError, NotRecommended
from kvcal.fit import fit_table
from kvcal.fit.inputs import load_fit_input
from kvcal.fit.mean_cost import mean_curves
from kvcal.records.fit import FitResult, FitSettings
from kvcal.records.run import RunSetup

GLM = Path(__file__).resolve().parents[2] / "fixtures" / "llmd" / "glm-5.2-h200-upstream-tier.log"
LLMD_BAND = (8_640, 12_288)  # llm-d's calibrator's B and its recommended threshold on that table


@lru_cache
def glm_fit() -> FitResult:
    return load_fit_input(GLM, supplied=RunSetup(block_size=64)).fitted()


@lru_cache
def sim_fit(resamples: int = 300) -> FitResult:
    table = sim_table(SimCosts(), [256, 512, 1024, 2048, 4096, 8192], 3, seed=1)
    return fit_table(table, settings=FitSettings(n_resamples=resamples))


def emit(fit: FitResult, **options) -> em.EmitResult:
    return em.emit(fit, em.EmitOptions(**options))


# ------------------------------------------------------------------ the done-when, on llm-d's own table


def test_on_llm_ds_glm_table_the_threshold_and_b_lie_between_llm_ds_two_answers(kvcal, tmp_path) -> None:
    """The upstream-tier GLM-5.2 H200 ladder, --ttft-penalty-ms 3500 --max-model-len 120000: T and B in
    [8,640 (llm-d's calibrator), 12,288 (llm-d's recommendation)], the labels and entries as the contract says."""
    assert kvcal("fit", GLM, "--block-size", "64", "-o", tmp_path / "fit.json").code == 0
    flags = ("--ttft-penalty-ms", "3500", "--max-model-len", "120000")
    as_json = kvcal("emit-config", tmp_path / "fit.json", "--format", "json", *flags)
    data = json.loads(as_json.out)
    done = kvcal("emit-config", tmp_path / "fit.json", "--format", "work-range", *flags)
    assert done.code == 0, done.err
    out = yaml.safe_load(done.out)
    b = data["work_range"]["boundary"]
    assert LLMD_BAND[0] <= data["minCachedTokenDelta"] <= LLMD_BAND[1]
    assert LLMD_BAND[0] <= b <= LLMD_BAND[1]
    assert out["labels"] == {"short": f"0-{b}", "long": f"{b + 1}-120000", "context_length_range": "0-120000"}
    assert [(e["type"], e.get("name")) for e in out["plugins"]] == [
        ("precise-prefix-cache-producer", "precise-cache"), ("p2p-source-producer", "p2p-cache-source"),
        ("context-length-aware", None), ("prefix-cache-affinity-filter", None)]
    p2p, clw, affinity = (e["parameters"] for e in out["plugins"][1:])
    assert p2p == {"prefixMatchInfoProducerName": "precise-cache", "prefillProfileName": "prefill",
                   "minCachedTokenDelta": 1}
    assert clw == {"label": "llm-d.ai/prefill-work-range", "enableFiltering": False,
                   "reusableTokensProducerName": "p2p-cache-source"}
    assert affinity == {"peakPrefillThroughput": data["peakPrefillThroughput"], "maxTTFTPenaltyMs": 3500}
    first = done.out.splitlines()[0]
    assert first.startswith("# kvcal: ") and f"B {b:,}" in first and "SLO work" in first and "cross" in first
    wr = data["work_range"]
    assert set(wr) == {"boundary", "boundary_ci", "crossover_tokens", "slo_work_tokens", "max_model_len"}
    assert wr["max_model_len"] == 120000 and wr["boundary_ci"][0] <= b <= wr["boundary_ci"][1]
    assert "allow-experimental-plugins" in done.err  # the alpha-plugin note, as for every router format
    assert "beyond the longest measured length" in done.err  # SLO work past 24,576 rests on the curve


# ------------------------------------------------------------------ the pieces


def test_slo_work_is_the_longest_block_multiple_within_the_budget_and_past_the_ladder_it_warns() -> None:
    fit = glm_fit()
    rec, _ = mean_curves(fit)
    for budget in (1500.0, 3000.0, 3500.0):
        n, warnings = slo_work(fit, rec, budget, 64)
        assert n % 64 == 0 and cost_ms(rec, n) <= budget < cost_ms(rec, n + 64)
        assert bool(warnings) == (n > 24_576)
    assert slo_work(fit, rec, 100.0, 64)[0] == 0  # one block already costs more


def test_b_is_the_threshold_capped_by_the_slo_work_and_its_interval_is_capped_too() -> None:
    fit = glm_fit()
    t = em.compute_threshold(fit)
    roomy = work_range(fit, t, 3500.0, 120_000)
    assert roomy.boundary == t.min_cached_token_delta < roomy.slo_work_tokens
    draws = draw_thresholds(fit, block_size=64)
    tail = (1 - fit.confidence) / 2
    assert roomy.boundary_ci == tuple(int(np.quantile(draws, q, method="inverted_cdf")) for q in (tail, 1 - tail))
    tight = work_range(fit, t, 1100.0, 120_000)  # SLO work below the threshold: an empty band
    assert tight.boundary is None and tight.slo_work_tokens < t.min_cached_token_delta
    assert all(end <= tight.slo_work_tokens for end in tight.boundary_ci)
    with pytest.raises(NotRecommended, match="do not split the prefill pool"):
        tight.labels()


def test_b_follows_whatever_rule_decides_the_threshold() -> None:
    fit = glm_fit()
    for rule in ("expected-cost", "upper"):
        t = em.compute_threshold(fit, rule=rule)
        out = json.loads(emit(fit, format="json", rule=rule, ttft_penalty_ms=3500.0).stdout)
        assert out["work_range"]["boundary"] == t.min_cached_token_delta == out["minCachedTokenDelta"]


def test_no_bootstrap_draws_no_interval() -> None:
    fit = sim_fit(0)
    wr = work_range(fit, em.compute_threshold(fit), 1e6, 65_536)
    assert wr.boundary_ci is None and "no interval" in wr.comment()


def test_json_on_an_empty_band_exits_0_with_a_null_boundary_and_says_why() -> None:
    res = emit(glm_fit(), format="json", ttft_penalty_ms=1000.0, max_model_len=120_000)
    wr = json.loads(res.stdout)["work_range"]
    assert wr["boundary"] is None and wr["slo_work_tokens"] < json.loads(res.stdout)["minCachedTokenDelta"]
    assert any("band is empty" in w and "do not split" in w for w in res.warnings)


def test_json_without_the_budget_is_unchanged() -> None:
    assert "work_range" not in json.loads(emit(glm_fit(), format="json").stdout)


def test_max_from_the_flag_else_the_run_else_exit_2_naming_the_flag() -> None:
    recorded = glm_fit().model_copy(update={"setup": RunSetup(block_size=64, max_model_len=131_072)})
    assert yaml.safe_load(emit(recorded, format="work-range", ttft_penalty_ms=3500.0).stdout)["labels"]["long"].endswith(
        "-131072")
    out = emit(recorded, format="work-range", ttft_penalty_ms=3500.0, max_model_len=120_000).stdout
    assert yaml.safe_load(out)["labels"]["context_length_range"] == "0-120000"
    with pytest.raises(InputError, match="--max-model-len"):
        emit(glm_fit(), format="work-range", ttft_penalty_ms=3500.0)
    with pytest.raises(InputError, match="not above the boundary"):
        emit(glm_fit(), format="work-range", ttft_penalty_ms=3500.0, max_model_len=4096)


def test_the_names_follow_the_flags() -> None:
    out = yaml.safe_load(emit(glm_fit(), format="work-range", ttft_penalty_ms=3500.0, max_model_len=120_000,
                              prefix_match_producer="idx", prefill_profile="default").stdout)
    producer, p2p = out["plugins"][:2]
    assert producer["name"] == "idx" == p2p["parameters"]["prefixMatchInfoProducerName"]
    assert p2p["parameters"]["prefillProfileName"] == "default"


@pytest.mark.parametrize("kwargs, match", [
    ({"format": "work-range"}, "--format work-range needs --ttft-penalty-ms"),
    *[({"format": fmt, "ttft_penalty_ms": 3500.0}, "--ttft-penalty-ms applies only to --format helm, json and work-range")
      for fmt in ("plugin", "affinity", "costmodel", "vllm", "env")],
    ({"format": "env", "max_model_len": 131072}, "--max-model-len applies only"),
    ({"format": "work-range", "ttft_penalty_ms": 0.0}, "--ttft-penalty-ms must be a positive number"),
    ({"format": "work-range", "ttft_penalty_ms": math.nan}, "--ttft-penalty-ms"),
    ({"format": "json", "max_model_len": 0}, "--max-model-len must be a positive number of tokens"),
])
def test_bad_work_range_options_are_one_line_input_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(InputError, match=match) as err:
        em.EmitOptions(**kwargs)
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------ the renderer


def test_the_renderer_writes_the_labels_and_entries_in_the_guides_order() -> None:
    wr = WorkRange(threshold=8832, ttft_penalty_ms=3500.0, block_size=64, slo_work_tokens=26_944,
                   crossover_tokens=8785.3, boundary_ci=(7936, 9664), max_model_len=120_000, confidence=0.9)
    entries = work_range_entries(PluginNames("precise-cache", "prefill"), 7067, 3500.0)
    text = render_work_range(wr, Labels(8832, 120_000), entries, about="from x")
    assert text == (
        "# kvcal: work-range B 8,832 tokens, 90% interval [7,936, 9,664] of each draw's own threshold; mean-cost "
        "curves cross at 8,785 tokens; SLO work 26,944 tokens (recompute within 3500 ms); B = min(T 8,832, SLO work)\n"
        "# from x\n"
        "labels:\n"
        '  short: "0-8832"\n'
        '  long: "8833-120000"\n'
        '  context_length_range: "0-120000"\n'
        "plugins:\n"
        "  - type: precise-prefix-cache-producer\n"
        "    name: precise-cache\n"
        "  - type: p2p-source-producer\n"
        "    name: p2p-cache-source\n"
        "    parameters:\n"
        "      prefixMatchInfoProducerName: precise-cache\n"
        "      prefillProfileName: prefill\n"
        "      minCachedTokenDelta: 1\n"
        "  - type: context-length-aware\n"
        "    parameters:\n"
        "      label: llm-d.ai/prefill-work-range\n"
        "      enableFiltering: false\n"
        "      reusableTokensProducerName: p2p-cache-source\n"
        "  - type: prefix-cache-affinity-filter\n"
        "    parameters:\n"
        "      peakPrefillThroughput: 7067\n"
        "      maxTTFTPenaltyMs: 3500\n"
    )
    assert yaml.safe_load(text)["plugins"] == entries


def test_a_fractional_budget_is_written_as_given() -> None:
    entries = work_range_entries(PluginNames("p", "prefill"), 100, 2500.5)
    assert entries[-1]["parameters"]["maxTTFTPenaltyMs"] == 2500.5


def test_a_flat_recompute_curve_leaves_the_slo_work_unbounded() -> None:
    fit = make_fit(recompute={"model": "affine", "intercept_ms": 50.0, "per_token_us": 0.0, "per_token2_ns": 0.0})
    n, warnings = slo_work(fit, np.array([50.0, 0.0, 0.0]), 100.0, 64)
    assert n is None and "unbounded" in warnings[0]
