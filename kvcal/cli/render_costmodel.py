"""The human report of a fitted cost model (``kvcal fit`` on a loaded run or production data)."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from rich import box
from rich.table import Table

from kvcal.cli.output import print_warning, stdout

if TYPE_CHECKING:  # only the annotation: kvcal --help must not build the typed records
    from rich.console import JustifyMethod

    from kvcal.records.fit_costmodel import CostModelFit

ROWS = (
    ("transferFixedMs", "F  pull fixed cost", "ms"),
    ("sourceWaitMs", "S  busy source", "ms"),
    ("requeueMs", "Q  pull onto busy pod", "ms"),
    ("busy_computing_ms", "q  any request, busy pod", "ms"),
    ("base_ms", "base", "ms"),
    ("prefillMicrosecondsPerToken", "P  recompute (idle)", "us/token"),
    ("transferMicrosecondsPerToken", "T  transfer (idle)", "us/token"),
)


def render_cost_model(cost: CostModelFit) -> None:
    level = f"{cost.confidence:.0%}"
    table = Table(
        title=f"router costModel ({cost.design}, {cost.n_requests} requests, busy = waiting >= "
        f"{cost.busyQueueThreshold})",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    for name, justify in (
        ("constant", "left"),
        ("key", "left"),
        ("value", "right"),
        (f"{level} interval", "right"),
        ("unit", "left"),
    ):
        table.add_column(name, justify=cast("JustifyMethod", justify))
    for key, label, unit in ROWS:
        estimate = getattr(cost, key)
        ci = f"{estimate.ci[0]:.3g} to {estimate.ci[1]:.3g}" if estimate.ci else "-"
        table.add_row(label, key, f"{estimate.value:.4g}", ci, unit)
    stdout.print(table)
    d = cost.diagnostics
    shares = ", ".join(
        f"{name} {value:.0%}"
        for name, value in (
            ("pulls with a busy source", d.busy_source_pull_share),
            ("pulls onto a busy pod", d.busy_computing_pull_share),
        )
        if value is not None
    )
    stdout.print(f"design: {d.n_pull_sizes} pull size(s), condition {d.condition_number:.3g} with T free; {shares}")
    for line in cost.warnings:
        print_warning(f"cost model: {line}")
