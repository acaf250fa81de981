"""`kvcal report`: one self-contained HTML page of a run, a comparison, a history or a fleet study."""

from __future__ import annotations

from pathlib import Path

import typer

from kvcal.cli.output import stdout
from kvcal.errors import InputError

EPILOG = """One HTML file that opens from disk with nothing fetched (styles, script and the SVG plots are
inside it), small enough to attach to a CI job. Headline figures carry data-kvcal="KEY" with the
value as their text, named as in the JSON that holds them (minCachedTokenDelta, break_even_tokens,
status, recommended_threshold). See docs/report.md.

Examples:

  kvcal report results/baselines/cpu-tiny -o report.html

  kvcal report results/my-run/fit.json -o report.html

  kvcal report --compare results/baselines/cpu-tiny results/nightly -o compare.html

  kvcal report --history results/baselines/cpu-tiny results/ci-* -o history.html

  kvcal fleet results/my-run --workload w.yaml --json > fleet.json && kvcal report --fleet fleet.json -o fleet.html
"""


def _kind(inputs: list[Path], compare: bool, history: bool, fleet: bool) -> str | None:
    """Which report the flags ask for (None: a run's), checked against the inputs before anything loads."""
    kinds = [flag for flag, on in (("--compare", compare), ("--history", history), ("--fleet", fleet)) if on]
    if len(kinds) > 1:
        raise InputError(f"give one of --compare, --history and --fleet, not {' and '.join(kinds)}")
    wanted = {"--compare": (2, "two inputs, BASE NEW"), "--fleet": (1, "one fleet result (kvcal fleet --json)")}
    kind = kinds[0] if kinds else None
    if kind in wanted and len(inputs) != wanted[kind][0]:
        raise InputError(f"{kind} takes {wanted[kind][1]}, got {len(inputs)}")
    if kind is None and len(inputs) != 1:
        raise InputError(
            f"a run's report takes one RUN or fit.json, got {len(inputs)} (--compare BASE NEW, "
            "--history RUN... for more)"
        )
    return kind


def report(
    inputs: list[Path] = typer.Argument(
        ...,
        metavar="INPUT",
        help="A run folder or fit.json; with --compare BASE NEW; "
        "with --history the runs; with --fleet a kvcal fleet --json file.",
    ),
    output: Path = typer.Option(..., "--output", "-o", help="The HTML file to write, e.g. report.html."),
    compare: bool = typer.Option(
        False, "--compare", help="Compare two runs: INPUT is BASE NEW (kvcal compare's verdict)."
    ),
    history: bool = typer.Option(
        False, "--history", help="The runs over time: INPUT is one or more runs or fit.json files."
    ),
    fleet: bool = typer.Option(False, "--fleet", help="A fleet study: INPUT is what kvcal fleet --json printed."),
) -> None:
    """Write one self-contained HTML report of a run, a comparison, a history or a fleet study."""
    from kvcal.files.writing import check_output

    kind = _kind(list(inputs), compare, history, fleet)
    for path in inputs:
        if not path.exists() and not path.is_symlink():
            raise InputError(f"{path}: no such file or folder")
    check_output(output, "--output", inputs)
    from kvcal.report.entry import ReportConfig, write_report  # the stages load only once the flags are right

    if kind == "--compare":
        config = ReportConfig(output, compare=(inputs[0], inputs[1]))
    elif kind == "--history":
        config = ReportConfig(output, history=tuple(inputs))
    else:
        config = ReportConfig(output, fleet=inputs[0]) if kind == "--fleet" else ReportConfig(output, run=inputs[0])
    written = write_report(config)
    stdout.print(f"wrote {written}", markup=False)


def register(app: typer.Typer) -> None:
    app.command("report", epilog=EPILOG)(report)
