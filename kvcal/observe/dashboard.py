"""``kvcal observe --dashboard FILE``: the Grafana dashboard of every figure observe reports, per pod and fleet-wide.

One time-series panel per figure of :func:`kvcal.observe.catalog.every_figure` (a figure
added to the catalog is a panel), in the order of observe's JSON; each panel holds two
queries, one series per pod and the fleet's, from :mod:`kvcal.observe.promql`. Variables:
``datasource`` (a Prometheus data source), ``selector`` (label matchers added to every
series, observe's ``--selector`` by default) and ``tp`` (the tensor-parallel size NIXL's
pooled time is divided by: the fit's, else 1). What observe compares a figure with is drawn
as a dashed threshold line on its panel (:func:`references`): the fit's KV bytes per token
and engine-side costs, the failure bound, and with ``--fleet`` the deployed threshold's row's
intervals. Nothing is queried.

The model is built and read back with Grafana Labs' ``grafana-foundation-sdk`` (types
generated from Grafana 11.6's schemas; docs/architecture.md says why), which needs Python
3.11: on 3.10 the flag is refused with that reason.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

from kvcal import __version__
from kvcal.errors import InputError
from kvcal.files.writing import check_output, claim_stdout, is_stdout, write_file
from kvcal.observe.catalog import Figure, Quantile, every_figure
from kvcal.observe.checks import BYTES_TOLERANCE, FLEET_FIGURES, Prediction, fleet_row
from kvcal.observe.drift import FAILURE_BOUND, LEGS
from kvcal.observe.promql import POD, SELECTOR, TP, queries
from kvcal.observe.result import Figures
from kvcal.observe.run import ObserveConfig, load_prediction, parse_selector, resolve_window

try:
    from grafana_foundation_sdk.builders import common as common_builders
    from grafana_foundation_sdk.builders import dashboard as builders
    from grafana_foundation_sdk.builders import prometheus, timeseries
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models import common, dashboard
except ImportError as err:  # Python 3.10, where the SDK does not install (it needs 3.11)
    _MISSING: ImportError | None = err
else:
    _MISSING = None

UNITS = {
    "share": "percentunit",
    "B/token": "bytes",
    "ms": "ms",
    "requests": "short",
    "requests/s": "reqps",
    "ms/token": "ms",
    "B/s": "Bps",
    "failed/attempted": "percentunit",
}
"""Grafana's unit for each unit the catalog states (a figure's first ratio's); another is shown as a plain number."""
WIDTH, HEIGHT = 12, 8  # two panels a row on Grafana's 24-column grid
ONLY_WITH_SERVER = ("--since", "--start", "--end", "--json", "--propose", "--propose-fit")


@dataclass(frozen=True)
class Reference:
    """A value observe compares a figure with, drawn as a line on its panel."""

    value: float
    label: str


def references(prediction: Prediction) -> dict[str, list[Reference]]:
    """What observe holds each figure to, from the fit, the bound and the deployed threshold's fleet row."""
    out: dict[str, list[Reference]] = {
        "pull_failure_rate": [Reference(FAILURE_BOUND, f"the failure bound ({FAILURE_BOUND:.0%})")]
    }
    fit = prediction.fit
    if fit is not None:
        kv = fit.setup.kv_bytes_per_token if fit.setup is not None else None
        if kv:
            out["bytes_per_pulled_token"] = [
                Reference(float(kv), f"the fit's KV bytes per token ({kv:,}; checked within {BYTES_TOLERANCE:.0%})")
            ]
        for figure, leg in LEGS.values():
            cost = getattr(fit.engine_side, figure, None) if fit.engine_side is not None else None
            if cost is not None:
                label = f"the calibration's engine-side {leg} cost ({cost.value:.4g} ms a token, {cost.samples} probes)"
                out[figure] = [Reference(cost.value, label)]
    if prediction.fleet is not None and prediction.deployed is not None:
        row = fleet_row(prediction.fleet, prediction.deployed)
        for figure, field in FLEET_FIGURES.items():
            predicted = getattr(row, field)
            if predicted is not None:
                what = f"kvcal fleet's {field} at threshold {prediction.deployed}"
                out.setdefault(figure, []).extend(
                    [Reference(predicted.ci[0], f"{what}: low"), Reference(predicted.ci[1], f"{what}: high")]
                )
    return out


def _unit(figure: Figure | Quantile) -> str:
    unit = figure.unit if isinstance(figure, Quantile) else next(iter(figure.ratios.values())).unit
    return UNITS.get(unit, "short")


def _description(name: str, figure: Figure | Quantile, lines: list[Reference]) -> str:
    field = Figures.model_fields.get(name)
    what = (field.description if field is not None else None) or name
    if isinstance(figure, Quantile):
        shape = (
            f"`histogram_quantile({figure.q:g}, ...)` over the buckets' rates by `le`"
            if figure.of == "histogram"
            else f"`quantile_over_time({figure.q:g}, ...)` of each pod's readings; the fleet's: across pods"
        )
    else:
        kinds = ", ".join(figure.ratios)
        shape = f"`sum(rate(...[$__rate_interval]))` over `sum(rate(...))`, per pod kind ({kinds})"
    seen = "; ".join(f"{r.label}: {r.value:.4g}" for r in lines) or "none given"
    return f"kvcal observe's `{name}`: {what}\n\nPromQL: {shape}.\n\nReference lines: {seen}."


def _thresholds(lines: list[Reference]) -> builders.ThresholdsConfig:
    steps = [dashboard.Threshold(value=None, color="transparent")]  # the base step draws no line
    steps += [dashboard.Threshold(value=r.value, color="orange") for r in sorted(lines, key=lambda r: r.value)]
    return builders.ThresholdsConfig().mode(dashboard.ThresholdsMode("absolute")).steps(steps)


def _panel(index: int, name: str, figure: Figure | Quantile, lines: list[Reference]) -> timeseries.Panel:
    found = queries(figure)
    source = dashboard.DataSourceRef(type_val="prometheus", uid="${datasource}")
    panel = (
        timeseries.Panel()
        .title(name)
        .description(_description(name, figure, lines))
        .datasource(source)
        .unit(_unit(figure))
        .grid_pos(dashboard.GridPos(h=HEIGHT, w=WIDTH, x=(index % 2) * WIDTH, y=(index // 2) * HEIGHT))
        .with_target(prometheus.Dataquery().ref_id("A").expr(found.per_pod).legend_format("{{" + POD + "}}"))
        .with_target(prometheus.Dataquery().ref_id("B").expr(found.fleet).legend_format("fleet"))
    )
    if lines:
        panel = panel.thresholds(_thresholds(lines)).thresholds_style(
            common_builders.GraphThresholdsStyleConfig().mode(common.GraphThresholdsStyleMode("dashed"))
        )
    return panel


def _variables(selector: str | None, tp: int) -> list:
    return [
        builders.DatasourceVariable("datasource").label("Prometheus").type("prometheus"),
        builders.TextBoxVariable(SELECTOR.lstrip("$"))
        .label("Label matchers")
        .description('Added to every series, as kvcal observe --selector (e.g. namespace="llm-d")')
        .default_value(selector or "")
        .current(dashboard.VariableOption(text=selector or "", value=selector or "")),
        builders.TextBoxVariable(TP.lstrip("$"))
        .label("Tensor-parallel size")
        .description("NIXL counts a transfer's time once per rank: its time is divided by this")
        .default_value(str(tp))
        .current(dashboard.VariableOption(text=str(tp), value=str(tp))),
    ]


def _summary(selector: str | None, prediction: Prediction, source: ObserveConfig) -> str:
    parts = [f"Generated by kvcal {__version__} (kvcal observe --dashboard) from kvcal/observe/catalog.py."]
    if selector:
        parts.append(f"Selector: {selector}.")
    if source.fit_path is not None:
        parts.append(f"Fit: {source.fit_path}.")
    if source.fleet_path is not None:
        parts.append(f"Fleet result: {source.fleet_path}.")
    if prediction.deployed is not None:
        parts.append(f"Deployed minCachedTokenDelta: {prediction.deployed}.")
    return " ".join(parts)


def build(config: ObserveConfig, prediction: Prediction) -> dashboard.Dashboard:
    """The dashboard's model: a panel per figure, the variables, the reference lines."""
    selector = parse_selector(config.selector)
    setup = prediction.fit.setup if prediction.fit is not None else None
    tp = (setup.tensor_parallel_size if setup is not None else None) or 1
    uid = "kvcal-observe" + (f"-{hashlib.sha256(selector.encode()).hexdigest()[:8]}" if selector else "")
    lines = references(prediction)
    board = (
        builders.Dashboard("kvcal observe: KV pulls, TTFT, queues and costs")
        .uid(uid)
        .description(_summary(selector, prediction, config))
        .tags(["kvcal", "vllm", "llm-d"])
        .time("now-1h", "now")
        .refresh("1m")
    )
    for variable in _variables(selector, tp):
        board = board.with_variable(variable)
    for index, (name, figure) in enumerate(every_figure().items()):
        board = board.with_panel(_panel(index, name, figure, lines.get(name, [])))
    return board.build()


def render(model: dashboard.Dashboard) -> str:
    """The model as Grafana's JSON (one object; non-ASCII escaped, so nothing a selector holds reaches a terminal)."""
    return JSONEncoder(sort_keys=True, indent=2).encode(model) + "\n"


def load(text: str) -> dashboard.Dashboard:
    """A dashboard's JSON read back into the SDK's model (its panels and Prometheus queries typed)."""
    register_default_plugins()
    return dashboard.Dashboard.from_json(json.loads(text))


def _check_flags(config: ObserveConfig, output: Path, as_json: bool) -> None:
    """--dashboard alone queries nothing; with --prometheus, stdout holds one document; a bad window is refused
    before the dashboard is written."""
    if config.prometheus is None:
        given = (config.since, config.start, config.end, as_json, config.propose, config.propose_fit)
        for flag, value in zip(ONLY_WITH_SERVER, given):
            if value:
                raise InputError(f"{flag} needs --prometheus: --dashboard alone writes a dashboard and queries nothing")
    check_output(output, "--dashboard", [config.fit_path, config.fleet_path, config.values_path])
    if config.prometheus is not None:
        if is_stdout(output):
            claim_stdout("--json" if as_json else "observe's table (--prometheus)")
        resolve_window(config, time.time())


def write_dashboard(config: ObserveConfig, output: Path, *, as_json: bool = False) -> int:
    """Check the flags and inputs, build the dashboard and write it to ``output`` (``-``: stdout); its panels."""
    if _MISSING is not None:
        raise InputError(
            f"--dashboard builds Grafana's model with grafana-foundation-sdk, which needs Python 3.11 or later "
            f"({_MISSING}); run kvcal under Python 3.11+"
        )
    _check_flags(config, output, as_json)
    parse_selector(config.selector)
    model = build(config, load_prediction(config))
    write_file(output, render(model), f"--dashboard {output}")
    return len(model.panels or [])
