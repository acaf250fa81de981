"""``kvcal observe``: the deployed fleet's own figures over a window, read back from Prometheus, and the checks."""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from kvcal import __version__
from kvcal.emit.deployed_values import read_threshold
from kvcal.emit.formats import load_input
from kvcal.errors import InputError, KvcalError
from kvcal.fleet.result import FleetResult, checked_result
from kvcal.observe.checks import Prediction, bytes_check, fleet_checks, fleet_row, remeasure
from kvcal.observe.client import PrometheusClient, query_budget
from kvcal.observe.figures import fetch, figures_of, history_of, pod_parts
from kvcal.observe.result import FIGURE_NAMES, Figures, ObserveResult, PodFigures, TimeWindow
from kvcal.observe.series import Window
from kvcal.redact import redact_url
from kvcal.userfiles import check_input, read_text

MAX_WINDOW_S = 31 * 86_400
"""A month of raw samples is as far as the answer's size cap reaches for a small fleet."""
_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0, "w": 604_800.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_MATCHER = r'\s*[A-Za-z_][A-Za-z0-9_]*\s*(?:=~|!~|!=|=)\s*"(?:[^"\\\n]|\\.)*"\s*'
_SELECTOR = re.compile(rf"{_MATCHER}(?:,{_MATCHER})*,?\s*")


class FleetOutsidePrediction(KvcalError, exit_code=1):
    """A check came out outside its prediction beyond the stated tolerance (exit 1 by contract)."""


@dataclass(frozen=True)
class ObserveConfig:
    prometheus: str
    since: str | None = None
    start: str | None = None
    end: str | None = None
    selector: str | None = None
    fit_path: Path | None = None
    fleet_path: Path | None = None
    deployed: int | None = None
    values_path: Path | None = None


def parse_duration(text: str, flag: str = "--since") -> float:
    """``15m``, ``1h30m``, ``90s``, ``2d``: seconds, within (0, 31 days]."""
    spec = text.strip()
    if not spec or _DURATION.sub("", spec):
        raise InputError(f"{flag} {text!r} is not a duration (e.g. 15m, 1h30m, 90s, 2d)")
    seconds = sum(float(n) * _UNITS[unit] for n, unit in _DURATION.findall(spec))
    if not 0 < seconds <= MAX_WINDOW_S:
        raise InputError(f"{flag} {text!r} must lie within (0 s, 31 d]")
    return seconds


def parse_time(text: str, flag: str) -> float:
    """Unix seconds, or RFC 3339 / ISO 8601 (a time without a zone is UTC)."""
    try:
        value = float(text)
    except ValueError:
        try:
            moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise InputError(
                f"{flag} {text!r} is neither unix seconds nor an RFC 3339 time (e.g. 2026-12-07T04:00:00Z)"
            ) from None
        value = (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp()
    if not math.isfinite(value) or not 0 < value < 32_503_680_000:  # year 3000
        raise InputError(f"{flag} {text!r} is not a time kvcal can query")
    return value


def parse_selector(text: str | None) -> str | None:
    """Label matchers (``namespace="llm-d",model_name=~"qwen.*"``, braces optional), checked before any query."""
    if text is None or not text.strip().strip("{}").strip():
        return None
    inner = text.strip()
    inner = inner[1:-1] if inner.startswith("{") and inner.endswith("}") else inner
    if not _SELECTOR.fullmatch(inner):
        raise InputError(
            f'--selector {text!r} is not a list of label matchers (e.g. namespace="llm-d",pod=~"decode-.*")'
        )
    return inner.strip().rstrip(",")


def resolve_window(config: ObserveConfig, now: float) -> Window:
    if config.since is not None and (config.start is not None or config.end is not None):
        raise InputError("give --since or --start and --end, not both")
    if (config.start is None) != (config.end is None):
        raise InputError("--start and --end go together")
    if config.start is not None and config.end is not None:
        window = Window(parse_time(config.start, "--start"), parse_time(config.end, "--end"))
        if window.end <= window.start:
            raise InputError(f"--end must come after --start ({config.start} .. {config.end})")
        if window.seconds > MAX_WINDOW_S:
            raise InputError("the window from --start to --end must be at most 31 days")
        return window
    return Window(now - parse_duration(config.since or "15m"), now)


def load_prediction(config: ObserveConfig) -> Prediction:
    """The fit and the fleet row's threshold, read and checked before Prometheus is asked anything."""
    if config.deployed is not None and config.values_path is not None:
        raise InputError("give --deployed or --values, not both")
    if config.fleet_path is None and (config.deployed is not None or config.values_path is not None):
        raise InputError("--deployed and --values name a row of --fleet: give --fleet too")
    deployed = config.deployed
    if config.values_path is not None:
        deployed = read_threshold(check_input(config.values_path, f"values file {config.values_path}"))
    if config.fleet_path is not None and deployed is None:
        raise InputError(
            "--fleet needs the deployed threshold that names its row: --deployed THRESHOLD or --values FILE"
        )
    if deployed is not None and deployed <= 0:
        raise InputError(f"--deployed must be a positive number of tokens, got {deployed}")
    fleet = None
    if config.fleet_path is not None:
        text = read_text(check_input(config.fleet_path, f"fleet result {config.fleet_path}"))
        try:
            fleet = checked_result(FleetResult.model_validate_json(text), str(config.fleet_path))
        except ValueError as err:
            raise InputError(
                f"{config.fleet_path} is not a kvcal fleet --json result: {str(err).splitlines()[0]}"
            ) from None
        if deployed is not None:  # checked above: --fleet comes with a deployed threshold
            fleet_row(fleet, deployed)
    fit = load_input(config.fit_path) if config.fit_path is not None else None
    return Prediction(fit=fit, fleet=fleet, deployed=deployed)


def _notes(pods: list[PodFigures], fleet: Figures) -> list[str]:
    """A fleet figure that some pods could not give: which, and why (the fleet's figure counts the others)."""
    notes = []
    for name in FIGURE_NAMES:
        lacking = [p for p in pods if getattr(p, name).value is None]
        if lacking and getattr(fleet, name).value is not None:
            notes.append(
                f"{name}: the fleet's figure leaves out {', '.join(p.name for p in lacking)} "
                f"({getattr(lacking[0], name).missing})"
            )
    return notes


def _rfc3339(at: float) -> str:
    return datetime.fromtimestamp(at, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def run_observe(config: ObserveConfig, now: float | None = None, transport=None) -> ObserveResult:
    """Query Prometheus over the window, make each pod's and the fleet's figures, and check them (no exit here)."""
    selector = parse_selector(config.selector)
    window = resolve_window(config, time.time() if now is None else now)
    prediction = load_prediction(config)
    with PrometheusClient(
        config.prometheus, transport=transport, total_deadline_s=query_budget(window.seconds)
    ) as client:
        client.check(window.end)
        fetched = fetch(client, window, selector)
    history = history_of(fetched)
    parts = pod_parts(fetched, window)
    pods = [PodFigures(name=name, **figures_of([p], window, history)[0].model_dump()) for name, p in parts.items()]
    fleet, buckets = figures_of(list(parts.values()), window, history)
    checks = []
    if prediction.fit is not None:
        checks.append(bytes_check(prediction.fit, fleet.bytes_per_pulled_token))
    if prediction.fleet is not None and prediction.deployed is not None:
        checks += fleet_checks(fleet_row(prediction.fleet, prediction.deployed), fleet, buckets)
    notes = (
        _notes(pods, fleet)
        if parts
        else [
            f"no vLLM series matched in the window (selector {selector or 'none'})"
            ": is the fleet scraped, and does --selector name it?"
        ]
    )
    return ObserveResult(
        kvcal_version=__version__,
        prometheus=redact_url(config.prometheus),
        selector=selector,
        window=TimeWindow(start=_rfc3339(window.start), end=_rfc3339(window.end)),
        pods=pods,
        fleet=fleet,
        ttft_buckets_ms=buckets,
        checks=checks,
        remeasure=remeasure(checks, prediction, fleet.requests_per_s.value),
        notes=notes,
    )
