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
from kvcal.errors import InputError, KvcalError, NoThreshold
from kvcal.files.reading import check_input, read_text
from kvcal.files.writing import check_output, is_stdout
from kvcal.fit.io import write_fit
from kvcal.fleet.result import FleetResult, checked_result
from kvcal.observe.catalog import COST_FAMILIES, COST_QUERIES
from kvcal.observe.checks import Prediction, bytes_check, fleet_checks, fleet_row, remeasure
from kvcal.observe.client import PrometheusClient, query_budget
from kvcal.observe.costs import CostReader, PodCosts, combined, observed
from kvcal.observe.drift import NO_ENGINE_SIDE, Subject, busy_reason, drift_checks
from kvcal.observe.drift import remeasure as drift_remeasure
from kvcal.observe.figures import PodParts, fetch, figures_of, history_of, pod_parts
from kvcal.observe.propose import Proposed, measure_production, propose
from kvcal.observe.result import COST_NAMES, FIGURE_NAMES, Figures, ObserveResult, PodFigures, TimeWindow
from kvcal.observe.series import History, Window
from kvcal.records.fit_engine import ProposedFrom
from kvcal.redact import redact_url

MAX_WINDOW_S = 31 * 86_400
"""A month of raw samples is as far as the answer's size cap reaches for a small fleet."""
_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0, "w": 604_800.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_MATCHER = r'\s*[A-Za-z_][A-Za-z0-9_]*\s*(?:=~|!~|!=|=)\s*"(?:[^"\\\n]|\\.)*"\s*'
_SELECTOR = re.compile(rf"{_MATCHER}(?:,{_MATCHER})*,?\s*")


class FleetOutsidePrediction(KvcalError, exit_code=1):
    """A check came out outside its prediction beyond the stated tolerance (exit 1 by contract)."""


DEFAULT_SINCE = "15m"  # the window when neither --since nor --start/--end is given (observe's help quotes it)
NO_SERVER = "give --prometheus URL to read the fleet (or --dashboard FILE to write its Grafana dashboard)"


@dataclass(frozen=True)
class ObserveConfig:
    prometheus: str | None
    since: str | None = None
    start: str | None = None
    end: str | None = None
    selector: str | None = None
    fit_path: Path | None = None
    fleet_path: Path | None = None
    deployed: int | None = None
    values_path: Path | None = None
    propose: bool = False
    propose_fit: Path | None = None

    @property
    def proposing(self) -> bool:
        """--propose, or --propose-fit (which writes what --propose decides on)."""
        return self.propose or self.propose_fit is not None


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
    return Window(now - parse_duration(config.since or DEFAULT_SINCE), now)


def load_prediction(config: ObserveConfig) -> Prediction:
    """The fit and the fleet row's threshold, read and checked before Prometheus is asked anything."""
    if config.deployed is not None and config.values_path is not None:
        raise InputError("give --deployed or --values, not both")
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
    if config.proposing:
        _check_proposable(config, fit)
    return Prediction(fit=fit, fleet=fleet, deployed=deployed)


def _check_proposable(config: ObserveConfig, fit) -> None:
    """--propose needs a fit whose engine side records the pull cost; --propose-fit a place to write."""
    if fit is None:
        raise InputError("--propose moves a calibration to production costs: give --fit FIT (a fit.json or run folder)")
    if fit.engine_side is None or fit.engine_side.pull_ms_per_token is None:
        raise InputError(f"--propose: {config.fit_path}: " + NO_ENGINE_SIDE.format(leg="pull"))
    if config.propose_fit is not None:
        if is_stdout(config.propose_fit):
            raise InputError("--propose-fit needs a file name (the report goes to standard output)")
        check_output(config.propose_fit, "--propose-fit", [config.fit_path])


def _notes(pods: list[PodFigures], fleet: Figures) -> list[str]:
    """A fleet figure that some pods could not give: which, and why (the fleet's figure counts the others)."""
    notes = []
    for name in (*FIGURE_NAMES, *COST_NAMES):
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
    if config.prometheus is None:
        raise InputError(NO_SERVER)
    selector = parse_selector(config.selector)
    window = resolve_window(config, time.time() if now is None else now)
    prediction = load_prediction(config)
    with PrometheusClient(
        config.prometheus, transport=transport, total_deadline_s=query_budget(window.seconds)
    ) as client:
        client.check(window.end)
        fetched = fetch(client, window, selector, COST_QUERIES, COST_FAMILIES)
    history = history_of(fetched)
    ranks, notes = _ranks(prediction)
    reader = CostReader.of(fetched, history, ranks)
    costs = reader.pods(window)
    parts = pod_parts(fetched, window)
    pods = [_pod(name, parts[name], costs[name], window, history) for name in parts]
    fleet_costs = combined(list(costs.values()))
    fleet, buckets = _figures(list(parts.values()), fleet_costs, window, history)
    checks = []
    if prediction.fit is not None:
        checks.append(bytes_check(prediction.fit, fleet.bytes_per_pulled_token))
        subjects = [Subject(p.name, p, costs[p.name]) for p in pods] + [Subject(None, fleet, fleet_costs)]
        checks += drift_checks(prediction.fit, subjects, fleet.queue_p90)
    if prediction.fleet is not None and prediction.deployed is not None:
        checks += fleet_checks(fleet_row(prediction.fleet, prediction.deployed), fleet, buckets)
    notes += _cost_notes(costs) + (
        _notes(pods, fleet)
        if parts
        else [
            f"no vLLM series matched in the window (selector {selector or 'none'})"
            ": is the fleet scraped, and does --selector name it?"
        ]
    )
    result = ObserveResult(
        kvcal_version=__version__,
        prometheus=redact_url(config.prometheus),
        selector=selector,
        window=TimeWindow(start=_rfc3339(window.start), end=_rfc3339(window.end)),
        pods=pods,
        fleet=fleet,
        ttft_buckets_ms=buckets,
        checks=checks,
        remeasure=drift_remeasure(checks) + remeasure(checks, prediction, fleet.requests_per_s.value),
        notes=notes,
    )
    return _proposed(config, result, prediction, reader, window) if config.proposing else result


def _figures(parts: list[PodParts], costs: PodCosts, window: Window, history: History) -> tuple[Figures, dict]:
    """The figures of one pod or of several together (the fleet), and the TTFT quantiles' buckets."""
    base, buckets = figures_of(parts, window, history)
    return Figures(**base.model_dump(), **observed(costs)), buckets


def _pod(name: str, parts: PodParts, costs: PodCosts, window: Window, history: History) -> PodFigures:
    return PodFigures(name=name, **_figures([parts], costs, window, history)[0].model_dump())


def _ranks(prediction: Prediction) -> tuple[int, list[str]]:
    """The TP size NIXL's pooled transfer time is divided by: the fit's, else 1 with a note."""
    fit = prediction.fit
    if fit is not None and fit.setup.tensor_parallel_size:
        return fit.setup.tensor_parallel_size, []
    return 1, [
        "pull_ms_per_token: NIXL sums its transfer time over the tensor-parallel ranks; TP 1 is assumed (give --fit "
        "with a fit that records the engines' tensor-parallel size)"
    ]


def _cost_notes(costs: dict[str, PodCosts]) -> list[str]:
    notes = [note for c in costs.values() for note in c.notes]
    if any(c.kind == "p2p-tier" for c in costs.values()):
        notes.append(
            "pull_failure_rate on P2P-tier pods: failed promotion jobs over attempted chunks (the tier counts no "
            "jobs), a lower bound of the jobs' failure rate"
        )
    return notes


def _proposed(
    config: ObserveConfig, result: ObserveResult, prediction: Prediction, reader: CostReader, window: Window
) -> ObserveResult:
    """``--propose``: the threshold the production costs imply, and ``--propose-fit``'s file."""
    fit = prediction.fit
    assert fit is not None  # load_prediction checked it
    production = measure_production(reader, window, fit, busy_reason(fit, result.fleet.queue_p90))
    provenance = ProposedFrom(
        prometheus=config.prometheus,
        selector=result.selector,
        window_start=result.window.start,
        window_end=result.window.end,
        base_fit=str(config.fit_path) if config.fit_path is not None else None,
        pull_ms_per_token_delta=0.0,
        prefill_ratio=1.0,
    )
    done: Proposed = propose(fit, production, window, provenance, prediction.deployed)
    notes = [*result.notes, *production.notes]
    if config.propose_fit is not None and done.fit is not None:
        write_fit(done.fit, config.propose_fit)
        notes.append(f"--propose-fit: wrote the adjusted fit to {config.propose_fit}")
    return result.model_copy(update={"proposal": done.proposal, "notes": notes})


def exit_error(result: ObserveResult) -> KvcalError | None:
    """What the command exits with: 1 when a check is outside (drift first), 3 when --propose could not propose."""
    outside = [c for c in result.checks if c.verdict == "outside"]
    if outside:
        named = ", ".join(c.name + (f" ({c.pod})" if c.pod else "") for c in outside)
        return FleetOutsidePrediction(f"{named} outside the prediction: " + "; ".join(result.remeasure))
    if result.proposal is not None and result.proposal.refused is not None:
        return NoThreshold(result.proposal.refused)
    return None
