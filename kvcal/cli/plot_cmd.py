"""`kvcal plot`: draw the probes, both fitted curves with bands, the break-even and the pull's saving."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from kvcal.cli.help_tables import FIT_SETTINGS  # FitSettings' defaults and bounds, without pydantic
from kvcal.cli.output import stdout

EPILOG = """Examples:

  kvcal plot results/llama8b-rdma -o crossover.png

  kvcal plot results/llama8b-rdma/fit.json -o crossover.svg --log-x

  kvcal plot job.txt -o job.png            # the llm-d calibration Job's table
"""


def plot(
    input: Path = typer.Argument(
        ..., show_default=False, help="A run folder, a fit.json, a probe CSV or the llm-d Job's table."
    ),
    output: Path = typer.Option(
        ..., "--output", "-o", help="Image to write; .png or .svg by extension.", show_default=False
    ),
    log_x: Optional[bool] = typer.Option(
        None,
        "--log-x/--linear-x",
        show_default=False,
        help="Logarithmic or "
        "linear prefix-length axis; default: logarithmic when the break-even lies in "
        "the shortest 5% of the lengths drawn (a linear axis squeezes it into the edge).",
    ),
    confidence: float = typer.Option(
        FIT_SETTINGS["confidence"]["default"], "--confidence", help="Band level when the input must be fitted first."
    ),
    seed: int = typer.Option(
        FIT_SETTINGS["seed"]["default"],
        "--seed",
        min=FIT_SETTINGS["seed"]["ge"],
        help="Bootstrap seed when the input must be fitted first.",
    ),
) -> None:
    """Plot TTFT against prefix length for both legs, with the break-even and the pull's saving in percent.

    Example: kvcal plot results/my-run -o my-run.png --log-x
    """
    from kvcal.fit.settings import fit_settings

    settings = fit_settings(confidence=confidence, seed=seed)  # also when a fit.json leaves it unused: bad is bad
    from kvcal.files.writing import check_output
    from kvcal.gate.plot import plot_input

    check_output(output, "--output", [input])
    written = plot_input(input, output, settings, log_x=log_x)
    stdout.print(f"wrote {written}")


def register(app: typer.Typer) -> None:
    app.command("plot", epilog=EPILOG)(plot)
