"""`kvcal fleet`: what a threshold does to a whole fleet under a workload, simulated from the calibration."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from kvcal.cli.options import float_list, int_list
from kvcal.cli.output import info, stdout, warn, warn_each
from kvcal.errors import InputError
from kvcal.fleet.workload import KEYS_HELP

EPILOG = f"""The model: N engines with continuous batching (a prefill token budget per step), each
with a prefix cache and an optional CPU tier (LRU eviction), behind the router's prefix- and
queue-aware pod choice and its P2P rule (pull when the best peer holds at least the threshold
more cached tokens). Costs come from FIT's idle curves (and its costModel's S and Q when it
has one). docs/fleet.md says what the model leaves out and when not to trust it.

{KEYS_HELP}

Examples:

  kvcal fleet runs/r --workload docs/examples/fleet-workload.yaml --pods 8 --thresholds auto --json

  kvcal fleet runs/r/fit.json --workload w.yaml --rate 4 --seeds 5 --resamples 20

  kvcal fleet runs/r --workload w.yaml --loads 1,2,4,8 --plot fleet.png"""


def fleet(
    fit_path: Path = typer.Argument(..., metavar="FIT", help="A fit.json, or a run folder (fitted on the fly if it has none)."),
    workload: Path = typer.Option(..., "--workload", "-w", help="Workload YAML (keys below; docs/examples/fleet-workload.yaml)."),
    pods: int = typer.Option(8, "--pods", help="Engines in the fleet."),
    thresholds: str = typer.Option("auto", "--thresholds", help="minCachedTokenDelta values to try (comma-separated block "
                                   "multiples), or auto: a spread around the fit's break-even."),
    rate: Optional[float] = typer.Option(None, "--rate", help="New sessions per second: replaces the workload's arrival."),
    loads: Optional[str] = typer.Option(None, "--loads", help="Also run every policy at each of these rates (sessions/s), for the plot."),
    duration: Optional[float] = typer.Option(None, "--duration", help="Simulated seconds: replaces the workload's duration_s."),
    seeds: int = typer.Option(3, "--seeds", help="Simulation seeds per policy (the interval covers them)."),
    resamples: int = typer.Option(0, "--resamples", help="The calibration's bootstrap resamples per seed (0: the point fit)."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Write TTFT p90 and goodput against threshold and load (.png/.svg)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON (schema kvcal.fleet/1)."),
) -> None:
    """Simulate a fleet under a workload for each P2P threshold: goodput, TTFT, queues, and the threshold to use."""
    from kvcal.emit.formats import load_input
    from kvcal.fleet.run import FleetConfig, check_arguments, run_fleet
    from kvcal.outputs import check_output
    from kvcal.userfiles import check_input

    if duration is not None and not 0 < duration <= 86_400:
        raise InputError(f"--duration must lie within (0, 86400] seconds, got {duration:g}")
    check_input(workload, f"workload file {workload}")
    if plot is not None:
        check_output(plot, "--plot", [fit_path, workload])
    chosen = None if thresholds.strip().lower() == "auto" else int_list(thresholds, "--thresholds")
    config = FleetConfig(fit_path=fit_path, workload_path=workload, pods=pods, thresholds=chosen, rate=rate,
                         loads=float_list(loads, "--loads"), duration_s=duration, seeds=seeds, resamples=resamples)
    checked = check_arguments(config)  # before the fit: a run folder without one is fitted now, which takes a while
    result = run_fleet(config, load_input(fit_path), _progress(), checked)
    if plot is not None:
        from kvcal.fleet.plot import write_plot

        info(f"kvcal: wrote {write_plot(result, plot)}")
    if as_json:
        typer.echo(result.model_dump_json(indent=2, by_alias=True))
        warn_each(result.warnings)  # stderr too: a step that keeps stdout for the JSON still shows them
        return
    _print(result)


def _progress():
    started = time.monotonic()
    last = [started]

    def report(done: int, total: int, label: str) -> None:
        now = time.monotonic()
        if now - last[0] >= 2.0 or (done == total and now - started >= 2.0):
            last[0] = now
            info(f"kvcal: fleet run {done}/{total} ({label}), {now - started:.0f} s")
    return report


def _print(r) -> None:  # r: kvcal.fleet.result.FleetResult
    load = f"{r.rate:g} sessions/s" if r.rate else (f"{r.concurrency} sessions" if r.concurrency else "the trace")
    stdout.print(f"fleet: {r.pods} pods, {load}, {r.duration_s:g} s, {r.seeds} seeds x {max(1, r.resamples)} cost sets")
    stdout.print(f"{'policy':<12}{'threshold':>10}{'goodput/s':>11}{'TTFT p50':>10}{'p90':>10}{'p99':>10}"
                 f"{'queue p90':>10}{'pulled':>8}")
    for row in r.rows:
        stdout.print(f"{row.policy:<12}{row.threshold if row.threshold is not None else '-':>10}"
                     f"{row.goodput_rps.value:>11.2f}{row.ttft_p50_ms.value:>10.1f}{row.ttft_p90_ms.value:>10.1f}"
                     f"{row.ttft_p99_ms.value:>10.1f}{row.prefill_queue_p90.value:>10.1f}{row.pull_share.value:>8.1%}")
    stdout.print(f"best threshold: {r.best_threshold} (interval {r.best_threshold_ci}); rule: {r.best_rule}")
    stdout.print(f"recommended threshold: {r.recommended_threshold} (emit-config's rule); idle threshold: {r.idle_threshold}")
    if r.recommended_reason:
        stdout.print(f"why they differ: {r.recommended_reason}")
    if r.idle_threshold_reason:
        stdout.print(f"no idle threshold: {r.idle_threshold_reason}")
    for note in r.notes:
        stdout.print(f"note: {note}")
    for line in r.warnings:
        warn(line)


def register(app: typer.Typer) -> None:
    app.command("fleet", epilog=EPILOG)(fleet)
