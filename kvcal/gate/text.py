"""Numbers as reports print them: values with their unit's precision, intervals, a dash for unknown."""

from __future__ import annotations


def fmt_value(value: float | None, unit: str = "") -> str:
    if value is None:
        return "—"
    if unit == "tokens":
        return f"{value:.0f}"
    return f"{value:.4g}"


def fmt_ci(ci: tuple[float, ...] | None, unit: str = "") -> str:
    return "—" if ci is None else f"[{fmt_value(ci[0], unit)}, {fmt_value(ci[1], unit)}]"
