"""The human report of session cost and link classes (``kvcal fit`` on a run with cold pulls or several classes)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box
from rich.table import Table

from kvcal.cli.output import stdout

if TYPE_CHECKING:  # only the annotation: kvcal --help must not build the typed records
    from kvcal.records.fit import FitResult
    from kvcal.records.fit_links import SessionCost


def session_line(cost: SessionCost | None, confidence: float) -> str:
    """'412 ms (90% interval 388-436; 3 cold samples at 256 tokens)', or 'not measured'."""
    if cost is None:
        return "not measured (no first pull on a fresh session kvcal created)"
    interval = (
        f"{confidence:.0%} interval {cost.ci[0]:.0f}-{cost.ci[1]:.0f}; " if cost.ci else "no interval from one sample; "
    )
    lengths = ",".join(map(str, cost.lengths))
    retried = f", {cost.n_retried} after a failed handshake kept out" if cost.n_retried else ""
    return f"{cost.value_ms:.0f} ms ({interval}{cost.n_cold} cold sample(s) at {lengths} tokens{retried})"


def render_links(result: FitResult) -> None:
    """The session cost line and, for several link classes, one row per class and the test of their difference."""
    if result.session_cost is not None or result.classes:
        line = session_line(result.session_cost, result.confidence)
        stdout.print(f"session cost (first pull on a fresh session): {line}")
    if not result.classes:
        return
    level = f"{result.confidence:.0%}"
    table = Table(
        title="link classes (each fitted on its own probes; the lines above pool them)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    for name in (
        "class",
        "pairs",
        "pull fixed ms",
        "pull us/token",
        "break-even",
        f"{level} interval",
        "session ms",
        f"session {level}",
    ):
        table.add_column(name, justify="left" if name in ("class", "pairs") else "right")
    for name, cls in result.classes.items():
        be = "-" if cls.break_even_tokens is None else f"{cls.break_even_tokens:.0f}"
        ci = "-" if cls.break_even_ci is None else f"{cls.break_even_ci[0]:.0f}-{cls.break_even_ci[1]:.0f}"
        session = "-" if cls.session_cost_ms is None else f"{cls.session_cost_ms:.0f}"
        low_high = cls.session_cost_ci
        session_ci = "-" if low_high is None else f"{low_high[0]:.0f}-{low_high[1]:.0f}"
        table.add_row(
            name,
            ",".join(cls.pairs),
            f"{cls.pull_fixed_ms:.2f}",
            f"{cls.pull_us_per_token:.3f}",
            be,
            ci,
            session,
            session_ci,
        )
    stdout.print(table)
    diff = result.class_difference
    if diff is None:
        stdout.print("classes differ? not tested (a class has fewer than 3 pulls)")
    else:
        verdict = "they differ: keep them apart" if diff.differ else "no difference shown: they may be pooled"
        stdout.print(f"classes differ? {diff.test}: F={diff.statistic:.3g}, p={diff.p_value:.3g}; {verdict}")
