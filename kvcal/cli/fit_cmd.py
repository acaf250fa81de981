"""`kvcal fit`: fit cost curves to a sweep, find the break-even and how sure we are of it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional, cast

import typer
from rich import box
from rich.table import Table

from kvcal.cli.help_tables import FIT_CONFIG, FIT_FALLBACKS, FIT_SETTINGS  # the models' defaults, without pydantic
from kvcal.cli.output import print_sanity, print_warning, stdout, warn, warn_each
from kvcal.cli.render_costmodel import render_cost_model
from kvcal.cli.render_links import render_links

if TYPE_CHECKING:  # annotations only: the fit's records (pandas-free) load when the command runs
    from rich.console import JustifyMethod

    from kvcal.records.fit import CurveFit, FitResult

EPILOG = """Examples:

  kvcal fit results/llama8b-rdma            # a run folder; writes results/llama8b-rdma/fit.json

  kvcal fit probes.csv --confidence 0.95 --seed 7 --output fit.json

  kubectl logs job/calibrate-min-cached-token-delta > job.txt && kvcal fit job.txt --json

  kvcal fit job.txt --model openai/gpt-oss-120b --transport p2p-tier --block-size 64

  kvcal fit results/loaded-run --busy-queue-threshold 2      # a --load-states run: also fits the costModel

  kvcal fit --per-request per_request_lifecycle_metrics.json --epp-log epp.log --idle results/idle-run
"""

UNITS = (
    ("intercept_ms", "floor, ms", "{:.2f}"),
    ("per_token_us", "us/token", "{:.3f}"),
    ("per_token2_ns", "ns/token^2", "{:.4g}"),
)


def fit(
    input: Optional[Path] = typer.Argument(
        None,
        show_default=False,
        help="A run folder, a probe CSV (prefix_tokens,leg,ttft_ms[,rep,bytes_moved,pair,link_class]: "
        "per class when tagged) or the llm-d calibration Job's table.",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print fit.json to stdout and nothing else."),
    confidence: float = typer.Option(
        FIT_SETTINGS["confidence"]["default"],
        "--confidence",
        help=f"Level of the bootstrap intervals, between {FIT_SETTINGS['confidence']['gt']} and "
        f"{FIT_SETTINGS['confidence']['lt']}.",
    ),
    seed: int = typer.Option(
        FIT_SETTINGS["seed"]["default"], "--seed", help="Seed of the bootstrap; the same seed gives the same intervals."
    ),
    output: Path | None = typer.Option(
        None,
        "--output",
        "-o",
        show_default=False,
        help="Where to write fit.json (default: <run>/fit.json, or <input>.fit.json beside a file).",
    ),
    resamples: int = typer.Option(
        FIT_SETTINGS["n_resamples"]["default"], "--resamples", help="Bootstrap resamples (0: no intervals)."
    ),
    model: str | None = typer.Option(
        None,
        "--model",
        show_default=False,
        help="Model the probes measured, recorded "
        "in fit.json's setup (a CSV or Job log records none), e.g. openai/gpt-oss-120b.",
    ),
    transport: str | None = typer.Option(
        None,
        "--transport",
        show_default=False,
        help="Transport the pulls used (p2p-tier or nixl-pd), recorded in the setup; a CSV or Job log only.",
    ),
    block_size: int | None = typer.Option(
        None,
        "--block-size",
        show_default=False,
        help="KV block size of the "
        "engines, recorded in the setup (lengths are checked against it); a CSV or Job log only.",
    ),
    busy_queue_threshold: Optional[int] = typer.Option(
        None,
        "--busy-queue-threshold",
        min=FIT_CONFIG["busy_queue_threshold"]["ge"],
        help="Cost model: a pod is busy when its measured waiting queue is at least this; default: the run's, else "
        f"{FIT_FALLBACKS['busy_queue_threshold']}.",
    ),
    per_request: Optional[list[Path]] = typer.Option(
        None,
        "--per-request",
        help="inference-perf per_request_lifecycle_metrics.json "
        "(repeatable): fit the costModel to production data instead of a run.",
    ),
    epp_log: Optional[Path] = typer.Option(
        None, "--epp-log", help="The router's log with 'p2p decision' lines (with --per-request)."
    ),
    idle: Optional[Path] = typer.Option(
        None, "--idle", help="Idle fit.json or run folder giving P and T (with --per-request)."
    ),
) -> None:
    """Fit recompute (affine or quadratic) and pull (affine) costs and report the break-even with its interval.

    Example: kvcal fit results/my-run --confidence 0.9 --seed 0
    """
    from kvcal.fit.settings import FitConfig, fit_settings, run_fit

    config = FitConfig(
        input=input,
        output=output,
        model=model,
        transport=transport,
        block_size=block_size,
        settings=fit_settings(confidence=confidence, seed=seed, n_resamples=resamples),
        busy_queue_threshold=busy_queue_threshold,
        per_request=per_request or [],
        epp_log=epp_log,
        idle=idle,
    )  # first: a bad value is refused before any file is read
    from kvcal.files.writing import check_output, claim_stdout
    from kvcal.fit import dumps

    if json_out:
        claim_stdout("--json")
    check_output(output, "--output", config.inputs, fit_json=True)
    if input is not None:
        _warn_if_sweep_alive(input)
    result, written = run_fit(config)
    if json_out:
        print(dumps(result))
        warn_each(result.warnings)
        return
    from kvcal.fit.guards import findings_for_stderr

    for line in findings_for_stderr(result):  # the report below goes to stdout; these change what was fitted
        warn(line)
    render(result)
    stdout.print(f"wrote {written}")


def _warn_if_sweep_alive(path: Path) -> None:
    """A run whose sweep still holds its lock is fitted as far as it got; say so, with how far."""
    from kvcal.records.run_folder import RunFolder, completed_probe_ids
    from kvcal.sweep.lock import live_sweep

    if not RunFolder.is_run_folder(path):
        return
    run = RunFolder(path)
    plan = {p.probe_id for p in run.manifest().plan}
    note = live_sweep(run.path, len(plan), len(plan & completed_probe_ids(run.read_probes())))
    if note is not None:
        warn(note)  # stderr: --json keeps stdout for fit.json


def _curves_table(result: FitResult) -> Table:
    """Each leg's coefficients with units, intervals and noise."""
    level = f"{result.confidence:.0%}"
    table = Table(title=f"kvcal fit: {result.source.path or 'input'}", title_justify="left", box=box.SIMPLE_HEAD)
    for name, justify in (
        ("leg", "left"),
        ("model", "left"),
        ("coefficient", "left"),
        ("value", "right"),
        (f"{level} interval", "right"),
        ("noise", "right"),
    ):
        table.add_column(name, justify=cast("JustifyMethod", justify))
    for leg in ("recompute", "pull"):
        curve: CurveFit = getattr(result, leg)
        noise = f"{curve.noise_cv:.1%}" if curve.noise_cv is not None else "-"
        rows = UNITS if curve.model == "quadratic" else UNITS[:2]
        for i, (name, header, fmt) in enumerate(rows):
            ci = curve.ci.get(name)
            interval = f"{fmt.format(ci[0])}-{fmt.format(ci[1])}" if ci and None not in ci else "-"
            table.add_row(
                leg if i == 0 else "",
                curve.model if i == 0 else "",
                header,
                fmt.format(getattr(curve, name)),
                interval,
                noise if i == 0 else "",
                end_section=i == len(rows) - 1,
            )
    return table


def render(result: FitResult) -> None:
    """The human report: coefficients with units and intervals, the chosen models, the break-even, warnings."""
    stdout.print(_curves_table(result))
    stdout.print(f"break-even: {_break_even(result)}")
    stdout.print(
        f"status: {result.status}"
        + ("  (extrapolated)" if result.extrapolated else "")
        + f"; measured {result.measured_range[0]}-{result.measured_range[1]} tokens, {result.n_probes} probes"
        + (f", {result.n_invalid_excluded} invalid excluded" if result.n_invalid_excluded else "")
    )
    if result.smallest_pull_win_tokens is not None:
        stdout.print(f"smallest measured length where the pull's median won: {result.smallest_pull_win_tokens} tokens")
    if result.pull_won_from_tokens is not None:
        stdout.print(
            f"the pull's median won at every measured length from {result.pull_won_from_tokens} tokens up "
            "(emit-config's floor)"
        )
    if result.pull_bandwidth_gbps is not None:
        stdout.print(f"pull bandwidth at the longest length: {result.pull_bandwidth_gbps:.2f} GB/s")
    side = result.engine_side
    if side is not None and (side.pull_ms_per_token or side.prefill_ms_per_token):
        parts = [
            f"{leg} {cost.value * 1e3:.4g} us/token ({cost.samples} probes)"
            for leg, cost in (("pull transfer", side.pull_ms_per_token), ("prefill", side.prefill_ms_per_token))
            if cost is not None
        ]
        stdout.print(f"as the engines counted it: {', '.join(parts)} (kvcal observe compares production with these)")
    stdout.print(f"recompute model: {result.recompute.selection}")
    render_links(result)
    boot = result.bootstrap
    if boot.no_crossover_share is not None:
        stdout.print(
            f"bootstrap: {boot.n_resamples} resamples ({boot.method}, seed {boot.seed}); "
            f"no crossover in {boot.no_crossover_share:.1%}"
        )
    for line in result.warnings:
        print_warning(line)
    if result.cost_model is not None:
        render_cost_model(result.cost_model)
    from kvcal.estimate.sanity import sanity_for_fit

    print_sanity(sanity_for_fit(result)[1])


def _break_even(result: FitResult) -> str:
    if result.break_even_tokens is None:
        return "none (the fitted pull never catches up with recompute)"
    text = f"{result.break_even_tokens:.0f} tokens"
    if result.break_even_ci:
        text += f" ({result.confidence:.0%} interval {result.break_even_ci[0]:.0f}-{result.break_even_ci[1]:.0f})"
    elif result.bootstrap.break_even_ci_bounds:
        low = result.bootstrap.break_even_ci_bounds[0]
        text += f" ({result.confidence:.0%} interval from {low:.0f}, open above)" if low is not None else ""
    return text


def register(app: typer.Typer) -> None:
    app.command("fit", epilog=EPILOG)(fit)
