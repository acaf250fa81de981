"""`kvcal observe`: a deployed fleet's own metrics from Prometheus, checked against the calibration and kvcal fleet."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from kvcal.cli.help_tables import (
    JSON_SCHEMAS,  # what --json prints, declared by its record
    OBSERVE_FALLBACKS,  # observe/run.py's DEFAULT_SINCE, without the observe stage
)
from kvcal.cli.output import info, stdout
from kvcal.terminal_text import json_visible, visible

EPILOG = """Reads the engines' own counters from Prometheus' HTTP API over the window (raw
samples; a counter that resets when a pod restarts is counted on from zero): the share of prompt
tokens pulled from a peer, found in the pod's own cache and computed; bytes moved per
pulled token; TTFT p50/p90/p99 (with the histogram bucket each lies in); queue p90;
requests per second; and what a pull and a prefill cost the engines: transfer time per pulled
token (the wire's share, not the TTFT), bytes per second of transfer, the pulls' failure rate,
prefill time per computed token. Per pod (its pod label, else its instance) and fleet-wide. A
metric the fleet does not expose is named, never shown as 0. docs/observe.md lists the queries.

With --fit: bytes per pulled token against the calibration's KV bytes per token, and each
pod's pull and prefill cost against the costs the engines counted during the calibration
(fit.json's engine_side), with a tolerance from the counts, and its pulls' failure rate. With
--fleet (a kvcal fleet --json result) and --deployed or --values naming its row: TTFT
p50/p90, the share of prompt tokens pulled and queue p90 against that row's intervals. With
--propose: the threshold those costs imply, its interval and what keeping --deployed costs.
Exit 0 when every check is ok or unknown, 1 when one is outside (naming the pod, the leg and
what to measure again; a proposal is printed first), 2 for an input error (a bad URL, a
server that is not Prometheus), 3 when --propose cannot propose (too few pulls, or no P2P
is cheapest on the costs production implies), 4 when the server cannot be reached or does
not answer in time.

With --dashboard FILE: a Grafana dashboard (JSON model) with a panel per figure, per pod and
fleet-wide, each the PromQL of the series observe reads, and a Prometheus data source and a
label-matcher variable; what --fit and --fleet's row say as reference lines. It needs no
--prometheus; docs/observe.md says how to import it.

Examples:

  kvcal observe --prometheus http://prometheus:9090 --since 15m --json

  kvcal observe --prometheus http://localhost:9090 --selector 'namespace="llm-d"' --fit runs/r/fit.json

  kvcal observe --prometheus http://localhost:9090 --start 2026-12-07T04:00:00Z --end 2026-12-07T05:00:00Z \\
      --fleet fleet.json --values values.yaml

  kvcal observe --prometheus http://localhost:9090 --since 1h --fit runs/r --values values.yaml \\
      --propose-fit proposed.json && kvcal emit-config proposed.json --format helm --values values.yaml

  kvcal observe --dashboard kvcal.json --selector 'namespace="llm-d"' --fit runs/r \\
      --fleet fleet.json --values values.yaml"""


def observe(
    prometheus: Optional[str] = typer.Option(
        None,
        "--prometheus",
        help="The Prometheus server's base URL, e.g. http://prometheus:9090 (needed unless --dashboard is given).",
    ),
    since: Optional[str] = typer.Option(
        None, "--since", help=f"The window: this long up to now (15m, 1h30m, 2d; default {OBSERVE_FALLBACKS['since']})."
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
        None,
        "--deployed",
        metavar="THRESHOLD",
        help="The minCachedTokenDelta in production (names the --fleet row; --propose sets the proposal beside it).",
    ),
    values: Optional[Path] = typer.Option(
        None,
        "--values",
        metavar="FILE",
        help="Read the deployed minCachedTokenDelta from this Helm values file instead.",
    ),
    propose: bool = typer.Option(
        False,
        "--propose",
        help="With --fit: the threshold the window's pull and prefill costs imply (the fit moved to them, decided as "
        "emit-config decides), its interval and what it is worth against the deployed one; exit 3 with too few pulls.",
    ),
    propose_fit: Optional[Path] = typer.Option(
        None,
        "--propose-fit",
        metavar="FILE",
        help="Write the fit moved to production costs (a fit.json emit-config renders); implies --propose.",
    ),
    as_json: bool = typer.Option(False, "--json", help=f"Print the result as JSON (schema {JSON_SCHEMAS['observe']})."),
    dashboard: Optional[Path] = typer.Option(
        None,
        "--dashboard",
        metavar="FILE",
        help="Write the Grafana dashboard of these figures (- for stdout), the fit's and the fleet row's figures as "
        "reference lines; queries nothing (with --prometheus, observe runs too).",
    ),
) -> None:
    """Read a deployed fleet's pulls, bytes, TTFT and queues from Prometheus and check them against kvcal."""
    from kvcal.observe.run import ObserveConfig, exit_error, run_observe

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
        propose=propose,
        propose_fit=propose_fit,
    )
    if dashboard is not None:
        from kvcal.files.writing import is_stdout
        from kvcal.observe.dashboard import write_dashboard

        panels = write_dashboard(config, dashboard, as_json=as_json)
        if not is_stdout(dashboard):
            info(f"kvcal: wrote the Grafana dashboard ({panels} panels) to {dashboard}")
        if prometheus is None:
            return
    result = run_observe(config)
    if as_json:
        typer.echo(json_visible(result.model_dump_json(indent=2, by_alias=True)))
    else:
        _print(result)
    error = exit_error(result)
    if error is not None:
        raise error


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
    _print_costs(r)
    for check in r.checks:
        where = f" on {check.pod}" if check.pod else ""
        _line(f"check {check.name}{where}: {check.verdict} ({check.reason}; tolerance: {check.tolerance})")
    for line in r.remeasure:
        _line(f"measure again: {line}")
    for note in r.notes:
        _line(f"note: {note}")
    _print_proposal(r.proposal)


def _print_costs(r) -> None:
    _line(f"{'pod':<28}{'pull us/token':>14}{'pull MB/s':>11}{'pull failed':>12}{'prefill us/token':>17}")
    for name, f in [(p.name, p) for p in r.pods] + [("fleet", r.fleet)]:
        _line(
            f"{name[:27]:<28}{_shown(f.pull_ms_per_token, 1e3, '.4g'):>14}{_shown(f.pull_bytes_per_s, 1e-6, '.4g'):>11}"
            f"{_shown(f.pull_failure_rate, 100, '.2f'):>12}{_shown(f.prefill_ms_per_token, 1e3, '.4g'):>17}"
        )
    _line("production costs as the engines count them (pull: the wire's share; failed in %)")


def _print_proposal(p) -> None:  # p: kvcal.observe.result.Proposal | None
    if p is None:
        return
    if p.threshold is None:
        _line(f"proposal: none ({p.refused})")
        return
    low, high = p.interval or [None, None]
    span = f"{low if low is not None else '-'} .. {high if high is not None else 'no P2P'}"
    worth = (
        f"; keeping {p.deployed} costs {p.regret_pct_of_deployed:.3g}% of TTFT ({p.regret_ms_of_deployed:.3g} ms a "
        "request) on the adjusted fit"
        if p.deployed is not None and p.regret_pct_of_deployed is not None
        else (f"; deployed {p.deployed}" if p.deployed is not None else "")
    )
    _line(
        f"proposal: minCachedTokenDelta {p.threshold} (interval {span} from {p.batches} sub-windows; pull "
        f"{p.pull_ms_per_token_delta * 1e3:+.4g} us/token, prefill x{p.prefill_ratio:.3g}){worth}"
    )


def register(app: typer.Typer) -> None:
    app.command("observe", epilog=EPILOG)(observe)
