"""`kvcal export`: a run's valid probes as the interchange CSV."""

from __future__ import annotations

from pathlib import Path

import typer

from kvcal.cli.output import info


def export(
    run: Path = typer.Argument(..., help="A run folder written by `kvcal sweep`."),
    output: Path = typer.Option(..., "-o", "--output", help="CSV file to write; - for stdout."),
) -> None:
    """Write the probe table (prefix_tokens, leg, ttft_ms, rep, bytes_moved, started_at), one row per valid probe.

    A --pairs run adds each row's pair and link_class: kvcal fit reads them back and fits each class.

    Example: kvcal export results/my-run -o probes.csv   (or -o - | column -ts,)
    """
    from kvcal.errors import InputError
    from kvcal.outputs import check_output, is_stdout
    from kvcal.runfolder import RunFolder, export_interchange

    to_stdout = is_stdout(output)
    check_output(output, "-o", [run])
    folder = RunFolder(run)
    if not RunFolder.is_run_folder(run):
        raise InputError(f"{run} is not a kvcal run folder (no run.json)")
    folder.manifest()  # a damaged run.json is a damaged run: say so rather than export it
    rows = export_interchange(folder, output)
    info(f"kvcal: wrote {rows} probes to {'stdout' if to_stdout else output}")


def register(app: typer.Typer) -> None:
    app.command("export")(export)
