"""Each kind of `kvcal report` page, opened in headless Chromium: no console error, no request, the figures
tools read equal the JSON, the plot drawn, a narrow window without sideways scrolling, the table sorts.

One browser for every page (a few seconds in all). Skipped, saying why, where Chromium is
missing (Debian: ``apt-get install chromium``; scripts/browser_env.sh, run by scripts/test.sh, installs it as root).
Screenshots go to $KVCAL_SCREENSHOTS when set (docs/img/ holds the committed ones), else the test's folder.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kvcal.cli.app import main
from kvcal.fit.io import write_fit
from kvcal.fit_record import load_fit
from kvcal.fleet.run import FleetConfig, run_fleet
from kvcal.sim_costs import SimCosts
from tests.factories import make_curve, make_fit, sim_run

from tests.browser.cdp_client import Browser, find_browser

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "results" / "baselines" / "cpu-tiny"
WORKLOAD = ROOT / "docs" / "examples" / "fleet-workload.yaml"
READ_FIGURES = """JSON.stringify(Array.from(document.querySelectorAll('[data-kvcal]')).map(function(e){
  return [e.getAttribute('data-kvcal'), e.getAttribute('data-kvcal-run'), e.textContent]}))"""
PLOTTED = """Array.from(document.querySelectorAll('figure > svg')).map(function(s){
  var b=s.getBoundingClientRect(); return [b.width, b.height, s.querySelectorAll('polyline, .probe').length]})"""


@pytest.fixture(scope="module")
def browser():
    executable = find_browser()
    if executable is None:
        pytest.skip("no Chromium on the PATH (Debian: apt-get install -y chromium; "
                    "scripts/browser_env.sh does it as root)")
    opened = Browser(executable)
    yield opened
    opened.close()


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, tuple[Path, dict]]:
    """The four kinds of page, written by the CLI, each with the JSON its figures must equal."""
    root = tmp_path_factory.mktemp("pages")
    runs = [
        sim_run(
            root / f"nightly-{i}",
            costs=SimCosts(pull_intercept_ms=20.0 + 6 * i),
            seed=i,
            created_at=f"2026-01-0{i + 1}T00:00:00+00:00",
            provenance={"vllm_version": f"0.3{i}.0"},
        )
        for i in range(3)
    ]  # each run slower to pull than the last, on a newer vLLM: the pages show a regression
    fleet = run_fleet(
        FleetConfig(
            fit_path=Path("fit.json"), workload_path=WORKLOAD, pods=2, thresholds=[256, 1024, 2048], rate=0.05,
            duration_s=60, seeds=1,
        ),
        make_fit(),
        lambda *a: None,
    )
    (root / "fleet.json").write_text(fleet.model_dump_json(by_alias=True))
    fits = {run.name: load_fit(run / "fit.json") for run in runs}
    out = {
        "run": (["report", str(BASELINE)], {(None,): load_fit(BASELINE / "fit.json")}),
        "compare": (
            ["report", "--compare", str(runs[0]), str(runs[1])],
            {("baseline",): fits[runs[0].name], ("current",): fits[runs[1].name]},
        ),
        "history": (["report", "--history", *map(str, runs)], {(name,): fit for name, fit in fits.items()}),
        "fleet": (
            ["report", "--fleet", str(root / "fleet.json")],
            {"recommended_threshold": fleet.recommended_threshold},
        ),
    }
    written = {}
    for kind, (args, expected) in out.items():
        assert main([*args, "-o", str(root / f"{kind}.html")]) == 0
        written[kind] = (root / f"{kind}.html", expected)
    return written


def _figures(browser: Browser) -> dict[tuple[str, str | None], str]:
    shown: dict[tuple[str, str | None], str] = {}
    for key, run, text in json.loads(browser.evaluate(READ_FIGURES)):
        shown.setdefault((key, run), text)
    return shown


def _screenshots() -> Path | None:
    target = os.environ.get("KVCAL_SCREENSHOTS")
    return Path(target) if target else None


@pytest.mark.parametrize("kind", ["run", "compare", "history", "fleet"])
def test_the_page_loads_alone_and_shows_the_jsons_figures(browser, pages, kind, tmp_path):
    path, expected = pages[kind]
    visit = browser.open(path)
    assert visit.errors == [] and visit.requests == []
    shown = _figures(browser)
    if kind == "fleet":
        assert shown[("recommended_threshold", None)] == str(expected["recommended_threshold"])
    for (run,), fit in () if kind == "fleet" else expected.items():
        assert float(shown[("break_even_tokens", run)]) == fit.break_even_tokens
        assert shown[("status", run)] == fit.status
    plots = browser.evaluate(PLOTTED)
    assert plots and all(width > 300 and height > 150 and drawn >= 2 for width, height, drawn in plots)
    (_screenshots() or tmp_path).mkdir(parents=True, exist_ok=True)
    assert browser.screenshot((_screenshots() or tmp_path) / f"report-{kind}.png").stat().st_size > 10_000


def test_a_runs_threshold_in_the_browser_is_emit_configs(browser, pages, capsys):
    assert main(["emit-config", str(BASELINE), "--format", "json"]) == 0
    emitted = json.loads(capsys.readouterr().out)
    browser.open(pages["run"][0])
    assert _figures(browser)[("minCachedTokenDelta", None)] == str(emitted["minCachedTokenDelta"])


def test_a_narrow_window_scrolls_only_down_and_the_table_sorts(browser, pages):
    browser.open(pages["run"][0], width=380, height=800)
    assert browser.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    first_column = (
        "Array.from(document.querySelectorAll('#lengths tbody tr')).map(r => Number(r.cells[0].dataset.sort))"
    )
    before = browser.evaluate(first_column)
    browser.evaluate("document.querySelector('#lengths thead th button').click()")
    browser.evaluate("document.querySelector('#lengths thead th button').click()")  # second click: descending
    assert browser.evaluate(first_column) == sorted(before, reverse=True) != before


def test_a_refused_runs_page_says_none_and_why(browser, tmp_path):
    path = write_fit(
        make_fit(status="recompute-always-wins", break_even_tokens=None, break_even_ci=None,
                 pull=make_curve(500.0, 50.0)), tmp_path / "fit.json"
    )
    assert main(["report", str(path), "-o", str(tmp_path / "refused.html")]) == 0
    visit = browser.open(tmp_path / "refused.html")
    assert visit.errors == [] and visit.requests == []
    reason = browser.evaluate("document.querySelector('[data-kvcal=minCachedTokenDelta]').dataset.kvcalReason")
    assert _figures(browser)[("minCachedTokenDelta", None)] == "none" and "not recommended" in reason


def test_a_page_prints_to_pdf_with_its_folded_details_open(browser, pages, tmp_path):
    browser.open(pages["run"][0])
    assert browser.evaluate("document.querySelectorAll('details').length") > 0
    opened = ("window.dispatchEvent(new Event('beforeprint'));"
              "[...document.querySelectorAll('details')].every(d => d.open)")
    assert browser.evaluate(opened)
    pdf = browser.print_pdf(tmp_path / "report.pdf").read_bytes()
    assert pdf.startswith(b"%PDF") and pdf.count(b"/Type /Page") >= 2
