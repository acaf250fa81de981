"""`kvcal compare`: has the break-even moved since the baseline? Exit 0 no, 1 regression, 2 bad input."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from kvcal.cli.help_tables import COMPARE_FALLBACKS  # the gate's tolerated regret, without numpy
from kvcal.cli.help_tables import COMPARE_SETTINGS as COMPARE  # CompareConfig's defaults and bounds, without pydantic
from kvcal.cli.output import print_sanity, stdout
from kvcal.errors import RegressionDetected

EPILOG = """Exit codes: 0 no regression, 1 regression, 2 bad input.

A regression is a break-even move of at least --tolerance (relative) that is also significant at the fits' \
confidence (its bootstrap interval excludes no change), in either direction, or a pull that no longer wins at all. \
See docs/ci.md.

Examples:

  kvcal compare results/baselines/cpu-tiny/fit.json results/ci-run

  kvcal compare base/fit.json new/fit.json --tolerance 0.2 --markdown summary.md --plot compare.png

  kvcal compare results/baselines/cpu-tiny results/nightly --html compare.html    # the page for a CI artifact

  kvcal compare base/fit.json new/fit.json --values deploy/values.yaml

  kvcal compare base/fit.json new/fit.json --deployed 2048 --strict-deployed
"""


def compare(
    baseline: Path = typer.Argument(..., help="Blessed baseline: a fit.json or a run folder."),
    current: Path = typer.Argument(
        ..., help="The new measurement: a fit.json or a run folder (fitted on the fly if it has no fit.json)."
    ),
    tolerance: float = typer.Option(
        COMPARE["tolerance"]["default"], "--tolerance", "-t", help="Relative break-even move tolerated, e.g. 0.1 = 10%."
    ),
    markdown: Optional[Path] = typer.Option(
        None, "--markdown", help="Write a Markdown summary here (for a CI job page)."
    ),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Write an overlay plot of both runs here (PNG)."),
    html: Optional[Path] = typer.Option(
        None,
        "--html",
        help="Write the comparison's page here (one self-contained HTML file, as kvcal report --compare writes it).",
    ),
    deployed: Optional[int] = typer.Option(
        None, "--deployed", help="The minCachedTokenDelta in production, in tokens."
    ),
    values: Optional[Path] = typer.Option(
        None, "--values", help="Read the deployed minCachedTokenDelta from this Helm values file."
    ),
    strict_deployed: bool = typer.Option(
        False,
        "--strict-deployed",
        help="Also exit 1 when the deployed threshold costs more than "
        f"{COMPARE_FALLBACKS['strict_deployed_regret_pct']:g}% of TTFT "
        "(expected regret) against the current fit, too low or too high.",
    ),
    force: bool = typer.Option(
        COMPARE["force"]["default"], "--force", help="Compare fits of different models or transports anyway."
    ),
    seed: int = typer.Option(
        COMPARE["seed"]["default"],
        "--seed",
        min=COMPARE["seed"]["ge"],
        help="Seed of the draws that estimate the change's interval.",
    ),
) -> None:
    """Compare a new fit with a baseline: break-even, intervals, coefficients, bandwidth, and the deployed threshold."""
    from kvcal.gate.compare_settings import CompareConfig

    config = CompareConfig(
        baseline=baseline,
        current=current,
        tolerance=tolerance,
        force=force,
        deployed_tokens=deployed,
        values_file=values,
        markdown=markdown,
        plot=plot,
        seed=seed,
        probes=html is not None,
    )  # first: a bad value is refused before either run is loaded
    from rich.table import Table

    from kvcal.files.writing import check_output
    from kvcal.gate.compare import TABLE_HEADER, CompareConfig, row_notes, run_compare, table_rows

    check_output(markdown, "--markdown", [baseline, current, values, plot, html])
    check_output(plot, "--plot", [baseline, current, values, html])
    check_output(html, "--html", [baseline, current, values])
    result = run_compare(config)
    if html is not None:
        from kvcal.report.entry import write_compare_page

        write_compare_page(result, html)
    table = Table(*TABLE_HEADER, title=f"{result.baseline.label} -> {result.current.label}")
    for cells in table_rows(result):
        table.add_row(*cells)
    stdout.print(table)
    for line in row_notes(result) + result.notes:
        stdout.print(f"  note: {line}", markup=False)
    from kvcal.estimate.sanity import sanity_for_fit

    print_sanity(sanity_for_fit(result.current.fit)[1])
    stdout.print(result.verdict, markup=False)
    if result.deployed is not None:
        stdout.print(result.deployed.message, markup=False)
    for path in (markdown, plot, html):
        if path is not None:
            stdout.print(f"wrote {path}", markup=False)
    reason = result.failure(strict_deployed=strict_deployed)
    if reason is not None:
        raise RegressionDetected(reason)


def register(app: typer.Typer) -> None:
    app.command("compare", epilog=EPILOG)(compare)
