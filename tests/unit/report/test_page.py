"""`kvcal report`'s pages: the figures tools read equal the JSON the commands write; the page stands alone."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import pytest

from kvcal.threshold.choose import Threshold
from kvcal.errors import InputError
from kvcal.fit.io import write_fit
from kvcal.records.fit import load_fit
from kvcal.fleet.run import FleetConfig, run_fleet
from kvcal.report.entry import ReportConfig, build_page, write_report
from kvcal.report.svg import Chart, Point, Points, Style
from kvcal.costs.simulated import SimCosts
from tests.factories import make_curve, make_fit, sim_run

ROOT = Path(__file__).resolve().parents[3]
BASELINE = ROOT / "results" / "baselines" / "cpu-tiny"
WORKLOAD = ROOT / "docs" / "examples" / "fleet-workload.yaml"
MAX_BYTES = 2 * 1024 * 1024


class Figures(HTMLParser):
    """Every ``data-kvcal`` element: (key, run) -> its text, as a tool reading the page gets it."""

    def __init__(self) -> None:
        super().__init__()
        self.found: dict[tuple[str, str | None], list[str]] = {}
        self.reasons: dict[str, str] = {}
        self.external: list[str] = []
        self._open: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for name in ("src", "href"):
            if a.get(name) and not a[name].startswith("#"):
                self.external.append(f"{tag} {name}={a[name]}")
        if tag == "link":
            self.external.append(f"link {a}")
        if "data-kvcal" in a:
            self._open.append((a["data-kvcal"], a.get("data-kvcal-run")))
            self.found.setdefault(self._open[-1], []).append("")
            if a.get("data-kvcal-reason"):
                self.reasons[a["data-kvcal"]] = a["data-kvcal-reason"]

    def handle_data(self, data):
        if self._open:
            self.found[self._open[-1]][-1] += data

    def handle_endtag(self, tag):
        if tag == "span" and self._open:
            self._open.pop()


def figures_of(html: str) -> Figures:
    parser = Figures()
    parser.feed(html)
    return parser


def as_json_value(text: str):
    """A figure's text read back: JSON where it is JSON (numbers, lists), none as null, else the text itself."""
    if text == "none":
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def test_a_runs_headline_figures_are_fit_jsons_and_emit_configs(capsys):
    from kvcal.cli.app import main

    assert main(["emit-config", str(BASELINE), "--format", "json"]) == 0
    emitted = json.loads(capsys.readouterr().out)
    fit = load_fit(BASELINE / "fit.json")
    page = figures_of(build_page(ReportConfig(Path("r.html"), run=BASELINE)))
    assert page.found[("minCachedTokenDelta", None)][0] == str(emitted["minCachedTokenDelta"])
    assert as_json_value(page.found[("break_even_tokens", None)][0]) == fit.break_even_tokens
    assert page.found[("status", None)][0] == fit.status
    for key, value in emitted.items():  # every key of emit-config's JSON, as it printed it
        assert as_json_value(page.found[(key, None)][0]) == value, key
    assert page.external == []


def test_keys_the_emit_stage_adds_appear_without_a_change_to_the_page(monkeypatch):
    plain = Threshold.as_json

    def more(self):
        return {**plain(self), "rule": "upper-bound", "expected_regret_ms": 1.25}

    monkeypatch.setattr(Threshold, "as_json", more)
    page = figures_of(build_page(ReportConfig(Path("r.html"), run=BASELINE)))
    assert page.found[("rule", None)] == ["upper-bound"]
    assert page.found[("expected_regret_ms", None)] == ["1.25"]


def test_a_refused_threshold_is_none_with_the_reason(tmp_path):
    fit = make_fit(status="recompute-always-wins", break_even_tokens=None, break_even_ci=None,
                   pull=make_curve(500.0, 50.0))
    path = write_fit(fit, tmp_path / "fit.json")
    html = build_page(ReportConfig(tmp_path / "r.html", run=path))
    page = figures_of(html)
    assert page.found[("minCachedTokenDelta", None)][0] == "none"
    assert "not recommended" in page.reasons["minCachedTokenDelta"]
    assert "kvcal sweep --prefix-lengths" in html  # what to measure next


def test_a_thousand_probe_run_stays_under_two_megabytes(tmp_path):
    run = sim_run(tmp_path / "big", lengths=tuple(range(256, 256 * 21, 256)), reps=25)
    written = write_report(ReportConfig(tmp_path / "big.html", run=run))
    html = written.read_text()
    assert html.count('class="probe"') == 1000  # every probe drawn, each with its tooltip
    assert written.stat().st_size < MAX_BYTES


def test_a_probes_tooltip_says_its_record():
    html = build_page(ReportConfig(Path("r.html"), run=BASELINE))
    tips = re.findall(r'<path class="probe"[^>]*><title>([^<]*)</title>', html)
    probes = [json.loads(line) for line in (BASELINE / "probes.jsonl").read_text().splitlines() if line.strip()]
    assert len(tips) == sum(1 for p in probes if p["valid"]) > 0  # one point per valid probe
    assert any("pull, rep" in t and "bytes moved" in t and "proved by" in t and "host load" in t for t in tips)


def test_compare_and_history_pages_name_each_runs_figures(tmp_path):
    runs = [
        sim_run(
            tmp_path / f"r{i}",
            costs=SimCosts(pull_per_token_us=3.0 + i),
            seed=i,
            created_at=f"2026-01-0{i + 1}T00:00:00+00:00",
        )
        for i in range(3)
    ]
    page = figures_of(build_page(ReportConfig(tmp_path / "c.html", compare=(runs[0], runs[2]))))
    for role, run in (("baseline", runs[0]), ("current", runs[2])):
        fit = load_fit(run / "fit.json")
        assert as_json_value(page.found[("break_even_tokens", role)][0]) == fit.break_even_tokens
        assert page.found[("status", role)] == [fit.status]
    html = build_page(ReportConfig(tmp_path / "h.html", history=tuple(reversed(runs))))
    page = figures_of(html)
    for run in runs:
        assert (
            as_json_value(page.found[("break_even_tokens", run.name)][0])
            == load_fit(run / "fit.json").break_even_tokens
        )
    assert html.index(">#1 r0") < html.index(">#3 r2")  # oldest first, whatever the order given


def test_a_fleet_pages_recommended_threshold_is_the_results(tmp_path):
    result = run_fleet(
        FleetConfig(
            fit_path=Path("fit.json"), workload_path=WORKLOAD, pods=2, thresholds=[256, 1024, 2048], rate=0.05,
            duration_s=60, seeds=1,
        ),
        make_fit(),
        lambda *a: None,
    )
    path = tmp_path / "fleet.json"
    path.write_text(result.model_dump_json(indent=2, by_alias=True))
    page = figures_of(build_page(ReportConfig(tmp_path / "f.html", fleet=path)))
    assert page.found[("recommended_threshold", None)][0] == str(result.recommended_threshold)
    data = json.loads(path.read_text())
    shown = {key for key, _ in page.found}
    assert set(data) - {"rows", "loads"} <= shown  # every other key, shown as the result holds it


@pytest.mark.parametrize("text, why", [("{", "not JSON"), ('{"schema": "kvcal.fleet/1"}', "kvcal.fleet/1")])
def test_a_file_that_is_not_a_fleet_result_is_an_input_error(tmp_path, text, why):
    path = tmp_path / "fleet.json"
    path.write_text(text)
    with pytest.raises(InputError, match=why):
        build_page(ReportConfig(tmp_path / "f.html", fleet=path))


def test_a_chart_escapes_tooltips_and_leaves_out_what_a_log_axis_cannot_place():
    chart = Chart("t", "x", "y", x_log=True)
    chart.points.append(
        Points(Style("p", "#000", marker="circle"), [Point(0.0, 1.0, "zero"), Point(10.0, 2.0, "<b>&")])
    )
    svg = chart.svg()
    assert "&lt;b&gt;&amp;" in svg and "zero" not in svg


def test_a_report_of_a_fit_made_now_leaves_the_run_folder_as_it_was(tmp_path):
    run = sim_run(tmp_path / "r")
    (run / "fit.json").unlink()
    before = sorted(p.name for p in run.iterdir())
    build_page(ReportConfig(tmp_path / "r.html", run=run))
    assert sorted(p.name for p in run.iterdir()) == before


def test_one_kind_of_report_at_a_time(tmp_path):
    with pytest.raises(InputError, match="give one of"):
        ReportConfig(tmp_path / "x.html", run=BASELINE, fleet=BASELINE)
    assert replace(ReportConfig(tmp_path / "x.html", run=BASELINE)).inputs == [BASELINE]


def test_runs_record_the_kvcal_commit_that_made_them_for_the_pages_provenance():
    import shutil
    import subprocess

    from kvcal.files.provenance import host_provenance

    checkout = (ROOT / ".git").exists() and shutil.which("git")
    expected = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip() if checkout else None
    assert host_provenance()["git_commit"] == expected
