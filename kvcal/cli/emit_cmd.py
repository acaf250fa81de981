"""`kvcal emit-config`: turn a fit into minCachedTokenDelta and the configs that carry it."""

from __future__ import annotations

from pathlib import Path

import typer

from kvcal.cli.output import info, warn
from kvcal.emit.formats import DEFAULT_MARGIN, FORMATS, GUIDE_PREFILL_PROFILE, GUIDE_PREFIX_MATCH_PRODUCER, EmitOptions, emit

EPILOG = """Examples:

  kvcal emit-config runs/llama-nixl --format env

  kvcal emit-config runs/llama-nixl/fit.json --format helm --values v.yaml | helm upgrade REL CHART -f -

  kvcal emit-config runs/llama-nixl --format helm --values v.yaml --diff

  kvcal emit-config runs/gpt-oss --format env --allow-extrapolation   # trust the curves below the shortest winning length

Exit 3, nothing on stdout: recomputing always won (P2P not recommended), the legs tie, the break-even's
interval is open above, or the sweep measured a disturbed host (unless --allow-disturbed); stderr says
why and what to measure next."""


def emit_config(
    input_path: Path = typer.Argument(..., metavar="INPUT", help="A fit.json, or a run folder (fitted on the fly if it has none)."),
    format: str = typer.Option("plugin", "--format", "-f", help=f"Output: {', '.join(FORMATS)}."),
    margin: float = typer.Option(DEFAULT_MARGIN, "--margin", help="Safety fraction over the break-even's upper bound (0.25 = +25%)."),
    block_size: int = typer.Option(None, "--block-size", help="Round to this block size (default: the run's, else 64)."),
    values: Path = typer.Option(None, "--values", help="Helm values file to patch (--format helm)."),
    in_place: bool = typer.Option(False, "--in-place", help="Write the patched values file back (a .bak copy is kept)."),
    diff: bool = typer.Option(False, "--diff", help="Print a unified diff instead of the whole values file."),
    add_plugin: bool = typer.Option(False, "--add-plugin", help="Insert the p2p-source-producer plugin where the file has none."),
    prefix_match_producer: str = typer.Option(GUIDE_PREFIX_MATCH_PRODUCER, "--prefix-match-producer",
                                              help="prefixMatchInfoProducerName for plugin/--add-plugin output."),
    prefill_profile: str = typer.Option(GUIDE_PREFILL_PROFILE, "--prefill-profile", help="prefillProfileName for plugin/--add-plugin output."),
    transport: str = typer.Option(None, "--transport", help="Transport for --format vllm when the fit records none: p2p-tier or nixl-pd."),
    allow_extrapolation: bool = typer.Option(False, "--allow-extrapolation", help="Let the threshold go below the shortest "
                                             "measured length from which the pull won (the fitted curves' shape alone), "
                                             "e.g. kvcal emit-config RUN --format env --allow-extrapolation."),
    allow_disturbed: bool = typer.Option(False, "--allow-disturbed", help="Emit even when the sweep measured a busy host "
                                         "(other processes took the engines' cores), e.g. kvcal emit-config RUN --allow-disturbed."),
) -> None:
    """Emit minCachedTokenDelta (with a safety margin) as a plugin entry, a patched Helm values file, and more.

    How the number was reached is printed on stderr; only the artifact goes to stdout.
    """
    options = EmitOptions(
        format=format, margin=margin, block_size=block_size, values=values, in_place=in_place, diff=diff,
        add_plugin=add_plugin, prefix_match_producer=prefix_match_producer, prefill_profile=prefill_profile,
        transport=transport, allow_extrapolation=allow_extrapolation, allow_disturbed=allow_disturbed,
    )
    result = emit(input_path, options)
    for line in result.notes:
        info(f"kvcal: {line}")
    for line in result.warnings:
        warn(line)
    if result.stdout:
        typer.echo(result.stdout, nl=False)


def register(app: typer.Typer) -> None:
    app.command("emit-config", epilog=EPILOG)(emit_config)
