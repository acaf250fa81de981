"""Every sentence about what was measured is checked against fit.json (issue 50 item 6).

The campaigns are benchmarks/campaigns.py's: one of every noise class (heavy tails, stalls on one
leg, dead ties, slow lengths, slow modes, ...). For each, the fit's warnings and the threshold's
steps, warnings or refusal under both rules are read sentence by sentence: a claim about the
measurements (a measured mean, a median that won or lost, a slow mode's count) must name what
fit.json records, and a sentence that speaks of medians or measured means in a form no checker
below knows fails, so a new claim cannot go unchecked.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from kvcal.costs.cost_curve import cost_ms
from kvcal.threshold.choose import compute_threshold
from kvcal.errors import KvcalError
from kvcal.fit import fit_table
from kvcal.fit.mean_cost import mean_curves, mean_scales
from kvcal.fit.tables import from_rows
from kvcal.records.fit import FitResult, FitSettings, FitSource
from kvcal.records.run import RunSetup

sys.path.insert(0, str(Path(__file__).parents[3] / "benchmarks"))
from campaigns import BLOCK, CLASSES, campaign  # noqa: E402

Check = Callable[[FitResult, re.Match], None]


def _g4(value: float) -> str:
    return f"{value:.4g}"


def _scales(fit: FitResult, m: re.Match) -> None:
    assert (m["r"], m["p"]) == tuple(_g4(v) for v in mean_scales(fit))


def _row(fit: FitResult, n: int):
    rows = {r.prefix_tokens: r for r in fit.mean_cost.per_length} if fit.mean_cost else {}
    assert n in rows, f"{n} tokens is no measured length of the fit"
    return rows[n]


def _misfit(fit: FitResult, m: re.Match) -> None:
    row, leg = _row(fit, int(m["n"])), m["leg"]
    assert getattr(row, f"{leg}_misfit"), f"{leg} does not misfit at {m['n']}"
    assert m["measured"] == _g4(getattr(row, f"{leg}_ms"))
    curve = mean_curves(fit)[0 if leg == "recompute" else 1]
    assert m["fitted"] == _g4(float(cost_ms(curve, int(m["n"]))))


def _slow_mode(fit: FitResult, m: re.Match) -> None:
    mode = next(s for s in fit.slow_modes if s.mean_fitted)
    assert (int(m["k"]), int(m["n"])) == (mode.n_slow, mode.n_probes)


def _unresolved(fit: FitResult, m: re.Match) -> None:
    assert fit.unresolved_slow is not None
    assert (int(m["k"]), int(m["n"])) == (fit.unresolved_slow.n_slow, fit.unresolved_slow.n_probes)


def _favour(fit: FitResult, m: re.Match) -> None:
    row = next(r for r in fit.per_length if r.prefix_tokens == int(m["n"]))
    assert row.pull_won == (m["winner"] == "pull")


def _medians(fit: FitResult, m: re.Match) -> None:
    rows = [r for r in fit.per_length if r.pull_won is not None]
    won = sum(bool(r.pull_won) for r in rows)
    if m["every"]:
        assert won == (len(rows) if m["every"] == "won" else 0), f"medians won at {won} of {len(rows)}"
    else:
        assert (int(m["k"]), int(m["total"])) == (won, len(rows))


def _won_from(fit: FitResult, m: re.Match) -> None:
    start = int(m["n"])
    rows = [r for r in fit.per_length if r.prefix_tokens >= start]
    assert rows and all(r.pull_won for r in rows), f"a median lost at or above {start}"


def _won_from_floor(fit: FitResult, m: re.Match) -> None:
    assert fit.pull_won_from_tokens == int(m["n"])
    _won_from(fit, m)


def _at_lengths(fit: FitResult, m: re.Match) -> None:
    won = {r.prefix_tokens: r.pull_won for r in fit.per_length}
    for n in re.findall(r"\d+", m["lengths"]):
        assert won.get(int(n)) == (m["verdict"] == "won"), f"the pull's median did not {m['verdict'].rstrip('d')} at {n}"


def _every(fit: FitResult, m: re.Match) -> None:
    rows = [r for r in fit.per_length if r.pull_won is not None]
    assert rows and all(bool(r.pull_won) == (m["winner"] == "pull") for r in rows), f"not every median: {m[0]}"


def _ends(fit: FitResult, m: re.Match) -> None:
    won = {r.prefix_tokens: r.pull_won for r in fit.per_length}
    assert won[int(m["end"])] == (m["there"] == "won") and won[int(m["other"])] == (m["there"] == "lost")


def _warm_up(fit: FitResult, m: re.Match) -> None:
    assert int(m["k"]) == fit.n_warmup_excluded


CHECKS: list[tuple[re.Pattern, Check]] = [
    (re.compile(r"recompute's curve x (?P<r>[0-9.e+-]+), the pull's x (?P<p>[0-9.e+-]+)"), _scales),
    (re.compile(r"at (?P<n>\d+) tokens the (?P<leg>recompute|pull) curve misfits: its measured mean is "
                r"(?P<measured>[0-9.e+]+) ms against (?P<fitted>[0-9.e+]+) ms fitted, so the draws take the measured "
                r"mean, with its noise, there"), _misfit),
    (re.compile(r"\((?P<k>\d+) of (?P<n>\d+) pulls, \d+%, took"), _slow_mode),
    (re.compile(r"(?P<k>\d+) of (?P<n>\d+) pulls took [0-9.]+x the fitted time"), _unresolved),
    (re.compile(r"at (?P<n>\d+) tokens the measured medians favour the (?P<winner>pull|recompute)"), _favour),
    (re.compile(r"the pull's median (?:(?P<every>won|lost) at every measured length|won at (?P<k>\d+) of "
                r"(?P<total>\d+) measured lengths)"), _medians),
    (re.compile(r"the pull's median won at every measured length from (?P<n>\d+) tokens up"), _won_from),
    (re.compile(r"the shortest measured length from which the pull won at every longer length \((?P<n>\d+) tokens"),
     _won_from_floor),
    (re.compile(r"(?:the pull's|its) median (?P<verdict>won|lost) at (?P<lengths>\d+(?:, \d+)*(?: \.\.\.)?) tokens"),
     _at_lengths),
    (re.compile(r"(?P<winner>the pull|recompute) won at every measured length(?! down| \()"), _every),
    (re.compile(r"measured length (?P<end>\d+), but the pull's median (?P<there>lost|won) there and (?:won|lost) at "
                r"(?P<other>\d+)"), _ends),
    (re.compile(r"\(median over \d+ groups, Wilcoxon p = [0-9.e-]+\); those (?P<k>\d+) probes were excluded"), _warm_up),
]
CLAIM_WORDS = re.compile(r"median|measured mean|won at|lost at|beat the pull|pull won|recompute won")


def check_sentences(fit: FitResult, text: str) -> list[str]:
    """The claims ``text`` makes about the measurements, each checked; the sentences no checker knows."""
    covered = text
    for pattern, check in CHECKS:
        for match in pattern.finditer(text):
            check(fit, match)
            covered = covered.replace(match.group(0), "")
    return [part for part in re.split(r"(?<=[;)])\s|\. ", covered) if CLAIM_WORDS.search(part)]


def _messages(fit: FitResult, rule: str) -> list[str]:
    try:
        t = compute_threshold(fit, rule=rule)
    except KvcalError as err:
        return [str(err)]
    return [*t.steps, *t.warnings]


@pytest.mark.parametrize("cls", CLASSES)
def test_every_measured_claim_agrees_with_fit_json(cls):
    for scale, seed in (("cpu-tiny", 0), ("glm-like", 1)):
        c = campaign(cls, scale, seed)
        table = from_rows(c.rows, setup=RunSetup(block_size=BLOCK), origin=FitSource(kind="sim"))
        fit = fit_table(table, settings=FitSettings(seed=seed, n_resamples=200))
        unchecked = []
        for text in [*fit.warnings, *_messages(fit, "expected-cost"), *_messages(fit, "upper")]:
            unchecked += check_sentences(fit, text)
        assert not unchecked, f"{cls} {scale} {seed}: claims no checker reads: {unchecked}"


def test_a_false_claim_is_caught():
    """The checker itself: a misfit sentence with the wrong measured mean, or a 'won at every length' where a median
    lost, fails."""
    c = campaign("slow-lengths", "gpu-8b", 2)
    fit = fit_table(from_rows(c.rows, setup=RunSetup(block_size=BLOCK), origin=FitSource(kind="sim")),
                    settings=FitSettings(n_resamples=200))
    row = next(r for r in fit.mean_cost.per_length if r.pull_misfit or r.recompute_misfit)
    leg = "pull" if row.pull_misfit else "recompute"
    wrong = (f"at {row.prefix_tokens} tokens the {leg} curve misfits: its measured mean is 1 ms against 1 ms fitted, "
             "so the draws take the measured mean, with its noise, there")
    with pytest.raises(AssertionError):
        check_sentences(fit, wrong)
    lost = np.flatnonzero([not r.pull_won for r in fit.per_length])
    assert lost.size
    with pytest.raises(AssertionError):
        check_sentences(fit, "the pull's median won at every measured length (a range)")
    assert check_sentences(fit, "the medians say something new") == ["the medians say something new"]
