"""`kvcal emit-config`: turn a fit into the router's calibrated constants and the configs that carry them."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from kvcal.cli.help_tables import EMIT_FALLBACKS as FALLBACK  # what emit uses when neither flag nor run says
from kvcal.cli.help_tables import EMIT_SETTINGS as EMIT  # EmitOptions' defaults and bounds, without pydantic
from kvcal.cli.options import byte_size, parse_class_mix
from kvcal.cli.output import info, warn
from kvcal.emit.renderers import help_list, option_help
from kvcal.errors import InputError
from kvcal.threshold.limits import DEFAULT_MARGIN  # resolve_rule's, which EmitOptions calls: declared once there
from kvcal.threshold.rules import rule_help

P2P_PORT = EMIT["p2p_port"]["default"]

EPILOG = f"""Examples:

  kvcal emit-config runs/r --format plugin --values router-values.yaml     # names from the values file

  kvcal emit-config runs/r --format helm --values v.yaml | helm upgrade REL CHART -f -

  kvcal emit-config runs/r --format helm --values v.yaml --diff

  kvcal emit-config runs/r --format affinity --chunk-size 8192

  kvcal emit-config runs/r --format vllm --transport p2p-tier --cpu-bytes-to-use 88GiB --model openai/gpt-oss-120b

  kvcal emit-config runs/r --format env

  kvcal emit-config runs/gpt-oss --format env --allow-extrapolation   # trust the curves below the shortest winning length

  kvcal emit-config runs/r --format json --deltas epp.log    # what the threshold costs over the router's own deltas

  kvcal emit-config runs/r --rule upper --margin 0.25        # the earlier rule: the interval's upper end x 1.25

  kvcal emit-config runs/fleet --format json --class-mix same-node=0.7,tcp=0.3   # one threshold over link classes

  kvcal emit-config runs/r --format work-range --ttft-penalty-ms 3500 --max-model-len 131072   # remaining-work routing

  kvcal emit-config runs/r --format json -o emit.json     # replaced whole; exit 3 leaves the old one as it was

{help_list()}

The default rule (expected-cost) emits the block multiple over the measured range with the least
expected TTFT per request, averaged over the deltas and the fit's own draws of both legs' mean
costs; stderr gives its steps and what it costs (expected regret over the deltas, the chance the
best threshold lies above it) beside the upper and the llm-d recipe's rules.

Exit 3, nothing on stdout: under the default rule, no P2P is cheapest on the mean costs (stderr
gives the costs that make it so; a tie or recompute winning at some lengths is priced, not refused);
under --rule upper, recomputing always won, the legs tie or the interval is open above; under
either, the sweep measured a disturbed host (unless --allow-disturbed); with work-range, the band
is empty. stderr says why and what to measure next. Exit 2: --margin without --rule upper, a bad
--deltas file, work-range without --ttft-penalty-ms or a max model length."""  # noqa: E501 - help text, printed by --help as written


def emit_config(
    input_path: Path = typer.Argument(
        ..., metavar="INPUT", help="A fit.json, or a run folder (fitted on the fly if it has none)."
    ),
    format: str = typer.Option(
        EMIT["format"]["default"],
        "--format",
        "-f",
        help=option_help(),
    ),
    rule: str = typer.Option(
        EMIT["rule"]["default"],
        "--rule",
        help=rule_help(),
    ),
    margin: Optional[float] = typer.Option(
        None,
        "--margin",
        help=f"--rule upper only: safety fraction over the break-even's upper bound (default "
        f"{DEFAULT_MARGIN:g} = +{DEFAULT_MARGIN:.0%}), e.g. --rule upper --margin 0.1.",
    ),
    deltas: Optional[Path] = typer.Option(
        None,
        "--deltas",
        help="Cached-token deltas to price the threshold over: a list, a delta,count histogram, or "
        "a router (EPP) log with p2p decisions (default: log-uniform over the measured range), e.g. --deltas epp.log.",
    ),
    block_size: int = typer.Option(
        None, "--block-size", help=f"Round to this block size (default: the run's, else {FALLBACK['block_size']})."
    ),
    values: Path = typer.Option(
        None, "--values", help="Helm values file: patched with --format helm; plugin reads its names."
    ),
    in_place: bool = typer.Option(
        False, "--in-place", help="Write the patched values file back (a .bak copy is kept)."
    ),
    diff: bool = typer.Option(False, "--diff", help="Print a unified diff instead of the whole values file."),
    add_plugin: bool = typer.Option(
        False, "--add-plugin", help="Insert the p2p-source-producer plugin where the file has none."
    ),
    prefix_match_producer: Optional[str] = typer.Option(
        None,
        "--prefix-match-producer",
        help=f"prefixMatchInfoProducerName (default: the values file's, else {FALLBACK['prefix_match_producer']}).",
    ),
    prefill_profile: Optional[str] = typer.Option(
        None,
        "--prefill-profile",
        help="prefillProfileName (default: the values "
        "file's profiles, else by --deployment: prefill for pd, default for p2p).",
    ),
    deployment: Optional[str] = typer.Option(
        None,
        "--deployment",
        help="Deployment shape for default names: pd (prefill/decode; "
        "the plugin's default 'prefill') or p2p (the P2P guide's single 'default' profile). "
        "Default: p2p when the run measured p2p-tier, else pd.",
    ),
    transport: Optional[str] = typer.Option(
        None, "--transport", help="Transport for --format vllm when the fit records none: p2p-tier or nixl-pd."
    ),
    p2p_port: int = typer.Option(
        P2P_PORT,
        "--p2p-port",
        help=f"--format vllm: the P2P tier's listener port (the router's sidecar names {P2P_PORT}).",
    ),
    cpu_bytes_to_use: Optional[str] = typer.Option(
        None,
        "--cpu-bytes-to-use",
        help="--format vllm: CPU tier per engine, e.g. 88GiB "
        f"(default {FALLBACK['cpu_bytes_to_use'] / 1024**3:g}GiB, with a warning); /dev/shm is sized from it.",
    ),
    model: Optional[str] = typer.Option(
        None, "--model", help="--format vllm: served model name for the KV-events topic (default: the run's)."
    ),
    chunk_size: Optional[int] = typer.Option(
        None,
        "--chunk-size",
        help="affinity/json/helm: tokens per prefill chunk for "
        f"peakPrefillThroughput (default: the run's --max-num-batched-tokens, else {FALLBACK['chunk_size']}).",
    ),
    with_costmodel: bool = typer.Option(
        False,
        "--with-costmodel",
        help="--format helm: also write costModel (only for a router "
        "build that accepts it) and lower minCachedTokenDelta to that variant's floor.",
    ),
    allow_extrapolation: bool = typer.Option(
        False,
        "--allow-extrapolation",
        help="Let the threshold rest on the "
        "fitted curves outside the measured range (below its shortest length, or "
        "beyond its longest), "
        "e.g. kvcal emit-config RUN --format env --allow-extrapolation.",
    ),
    class_mix: Optional[str] = typer.Option(
        None,
        "--class-mix",
        help="A fit with link classes: the fleet's share of pod pairs per class, "
        "CLASS=SHARE,... summing to 1 (default: each class's share of the campaign's pairs), "
        "e.g. --class-mix same-node=0.7,tcp=0.3.",
    ),
    allow_disturbed: bool = typer.Option(
        False,
        "--allow-disturbed",
        help="Emit even when the sweep measured a busy host "
        "(other processes took the engines' cores), e.g. kvcal emit-config RUN --allow-disturbed.",
    ),
    ttft_penalty_ms: Optional[float] = typer.Option(
        None,
        "--ttft-penalty-ms",
        help="work-range (required), json, helm: the TTFT a request may lose by migrating to the long class "
        "(the affinity filter's maxTTFTPenaltyMs, an operator's choice), e.g. --ttft-penalty-ms 3500.",
    ),
    max_model_len: Optional[int] = typer.Option(
        None,
        "--max-model-len",
        help="work-range, json, helm: the model's longest context, the work-range labels' MAX (default: the run's).",
    ),
    output: Optional[Path] = typer.Option(
        None,
        "--output",
        "-o",
        help="Write the artifact to FILE instead of stdout: whole, or (a refusal, a failure) the previous file "
        "left as it was; - for stdout.",
    ),
) -> None:
    """Emit minCachedTokenDelta (where pulling pays on mean costs) and peakPrefillThroughput as router config, engine settings, and more.

    How each number was reached is printed on stderr; only the artifact goes to stdout.
    """  # noqa: E501 - help text, printed by --help as written
    from kvcal.emit.options import EmitOptions  # the settings model: built only when the command runs (fast --help)
    from kvcal.files.writing import check_output, write_file

    if output is not None and in_place and not diff:
        raise InputError("--in-place writes the values file itself; drop --output (or add --diff to keep the diff)")
    check_output(output, "--output", [input_path, values, deltas])

    options = EmitOptions(
        format=format,
        rule=rule,
        margin=margin,
        deltas=deltas,
        block_size=block_size,
        values=values,
        in_place=in_place,
        diff=diff,
        add_plugin=add_plugin,
        prefix_match_producer=prefix_match_producer,
        prefill_profile=prefill_profile,
        deployment=deployment,
        transport=transport,
        p2p_port=p2p_port,
        cpu_bytes_to_use=byte_size(cpu_bytes_to_use, "--cpu-bytes-to-use"),
        model=model,
        chunk_size=chunk_size,
        with_costmodel=with_costmodel,
        allow_extrapolation=allow_extrapolation,
        allow_disturbed=allow_disturbed,
        class_mix=parse_class_mix(class_mix),
        ttft_penalty_ms=ttft_penalty_ms,
        max_model_len=max_model_len,
    )
    from kvcal.emit.formats import emit  # the fit stack loads only when the command runs (fast --help)

    result = emit(input_path, options)
    for line in result.notes:
        info(f"kvcal: {line}")
    for line in result.warnings:
        warn(line)
    if output is not None:
        write_file(output, result.stdout, f"--output {output}")  # only now: a refused emit leaves the old file
        info(f"kvcal: wrote {output}")
    elif result.stdout:
        typer.echo(result.stdout, nl=False)


def register(app: typer.Typer) -> None:
    app.command("emit-config", epilog=EPILOG)(emit_config)
