"""`kvcal observe --dashboard` (kvcal.observe.dashboard, kvcal.observe.promql): the Grafana model read back with the
library that wrote it, a panel for every figure observe reports, every series a panel reads one observe reads, the
reference lines; the flags it refuses. Each panel's agreement with observe on a real Prometheus is
tests/integration/test_observe_prometheus.py's."""

from __future__ import annotations

import json
import re

import pytest

import fake_costs_fleet
from kvcal.errors import InputError
from kvcal.fit.io import write_fit
from kvcal.observe import catalog, dashboard
from kvcal.observe.catalog import ALL_QUERIES, COSTS, SHARES, Figure, Ratio
from kvcal.observe.figures import with_selector
from kvcal.observe.promql import VARIABLES, queries, spellings
from kvcal.observe.result import COST_NAMES, FIGURE_NAMES
from kvcal.observe.run import ObserveConfig
from test_observe import _fleet_file

pytest.importorskip("grafana_foundation_sdk", reason="grafana-foundation-sdk needs Python 3.11")
from grafana_foundation_sdk.models import dashboard as grafana  # noqa: E402
from grafana_foundation_sdk.models import prometheus  # noqa: E402

SELECTOR = re.compile(r'([A-Za-z_:][A-Za-z0-9_:]*)\{((?:[^{}"]|"(?:[^"\\]|\\.)*")*)\}')
MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*")\s*')


def observed_series() -> dict[str, tuple[re.Pattern, set[str]]]:
    """Each role observe reads: its name as observe matches it (``vllm[:_]...``) and the matchers a panel may add
    (the query's own and the catalog's part labels)."""
    labels: dict[str, set[str]] = {}
    for figure in (*SHARES.values(), *COSTS.values()):
        for ratio in figure.ratios.values():
            for part in (*ratio.numerator, *(ratio.denominator or ())):
                labels.setdefault(part.role, set()).update(f"{k}={json.dumps(v)}" for k, v in part.labels)
    out = {}
    for role, query in ALL_QUERIES.items():
        matchers = with_selector(query, None)[1:-1]
        pattern = re.fullmatch(r'__name__=~"([^"]+)"(?:,(.*))?', matchers)
        assert pattern is not None
        own = {m.strip() for m in (pattern.group(2) or "").split(",") if m.strip()}
        out[role] = (re.compile(pattern.group(1)), own | labels.get(role, set()))
    return out


def selectors_read(expr: str) -> list[tuple[str, set[str]]]:
    """Every series selector in a PromQL expression: its metric name and its matchers, ``$selector`` aside."""
    found = []
    for name, inner in SELECTOR.findall(expr):
        rest = inner.replace("$selector", "")
        matchers = {f"{k}{op}{v}" for k, op, v in MATCHER.findall(rest)}
        assert MATCHER.sub("", rest).strip(", ") == "", f"unparsed matchers in {inner!r}"
        found.append((name, matchers))
    bare = re.findall(r"\bvllm[:_][A-Za-z0-9_:]*\b(?!\{)", SELECTOR.sub("", expr))
    assert not bare, f"series read without a selector: {bare}"
    return found


def _written(tmp_path, **config) -> tuple[dict, grafana.Dashboard]:
    out = tmp_path / "dashboard.json"
    dashboard.write_dashboard(ObserveConfig(prometheus=None, **config), out)
    text = out.read_text()
    return json.loads(text), dashboard.load(text)


def test_the_model_loads_back_with_a_panel_per_figure_each_reading_only_series_observe_reads(tmp_path):
    doc, model = _written(tmp_path)
    assert [p.title for p in model.panels] == [*FIGURE_NAMES, *COST_NAMES]
    reads = observed_series()
    for panel, raw in zip(model.panels, doc["panels"]):
        assert isinstance(panel, grafana.Panel) and panel.type_val == "timeseries"
        assert panel.datasource.uid == "${datasource}"
        assert [t.ref_id for t in panel.targets] == ["A", "B"]  # per pod, fleet-wide
        for target, raw_target in zip(panel.targets, raw["targets"]):
            assert isinstance(target, prometheus.Dataquery) and target.expr == raw_target["expr"]
            # Grafana's variables, and label_replace's "$1" (Grafana leaves a name it does not know as it is)
            assert set(re.findall(r"\$\w+", target.expr)) <= {*VARIABLES, "$1"}
            for name, matchers in selectors_read(target.expr):
                roles = [r for r, (pattern, allowed) in reads.items() if pattern.fullmatch(name) and matchers <= allowed]
                assert roles, f"{panel.title}: {name}{{{matchers}}} is no series observe reads"
    names = {name for p in doc["panels"] for t in p["targets"] for name, _ in selectors_read(t["expr"])}
    assert {n for n in names if n.startswith("vllm:")} and {n for n in names if n.startswith("vllm_")}
    variables = {v.name: v for v in model.templating.list_val}
    assert variables["datasource"].type_val == "datasource" and variables["datasource"].query == "prometheus"
    assert variables["selector"].query == "" and variables["tp"].query == "1"
    assert doc["title"] and doc["uid"] == "kvcal-observe"


def test_both_spellings_of_each_name_are_read_as_observe_matches_them():
    assert spellings("vllm:prompt_tokens_total") == ("vllm:prompt_tokens_total{$selector}",
                                                      "vllm_prompt_tokens_total{$selector}")
    assert spellings('vllm:x_total{tier=~"[0-9]+:p2p"}', (("source", "p2p"),))[1] == \
        'vllm_x_total{tier=~"[0-9]+:p2p",source="p2p",$selector}'
    per_pod = queries(SHARES["requests_per_s"]).per_pod
    assert "rate(vllm:request_success_total{$selector}[$__rate_interval]) or " \
           "rate(vllm_request_success_total{$selector}[$__rate_interval])" in per_pod
    assert '"kvcal_pod", "$1", "pod", "(.+)"' in per_pod  # the pod label, else the instance, as observe names pods


def test_the_selector_the_fits_tp_and_what_observe_checks_against_are_in_the_dashboard(tmp_path):
    fit = fake_costs_fleet.calibration_fit()
    fit_path = write_fit(fit, tmp_path / "fit.json")
    fleet = _fleet_file(tmp_path, ttft=(80.0, 120.0), share=(0.08, 0.12), queue=(3.0, 5.0))
    doc, model = _written(tmp_path, selector='namespace="llm-d"', fit_path=fit_path, fleet_path=fleet, deployed=1000)
    variables = {v.name: v for v in model.templating.list_val}
    assert variables["selector"].query == 'namespace="llm-d"' and variables["tp"].query == "2"
    assert doc["uid"].startswith("kvcal-observe-") and "1000" in doc["description"]
    lines = {p["title"]: [s["value"] for s in p["fieldConfig"]["defaults"].get("thresholds", {}).get("steps", [])
                          if s["value"] is not None] for p in doc["panels"]}
    assert lines["bytes_per_pulled_token"] == [fit.setup.kv_bytes_per_token]
    assert lines["pull_ms_per_token"] == [fit.engine_side.pull_ms_per_token.value]
    assert lines["prefill_ms_per_token"] == [fit.engine_side.prefill_ms_per_token.value]
    assert lines["pull_failure_rate"] == [0.01]
    # the fleet row of the deployed 1000 (64-token blocks: the row of 1024), its intervals
    assert lines["ttft_p50_ms"] == [80.0, 120.0] and lines["pull_share"] == [0.08, 0.12]
    assert lines["queue_p90"] == [3.0, 5.0] and lines["requests_per_s"] == []
    styled = [p for p in doc["panels"] if lines[p["title"]]]
    assert all(p["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] == "dashed" for p in styled)
    assert model.panels[0].field_config.defaults.thresholds is not None  # read back typed


def test_a_figure_added_to_the_catalog_is_a_panel_without_another_edit(tmp_path, monkeypatch):
    part = catalog.Part("by_source", (("source", "local_cache_hit"),))
    monkeypatch.setitem(SHARES, "cache_hit_share_again", Figure({"any": Ratio((part,), catalog.PROMPT, unit="share")}))
    doc, _ = _written(tmp_path)
    added = [p for p in doc["panels"] if p["title"] == "cache_hit_share_again"]
    assert len(doc["panels"]) == len(FIGURE_NAMES) + len(COST_NAMES) + 1 and len(added) == 1
    assert 'source="local_cache_hit"' in added[0]["targets"][0]["expr"]
    assert added[0]["fieldConfig"]["defaults"]["unit"] == "percentunit"


def test_every_unit_the_catalog_states_has_grafanas(tmp_path):
    units = {f.unit for f in catalog.QUANTILE_FIGURES.values()}
    units |= {next(iter(f.ratios.values())).unit for f in (*SHARES.values(), *COSTS.values())}
    assert units <= set(dashboard.UNITS)


@pytest.mark.parametrize("config, words", [
    (dict(since="15m"), "--since needs --prometheus"),
    (dict(propose=True), "--propose needs --prometheus"),
    (dict(deployed=100, values_path="values.yaml"), "--deployed or --values"),
    (dict(selector="not a matcher"), "--selector"),
    (dict(fleet_path="fleet.json"), "--fleet needs the deployed threshold"),
])
def test_bad_combinations_are_input_errors_before_anything_is_written(tmp_path, config, words):
    out = tmp_path / "dashboard.json"
    with pytest.raises(InputError, match=re.escape(words)):
        dashboard.write_dashboard(ObserveConfig(prometheus=None, **config), out)
    assert not out.exists()


def test_json_only_with_a_server_and_one_document_on_stdout(kvcal, tmp_path):
    done = kvcal("observe", "--dashboard", tmp_path / "d.json", "--json")
    assert done.code == 2 and "--json needs --prometheus" in done.err
    done = kvcal("observe", "--dashboard", "-", "--prometheus", "http://127.0.0.1:9")
    assert done.code == 2 and "both ask for standard output" in done.err and done.out == ""
    done = kvcal("observe", "--since", "15m")
    assert done.code == 2 and "--prometheus URL" in done.err and "--dashboard FILE" in done.err


def test_an_output_onto_an_input_is_refused(kvcal, tmp_path):
    fit = write_fit(fake_costs_fleet.calibration_fit(), tmp_path / "fit.json")
    before = fit.read_bytes()
    done = kvcal("observe", "--dashboard", fit, "--fit", fit)
    assert done.code == 2 and "is an input" in done.err and fit.read_bytes() == before


def test_without_the_library_the_flag_says_why(tmp_path, monkeypatch):
    monkeypatch.setattr(dashboard, "_MISSING", ImportError("No module named 'grafana_foundation_sdk'"))
    with pytest.raises(InputError, match="Python 3.11"):
        dashboard.write_dashboard(ObserveConfig(prometheus=None), tmp_path / "d.json")
