"""The fit's status and its sentences agree with its own per-length medians (issue 55, item 9).

A newcomer's demo printed "status: pull-always-wins (extrapolated)" beside "the pull's median
won at every measured length from 384 tokens up" after the pull's median lost at 256: the
fitted curves crossed below the shortest length, the medians inside the range.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from kvcal.fit import fit_table
from kvcal.fit.breakeven import reconcile, status_warning
from kvcal.fit.tables import from_rows
from kvcal.fit_record import FitSettings, LengthSummary
from kvcal.records import RunSetup

SETUP = RunSetup(engine="sim", model="sim", block_size=64)
JITTER = (1.0, 1.03, 0.97)


def _rows(lengths, recompute, pull) -> list[dict]:
    return [
        {"prefix_tokens": n, "leg": leg, "ttft_ms": cost(n) * m, "rep": rep}
        for n in lengths
        for rep, m in enumerate(JITTER)
        for leg, cost in (("recompute", recompute), ("pull", pull))
    ]


def lost_at_the_shortest() -> list[dict]:
    """Straight legs crossing near 150 tokens, but the pull's median at 256 lost by 4 % (a slow short end)."""
    return _rows((256, 384, 512, 1024, 2048), lambda n: 5 + 0.025 * n, lambda n: 8 + 0.003 * n if n > 256 else 11.85)


def won_at_the_longest() -> list[dict]:
    """Legs whose fitted lines cross just past 2,048 tokens, while the pull's median at 2,048 won."""
    return _rows((256, 512, 1024, 1536, 2048), lambda n: 5 + 0.025 * n, lambda n: 42 + 0.008 * n if n < 2048 else 56.0)


def _fit(rows):
    return fit_table(from_rows(rows, setup=SETUP), FitSettings(n_resamples=200))


def test_curves_crossing_below_the_shortest_length_where_the_median_lost_are_a_crossover_extrapolated():
    fit = _fit(lost_at_the_shortest())
    assert fit.break_even_tokens is not None and fit.break_even_tokens < 256  # the fitted curves cross below
    shortest = fit.per_length[0]
    assert shortest.prefix_tokens == 256 and shortest.pull_won is False and fit.pull_won_from_tokens == 384
    assert fit.status == "crossover" and fit.extrapolated
    said = " ".join(fit.warnings)
    assert "the pull won at every measured length" not in said
    assert "the medians cross between 256 and 384 tokens" in said


def test_curves_crossing_beyond_the_longest_length_where_the_median_won_are_a_crossover_extrapolated():
    fit = _fit(won_at_the_longest())
    assert fit.break_even_tokens is not None and fit.break_even_tokens > 2048
    assert fit.per_length[-1].pull_won is True and fit.pull_won_from_tokens == 2048
    assert fit.status == "crossover" and fit.extrapolated
    said = " ".join(fit.warnings)
    assert "recompute won at every measured length" not in said
    assert "the medians cross between 1536 and 2048 tokens" in said


def _row(n: int, won: bool | None) -> LengthSummary:
    return LengthSummary(
        prefix_tokens=n, recompute_ms=10.0, pull_ms=9.0 if won else 11.0, n_recompute=3, n_pull=3, pull_won=won,
        pull_won_measurably=False,
    )


@pytest.mark.parametrize(
    "status, be, wins, expected",
    [
        ("pull-always-wins", 100.0, [False, True, True], "crossover"),
        ("pull-always-wins", 100.0, [True, True, True], "pull-always-wins"),  # every median agrees
        ("pull-always-wins", 100.0, [False, False, False], "pull-always-wins"),  # the medians never cross
        ("pull-always-wins", 100.0, [True, False, True], "pull-always-wins"),  # won at the shortest: its name holds
        ("recompute-always-wins", 9000.0, [False, False, True], "crossover"),
        ("recompute-always-wins", float("inf"), [False, False, True], "recompute-always-wins"),  # no point to place
        ("recompute-always-wins", 9000.0, [False, True, False], "recompute-always-wins"),
        ("crossover", 500.0, [False, True, True], "crossover"),
    ],
)
def test_reconcile_names_a_crossing_of_the_medians_inside_the_range(status, be, wins, expected):
    rows = [_row(n, w) for n, w in zip((256, 512, 1024), wins)]
    assert reconcile(status, be != 500.0, be, rows)[0] == expected


def test_a_pull_always_wins_sentence_names_a_loss_in_the_middle_instead_of_claiming_every_length():
    rows = [_row(n, w) for n, w in zip((256, 512, 1024), (True, False, True))]
    said = status_warning("pull-always-wins", 100.0, True, 256, 1024, 64, rows)
    assert said is not None and "the pull won at every measured length" not in said
    assert "its median lost at 512 tokens" in said
    clean = status_warning("pull-always-wins", 100.0, True, 256, 1024, 64, [_row(n, True) for n in (256, 512, 1024)])
    assert clean is not None and clean.startswith("the pull won at every measured length")


def test_the_fit_command_prints_one_consistent_status(kvcal, tmp_path: Path):
    path = tmp_path / "probes.csv"
    rows = lost_at_the_shortest()
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    res = kvcal("fit", path, "--resamples", "200", "-o", tmp_path / "fit.json")
    assert res.code == 0, res.err
    assert "status: crossover  (extrapolated)" in res.out and "pull-always-wins" not in res.out
    assert "the pull's median won at every measured length from 384 tokens up" in res.out
    assert "the pull won at every measured length" not in res.out + res.err
    assert json.loads((tmp_path / "fit.json").read_text())["status"] == "crossover"
