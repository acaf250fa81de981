"""`kvcal history`: break-even and coefficients over runs, ordered by run time, labelled by what changed."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from kvcal.cli.output import stdout

EPILOG = """Examples:

  kvcal history results/*/                       # every run folder, oldest first

  kvcal history results/baselines/cpu-tiny/fit.json results/ci-*/fit.json -o trend.png

  kvcal history results/run-a results/run-b --markdown trend.md
"""


def history(
    inputs: list[Path] = typer.Argument(
        ..., help="fit.json files or run folders (fitted on the fly if they have no fit.json)."
    ),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the trend plot here (PNG)."),
    markdown: Optional[Path] = typer.Option(None, "--markdown", help="Write the trend table as Markdown here."),
) -> None:
    """Show how the break-even (with its interval) and the cost coefficients moved over runs."""
    from rich.table import Table

    from kvcal.files.writing import check_output
    from kvcal.gate.history import HEADER, HistoryConfig, run_history, table_rows

    for path, flag in ((output, "--output"), (markdown, "--markdown")):
        check_output(path, flag, [*inputs, output if flag == "--markdown" else markdown])
    entries = run_history(HistoryConfig(inputs=list(inputs), plot=output, markdown=markdown))
    table = Table(*HEADER, title=f"kvcal history ({len(entries)} runs, oldest first)")
    for cells in table_rows(entries):
        table.add_row(*cells)
    stdout.print(table)
    for path in (output, markdown):
        if path is not None:
            stdout.print(f"wrote {path}", markup=False)


def register(app: typer.Typer) -> None:
    app.command("history", epilog=EPILOG)(history)
