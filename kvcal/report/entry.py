"""``kvcal report``'s one entry point: a run, a comparison, a history or a fleet study in, one HTML file out."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kvcal.errors import InputError
from kvcal.files.writing import write_file
from kvcal.gate.compare import run_compare
from kvcal.gate.compare_settings import CompareConfig
from kvcal.gate.history import build_history
from kvcal.gate.loaded_runs import load_run
from kvcal.gate.regression import Comparison
from kvcal.report import compare_page, fleet_page, history_page, run_page
from kvcal.report.html import document
from kvcal.report.provenance import footer
from kvcal.report.run_data import load_run_data


@dataclass(frozen=True)
class ReportConfig:
    """What ``kvcal report`` was asked for: exactly one of a run, a comparison, a history or a fleet result."""

    output: Path
    run: Path | None = None
    compare: tuple[Path, Path] | None = None
    history: tuple[Path, ...] = ()
    fleet: Path | None = None

    def __post_init__(self) -> None:
        given = [self.run is not None, self.compare is not None, bool(self.history), self.fleet is not None]
        if sum(given) != 1:
            raise InputError("give one of RUN, --compare BASE NEW, --history RUN... or --fleet FLEET_JSON")

    @property
    def inputs(self) -> list[Path]:
        return [p for p in (self.run, *(self.compare or ()), *self.history, self.fleet) if p is not None]


def build_page(config: ReportConfig) -> str:
    """The page's HTML (nothing written)."""
    if config.run is not None:
        run = load_run_data(config.run)
        return document(f"kvcal report: {run.label}", run_page.run_body(run), nav=run_page.NAV, footer=footer())
    if config.compare is not None:
        base, new = config.compare
        # A page shows a comparison of different models or transports (noted on it) where the gate refuses one
        return compare_document(run_compare(CompareConfig(baseline=base, current=new, probes=True, force=True)))
    if config.history:
        entries = build_history([load_run(path, probes=False) for path in config.history])
        title = f"kvcal history: {len(entries)} runs, {entries[0].run.label} to {entries[-1].run.label}"
        return document(title, history_page.history_body(entries), nav=history_page.NAV, footer=footer())
    assert config.fleet is not None
    result = fleet_page.load_fleet(config.fleet)
    return document(
        f"kvcal fleet: {result.pods} pods, {Path(result.workload).name}",
        fleet_page.fleet_body(result),
        nav=fleet_page.NAV,
        footer=footer(),
    )


def compare_document(result: Comparison) -> str:
    title = f"kvcal compare: {result.baseline.label} -> {result.current.label}"
    return document(title, compare_page.compare_body(result), nav=compare_page.NAV, footer=footer())


def write_report(config: ReportConfig) -> Path:
    """Build the page and write it whole (kvcal.files.writing: a crash leaves no partial file)."""
    return write_file(config.output, build_page(config), f"-o {config.output}")


def write_compare_page(result: Comparison, output: Path) -> Path:
    """``kvcal compare --html FILE``: the page of a comparison the command already made."""
    return write_file(output, compare_document(result), f"--html {output}")
