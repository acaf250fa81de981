"""--format helm on router values that route on remaining work (llm-d's remaining-work guide, router PR 2559)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest
import yaml

from kvcal.emit import formats as em
from kvcal.emit.affinity import peak_prefill
from kvcal.emit.run_context import run_context
from kvcal.fit.inputs import load_fit_input
from kvcal.fit_record import FitResult
from kvcal.records import RunSetup

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
GUIDE = FIXTURES / "upstream" / "remaining-work-values.yaml"
MULTI = FIXTURES / "values" / "multi-config.yaml"
CONFIG = "remaining-work-plugins.yaml"


@lru_cache
def glm_fit() -> FitResult:
    return load_fit_input(FIXTURES / "llmd" / "glm-5.2-h200-upstream-tier.log",
                          supplied=RunSetup(block_size=64)).fitted()


def helm(values: Path, **options) -> em.EmitResult:
    return em.emit(glm_fit(), em.EmitOptions(format="helm", values=values, **options))


def changed(old: str, new: str) -> list[tuple[int, str, str]]:
    """(line number, old, new) of every line that differs; the files must have as many lines."""
    a, b = old.split("\n"), new.split("\n")
    assert len(a) == len(b)
    return [(i + 1, x, y) for i, (x, y) in enumerate(zip(a, b)) if x != y]


def config_of(text: str) -> dict:
    return yaml.safe_load(yaml.safe_load(text)["router"]["epp"]["pluginsCustomConfig"][CONFIG])


def params(config: dict, plugin_type: str) -> dict:
    (entry,) = [p for p in config["plugins"] if p["type"] == plugin_type]
    return entry["parameters"]


def edited(tmp_path: Path, text: str, *pairs: tuple[str, str]) -> Path:
    for old, new in pairs:
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "values.yaml"
    path.write_text(text)
    return path


def test_the_guides_values_keep_d_at_1_and_change_only_the_throughput_line() -> None:
    old = GUIDE.read_text()
    res = helm(GUIDE, max_model_len=120_000)
    peak = peak_prefill(glm_fit(), run_context(glm_fit())).tokens_per_s
    assert changed(old, res.stdout) == [
        (36, "              peakPrefillThroughput: 3585   # tokens/s of one rank on one long prefill",
         f"              peakPrefillThroughput: {peak}   # tokens/s of one rank on one long prefill")]
    assert params(config_of(res.stdout), "p2p-source-producer")["minCachedTokenDelta"] == 1
    b = res.threshold.min_cached_token_delta  # B = T here: the SLO work of 3,500 ms lies far above it
    labels = [n for n in res.notes if "prefill pods" in n]
    assert len(labels) == 1 and f'"0-{b}"' in labels[0] and f'"{b + 1}-120000"' in labels[0]
    assert '"0-120000"' in labels[0] and "maxTTFTPenaltyMs 3500" in labels[0]
    assert not [w for w in res.warnings if "line" in w]


def test_the_budget_flag_sets_max_ttft_penalty_and_the_labels_follow_it() -> None:
    old = GUIDE.read_text()
    res = helm(GUIDE, ttft_penalty_ms=3000.0, max_model_len=120_000)
    lines = changed(old, res.stdout)
    assert [n for n, _, _ in lines] == [36, 37]
    assert lines[1][2] == "              maxTTFTPenaltyMs: 3000   # the measured migration cost, an operator's input"
    assert any("prefill pods" in n and "--ttft-penalty-ms 3000" in n for n in res.notes)


def test_a_d_other_than_1_is_reset_with_a_warning_naming_its_line_and_old_value(tmp_path) -> None:
    old = GUIDE.read_text()
    values = edited(tmp_path, old, ("minCachedTokenDelta: 1   #", "minCachedTokenDelta: 2048   #"))
    res = helm(values, max_model_len=120_000)
    assert [n for n, _, _ in changed(values.read_text(), res.stdout)] == [27, 36]
    assert params(config_of(res.stdout), "p2p-source-producer")["minCachedTokenDelta"] == 1
    (warning,) = [w for w in res.warnings if "reset" in w]
    assert f"{values} line 27: minCachedTokenDelta 2048 reset to 1" in warning


@pytest.mark.parametrize("old, new, says", [
    ("              prefixMatchInfoProducerName: precise-cache   # never omitted: omitting it wires the approximate "
     "producer\n", "", "line 22: p2p-source-producer has no prefixMatchInfoProducerName"),
    ("prefixMatchInfoProducerName: precise-cache   #", "prefixMatchInfoProducerName: precise   #",
     "line 25: prefixMatchInfoProducerName 'precise' names no plugin"),
    ("affinityThreshold: 0.35", "affinityThreshold: 0.396", "line 35: affinityThreshold 0.396 is at or above"),
    ("{name: cpu, weight: 0.4}", "{name: cpu, weight: 0.9}", None),  # 0.35 < 0.9 x 0.99: fine
])
def test_what_defeats_remaining_work_routing_is_a_warning_naming_the_line(tmp_path, old, new, says) -> None:
    values = edited(tmp_path, GUIDE.read_text(), (old, new))
    res = helm(values, max_model_len=120_000)
    found = [w for w in res.warnings if f"{values} line" in w]
    assert [says in w for w in found] == ([True] if says else [])


def test_without_a_cpu_weight_llm_ds_default_0_8_sets_the_bar(tmp_path) -> None:
    text = GUIDE.read_text()
    start = text.index("              indexerConfig:")
    end = text.index("          - type: p2p-source-producer")
    values = edited(tmp_path, text[:start] + text[end:], ("affinityThreshold: 0.35", "affinityThreshold: 0.8"))
    (warning,) = [w for w in helm(values, max_model_len=120_000).warnings if "affinityThreshold" in w]
    assert "llm-d's default CPU-tier weight 0.8 x 0.99 = 0.792" in warning


def test_missing_budget_or_max_are_warnings_naming_the_flag(tmp_path) -> None:
    values = edited(tmp_path, GUIDE.read_text(),
                    ("              maxTTFTPenaltyMs: 3500   # the measured migration cost, an operator's input\n", ""))
    res = helm(values)
    assert any("sets no maxTTFTPenaltyMs: pass --ttft-penalty-ms" in w for w in res.warnings)
    assert not any("prefill pods" in n for n in res.notes)
    res = helm(GUIDE)
    assert any("pass --max-model-len" in w for w in res.warnings)
    res = helm(GUIDE, ttft_penalty_ms=1000.0, max_model_len=120_000)
    assert any("band is empty" in w and "do not split" in w for w in res.warnings)


def test_a_bare_endpoint_picker_config_is_patched_the_same_way(tmp_path) -> None:
    inner = yaml.safe_load(GUIDE.read_text())["router"]["epp"]["pluginsCustomConfig"][CONFIG]
    bare = tmp_path / "epp.yaml"
    bare.write_text(inner.replace("minCachedTokenDelta: 1   #", "minCachedTokenDelta: 512   #"))
    res = helm(bare, ttft_penalty_ms=3500.0, max_model_len=120_000)
    lines = changed(bare.read_text(), res.stdout)
    assert [n for n, _, _ in lines] == [17, 26]
    config = yaml.safe_load(res.stdout)
    assert params(config, "p2p-source-producer")["minCachedTokenDelta"] == 1
    assert any(f"{bare} line 17: minCachedTokenDelta 512 reset to 1" in w for w in res.warnings)
    assert any("prefill pods" in n for n in res.notes)
    assert any("--allow-experimental-plugins" in n for n in res.notes)  # no chart here to carry the flag


def test_a_bare_config_with_crlf_keeps_its_line_endings(tmp_path) -> None:
    inner = yaml.safe_load(GUIDE.read_text())["router"]["epp"]["pluginsCustomConfig"][CONFIG]
    bare = tmp_path / "epp.yaml"
    bare.write_bytes(inner.replace("\n", "\r\n").encode())
    out = helm(bare, max_model_len=120_000).stdout
    assert out.count("\r\n") == inner.count("\n") and "\n" not in out.replace("\r\n", "")


def test_each_config_gets_its_own_value_and_the_budget_only_where_it_routes_on_remaining_work(tmp_path) -> None:
    """multi-config.yaml with its staging config routing on remaining work: that one gets 1, the active one T."""
    values = edited(tmp_path, MULTI.read_text(), (
        "              minCachedTokenDelta: 8192\n",
        "              minCachedTokenDelta: 8192\n          - type: context-length-aware\n            parameters:\n"
        "              reusableTokensProducerName: p2p-cache-source\n"))
    res = helm(values, ttft_penalty_ms=3500.0)
    custom = yaml.safe_load(res.stdout)["router"]["epp"]["pluginsCustomConfig"]
    t = res.threshold.min_cached_token_delta
    assert params(yaml.safe_load(custom["p2p.yaml"]), "p2p-source-producer")["minCachedTokenDelta"] == t != 1
    assert params(yaml.safe_load(custom["p2p-staging.yaml"]), "p2p-source-producer")["minCachedTokenDelta"] == 1
    line = values.read_text().split("\n").index("              minCachedTokenDelta: 8192") + 1
    assert any(f"{values} line {line}: minCachedTokenDelta 8192 reset to 1" in w for w in res.warnings)


def test_the_budget_flag_on_values_without_remaining_work_is_reported_unused() -> None:
    res = helm(MULTI, ttft_penalty_ms=3500.0, max_model_len=120_000)
    assert any("--ttft-penalty-ms and --max-model-len unused" in w for w in res.warnings)
    assert not any("prefill pods" in n for n in res.notes)
