"""`kvcal observe`: a deployed fleet's own metrics from Prometheus, checked against the calibration and kvcal fleet."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from kvcal.cli.output import stdout
from kvcal.terminal_text import json_visible, visible

EPILOG = """Reads the engines' own counters from Prometheus' HTTP API over the window (raw samples; a
counter that resets when a pod restarts is counted on from zero): the share of prompt
tokens pulled from a peer, found in the pod's own cache and computed; bytes moved per
pulled token; TTFT p50/p90/p99 (with the histogram bucket each lies in); queue p90;
requests per second. Per pod (its pod label, else its instance) and fleet-wide. A metric
the fleet does not expose is named, never shown as 0. docs/observe.md lists the queries.

With --fit: bytes per pulled token against the calibration's KV bytes per token. With
--fleet (a kvcal fleet --json result) and --deployed or --values naming its row: TTFT
p50/p90, the share of prompt tokens pulled and queue p90 against that row's intervals.
Exit 0 when every check is ok or unknown, 1 when one is outside (with what to measure
again), 2 for an input error (a bad URL, a server that is not Prometheus), 4 when the
server cannot be reached or does not answer in time.

Examples:

  kvcal observe --prometheus http://prometheus:9090 --since 15m --json

  kvcal observe --prometheus http://localhost:9090 --selector 'namespace="llm-d"' --fit runs/r/fit.json

  kvcal observe --prometheus http://localhost:9090 --start 2026-12-07T04:00:00Z --end 2026-12-07T05:00:00Z \\
      --fleet fleet.json --values values.yaml"""


def observe(
    prometheus: str = typer.Option(
        ..., "--prometheus", help="The Prometheus server's base URL, e.g. http://prometheus:9090."
    ),
    since: Optional[str] = typer.Option(
        None, "--since", help="The window: this long up to now (15m, 1h30m, 2d; default 15m)."
    ),
    start: Optional[str] = typer.Option(
        None, "--start", help="The window's start: RFC 3339 or unix seconds (with --end)."
    ),
    end: Optional[str] = typer.Option(None, "--end", help="The window's end: RFC 3339 or unix seconds (with --start)."),
    selector: Optional[str] = typer.Option(
        None, "--selector", help='Label matchers added to every query, e.g. \'namespace="llm-d",model_name="qwen"\'.'
    ),
    fit: Optional[Path] = typer.Option(
        None,
        "--fit",
        metavar="FIT",
        help="A fit.json or run folder: check bytes per pulled token against its KV bytes per token.",
    ),
    fleet: Optional[Path] = typer.Option(
        None,
        "--fleet",
        metavar="FLEET_JSON",
        help="A kvcal fleet --json result: check TTFT, pull share and queue against the deployed threshold's row.",
    ),
    deployed: Optional[int] = typer.Option(
        None, "--deployed", metavar="THRESHOLD", help="The minCachedTokenDelta in production (names the --fleet row)."
    ),
    values: Optional[Path] = typer.Option(
        None,
        "--values",
        metavar="FILE",
        help="Read the deployed minCachedTokenDelta from this Helm values file instead.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON (schema kvcal.observe/1)."),
) -> None:
    """Read a deployed fleet's pulls, bytes, TTFT and queues from Prometheus and check them against kvcal."""
    from kvcal.observe.run import FleetOutsidePrediction, ObserveConfig, run_observe

    config = ObserveConfig(
        prometheus=prometheus,
        since=since,
        start=start,
        end=end,
        selector=selector,
        fit_path=fit,
        fleet_path=fleet,
        deployed=deployed,
        values_path=values,
    )
    result = run_observe(config)
    if as_json:
        typer.echo(json_visible(result.model_dump_json(indent=2, by_alias=True)))
    else:
        _print(result)
    outside = [c for c in result.checks if c.verdict == "outside"]
    if outside:
        raise FleetOutsidePrediction(
            f"{', '.join(c.name for c in outside)} outside the prediction: " + "; ".join(result.remeasure)
        )


def _shown(figure, scale: float = 1.0, form: str = ".3g") -> str:
    return "-" if figure.value is None else f"{figure.value * scale:{form}}"


def _line(text: str) -> None:
    stdout.print(visible(text))


def _print(r) -> None:  # r: kvcal.observe.result.ObserveResult
    """The table and its lines; pod names, notes and reasons quote the server: each line escaped, one a record."""
    _line(f"window {r.window.start} .. {r.window.end}, {len(r.pods)} pods, Prometheus {r.prometheus}")
    _line(
        f"{'pod':<28}{'pulled':>8}{'local':>8}{'computed':>9}{'B/token':>9}{'TTFT p50':>10}{'p90':>9}"
        f"{'p99':>9}{'queue p90':>10}{'req/s':>8}"
    )
    for name, f in [(p.name, p) for p in r.pods] + [("fleet", r.fleet)]:
        _line(
            f"{visible(name)[:27]:<28}{_shown(f.pull_share, 100, '.1f'):>8}{_shown(f.local_hit_share, 100, '.1f'):>8}"
            f"{_shown(f.computed_share, 100, '.1f'):>9}{_shown(f.bytes_per_pulled_token, 1, '.0f'):>9}"
            f"{_shown(f.ttft_p50_ms, 1, '.1f'):>10}{_shown(f.ttft_p90_ms, 1, '.1f'):>9}"
            f"{_shown(f.ttft_p99_ms, 1, '.1f'):>9}{_shown(f.queue_p90, 1, '.1f'):>10}"
            f"{_shown(f.requests_per_s, 1, '.3g'):>8}"
        )
    _line("shares in % of prompt tokens; TTFT in ms")
    for name, bucket in r.ttft_buckets_ms.items():
        _line(
            f"{name}: within the histogram bucket {bucket[0]:g} .. "
            f"{'+Inf' if bucket[1] is None else format(bucket[1], 'g')} ms"
        )
    for key, figure in r.fleet.model_dump().items():
        if figure["missing"]:
            _line(f"missing {key}: {figure['missing']}")
    for check in r.checks:
        _line(f"check {check.name}: {check.verdict} ({check.reason}; tolerance: {check.tolerance})")
    for line in r.remeasure:
        _line(f"measure again: {line}")
    for note in r.notes:
        _line(f"note: {note}")


def register(app: typer.Typer) -> None:
    app.command("observe", epilog=EPILOG)(observe)
