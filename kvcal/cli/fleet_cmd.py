"""`kvcal fleet`: what a threshold does to a whole fleet under a workload, simulated from the calibration."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from kvcal.cli.help_tables import (
    FLEET_FALLBACKS,  # --thresholds' word for the spread, without pydantic
    JSON_SCHEMAS,  # what --json prints, declared by its record
)
from kvcal.cli.help_tables import FLEET_SETTINGS as FLEET  # FleetConfig's defaults and bounds, without pydantic
from kvcal.cli.help_tables import WORKLOAD_KEYS as KEYS_HELP  # the workload record's keys, without pydantic
from kvcal.cli.options import float_list, int_list
from kvcal.cli.output import info, stdout, warn, warn_each
from kvcal.fleet.help_facts import WORKER_MIB

PODS, SEEDS, JOBS = FLEET["pods"], FLEET["seeds"], FLEET["jobs"]
AUTO = FLEET_FALLBACKS["thresholds"]

EPILOG = f"""The model: N engines with continuous batching (a prefill token budget per step), each
with a prefix cache and an optional CPU tier (LRU eviction), behind the router's prefix- and
queue-aware pod choice and its P2P rule (pull when the best peer holds at least the threshold
more cached tokens). Costs come from FIT's idle curves (and its costModel's S and Q when it
has one). docs/fleet.md says what the model leaves out and when not to trust it.

{KEYS_HELP}

Examples:

  kvcal fleet runs/r --workload docs/examples/fleet-workload.yaml --pods 8 --thresholds {AUTO} --json

  kvcal fleet runs/r/fit.json --workload w.yaml --rate 4 --seeds 5 --resamples 20

  kvcal fleet runs/r --workload w.yaml --loads 1,2,4,8 --plot fleet.png

  kvcal fleet runs/r --workload w.yaml --seeds 50 --max-simulated-requests 100000000

  kvcal fleet runs/r --workload w.yaml --seeds 10 --resamples 20 --jobs 16

  kvcal fleet runs/r --workload w.yaml --seeds 10 --resamples 100 --ray auto   # from a pod of a Ray cluster

The study's size (runs, simulated requests, time and memory) is printed on stderr before
the first run; a study over --max-simulated-requests is refused (exit 2) before it starts.
The recommended threshold is the simulated one with the highest mean goodput, ties (a
paired comparison over the same seeds) going to the lowest TTFT p90, then to the one
nearest the idle threshold; no margin is added (docs/fleet.md)."""


def fleet(
    fit_path: Path = typer.Argument(
        ..., metavar="FIT", help="A fit.json, or a run folder (fitted on the fly if it has none)."
    ),
    workload: Path = typer.Option(
        ..., "--workload", "-w", help="Workload YAML (keys below; docs/examples/fleet-workload.yaml)."
    ),
    pods: int = typer.Option(PODS["default"], "--pods", help=f"Engines in the fleet ({PODS['ge']}-{PODS['le']})."),
    thresholds: str = typer.Option(
        AUTO,
        "--thresholds",
        help="minCachedTokenDelta values to try (comma-separated "
        f"block multiples, or 1, the plugin's default; a repeat is simulated once), or {AUTO}: a spread around the "
        "fit's break-even.",
    ),
    rate: Optional[float] = typer.Option(
        None, "--rate", help="New sessions per second: replaces the workload's arrival."
    ),
    loads: Optional[str] = typer.Option(
        None, "--loads", help="Also run every policy at each of these rates (sessions/s), for the plot."
    ),
    duration: Optional[float] = typer.Option(
        None, "--duration", help="Simulated seconds: replaces the workload's duration_s."
    ),
    seeds: int = typer.Option(
        SEEDS["default"],
        "--seeds",
        help=f"Simulation seeds per policy ({SEEDS['ge']}-{SEEDS['le']}; the paired comparison of thresholds needs 2 "
        "or more).",
    ),
    resamples: int = typer.Option(
        FLEET["resamples"]["default"],
        "--resamples",
        help="The calibration's bootstrap resamples per seed (0: the point fit).",
    ),
    max_requests: int = typer.Option(
        FLEET["max_simulated_requests"]["default"],
        "--max-simulated-requests",
        help="Refuse a study that would simulate more requests than this (all runs "
        "together; the size is printed before the first run). Raise it to allow one.",
    ),
    plot: Optional[Path] = typer.Option(
        None, "--plot", help="Write TTFT p90 and goodput against threshold and load (.png/.svg)."
    ),
    as_json: bool = typer.Option(False, "--json", help=f"Print the result as JSON (schema {JSON_SCHEMAS['fleet']})."),
    jobs: Optional[int] = typer.Option(
        None,
        "--jobs",
        "-j",
        help=f"Worker processes for the runs, {JOBS['ge']}-{JOBS['le']} (default: the cores kvcal may use); each holds "
        f"about {WORKER_MIB} MiB, counted in the study's memory printed first. The result is the same for any N.",
    ),
    ray: Optional[str] = typer.Option(
        None,
        "--ray",
        metavar="ADDRESS",
        help="Run the runs as Ray tasks: auto (the "
        "cluster this machine is in), local (start one here) or an address "
        "(ray://HOST:10001). Needs pip install 'kvcal\\[ray]'; same result as --jobs.",
    ),
) -> None:
    """Simulate a fleet under a workload for each P2P threshold: goodput, TTFT, queues, and the threshold to use."""
    from kvcal.fleet.settings import FleetConfig

    chosen = None if thresholds.strip().lower() == AUTO else int_list(thresholds, "--thresholds")
    config = FleetConfig(
        fit_path=fit_path,
        workload_path=workload,
        pods=pods,
        thresholds=chosen,
        rate=rate,
        loads=float_list(loads, "--loads"),
        duration_s=duration,
        seeds=seeds,
        resamples=resamples,
        max_simulated_requests=max_requests,
        jobs=jobs,
        ray_address=ray,
        plot=plot,
    )  # first: a bad flag is refused before the heavy imports
    from kvcal.emit.formats import load_input
    from kvcal.files.reading import check_input
    from kvcal.files.writing import check_output, claim_stdout
    from kvcal.fleet.run import check_arguments, run_fleet

    check_input(workload, f"workload file {workload}")
    if as_json:
        claim_stdout("--json")
    if plot is not None:
        check_output(plot, "--plot", [fit_path, workload])
    checked = check_arguments(config)  # before the fit: a run folder without one is fitted now, which takes a while
    result = run_fleet(config, load_input(fit_path), _progress(), checked, tick=_tick(), announce=info)
    if plot is not None:
        from kvcal.fleet.plot import write_plot

        info(f"kvcal: wrote {write_plot(result, plot)}")
    if as_json:
        typer.echo(result.model_dump_json(indent=2, by_alias=True))
        warn_each(result.warnings)  # stderr too: a step that keeps stdout for the JSON still shows them
        return
    _print(result)


PROGRESS_EVERY_S = 2.0


def _progress():
    started = time.monotonic()
    last = [started]

    def report(done: int, total: int, label: str) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_EVERY_S or (done == total and now - started >= PROGRESS_EVERY_S):
            last[0] = now
            info(f"kvcal: fleet run {done}/{total} ({label}), {now - started:.0f} s")

    return report


def _tick():
    """Inside a long run: how far its simulated time has got, every few seconds of wall time."""
    last = [time.monotonic()]

    def report(label: str, at_s: float, duration_s: float) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_EVERY_S:
            last[0] = now
            info(f"kvcal: fleet run ({label}): simulated {at_s:,.0f} of {duration_s:,.0f} s")

    return report


def _print(r) -> None:  # r: kvcal.fleet.result.FleetResult
    load = f"{r.rate:g} sessions/s" if r.rate else (f"{r.concurrency} sessions" if r.concurrency else "the trace")
    stdout.print(f"fleet: {r.pods} pods, {load}, {r.duration_s:g} s, {r.seeds} seeds x {max(1, r.resamples)} cost sets")
    stdout.print(
        f"{'policy':<12}{'threshold':>10}{'goodput/s':>11}{'TTFT p50':>10}{'p90':>10}{'p99':>10}"
        f"{'queue p90':>10}{'pulled':>8}"
    )
    for row in r.rows:
        stdout.print(
            f"{row.policy:<12}{row.threshold if row.threshold is not None else '-':>10}"
            f"{row.goodput_rps.value:>11.2f}{row.ttft_p50_ms.value:>10.1f}{row.ttft_p90_ms.value:>10.1f}"
            f"{row.ttft_p99_ms.value:>10.1f}{row.prefill_queue_p90.value:>10.1f}{row.pull_share.value:>8.1%}"
        )
    stdout.print(f"best threshold: {r.best_threshold} (tied with it: {r.best_threshold_ci}); rule: {r.best_rule}")
    stdout.print(f"recommended threshold: {r.recommended_threshold}; idle threshold: {r.idle_threshold}")
    for step in r.recommended_steps:
        stdout.print(f"  {step}")
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
