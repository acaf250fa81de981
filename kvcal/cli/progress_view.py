"""Sweep progress for people: a rich live display on a terminal, plain lines otherwise."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, TextIO

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from kvcal.cli.output import safe_line

if TYPE_CHECKING:  # annotations only: kvcal --help must not build the typed records
    from rich.progress import TaskID

    from kvcal.records import ProbeRecord


def progress_for_terminal() -> RichProgress | PlainProgress:
    return RichProgress() if sys.stderr.isatty() else PlainProgress()


def round_line(view) -> str:
    """One adaptive round (kvcal.sweep.adaptive_run.RoundView): the interval now, the stop rule, what comes next."""
    from kvcal.sweep.adaptive import STOP_TEXT, width_text

    if view.break_even_tokens is not None and view.break_even_ci:
        where = (
            f"break-even {view.break_even_tokens:.0f} tok, interval {view.break_even_ci[0]:.0f}-"
            f"{view.break_even_ci[1]:.0f} (width {width_text(view.width)})"
        )
    elif view.status:
        where = f"{view.status}, interval {width_text(view.width)}"
    else:
        where = "no fit yet"
    if getattr(view, "threshold", None) is not None:
        where += f", threshold {view.threshold}" + ("" if view.regret is None else f" (regret {view.regret:.3%})")
    then = f"stop: {STOP_TEXT[view.stop]}" if view.stop else f"next: {view.kind} round of {view.next_probes} probes"
    return (
        f"round {view.round}: {view.n_probes} probes, {view.engine_seconds:.2f} s engine time; {where}; "
        f"{view.rules}; {then}"
    )


def adaptive_result_line(outcome) -> str:
    """The closing line of an adaptive sweep (kvcal.sweep.adaptive_run.AdaptiveOutcome)."""
    from kvcal.sweep.adaptive import STOP_TEXT, width_text

    interval = ""
    if outcome.break_even_ci:
        interval = (
            f"; break-even {outcome.break_even_tokens:.0f} tokens, interval "
            f"{outcome.break_even_ci[0]:.0f}-{outcome.break_even_ci[1]:.0f}"
        )
    elif outcome.status:
        interval = f"; status {outcome.status}"
    return (
        f"kvcal: adaptive stop: {outcome.stop_reason} ({STOP_TEXT.get(outcome.stop_reason, '')}) after "
        f"{outcome.rounds} rounds, {outcome.engine_seconds:.2f} s engine time; final width "
        f"{width_text(outcome.final_width)}{_target_text(outcome)}{interval}{_threshold_text(outcome)}"
    )


def _target_text(outcome) -> str:
    return f" (target {outcome.target_width:g})" if outcome.target_regret is None else ""


def _threshold_text(outcome) -> str:
    """emit-config's threshold and its expected regret, where the campaign asked for them."""
    if outcome.threshold is None:
        return ""
    regret = "" if outcome.regret is None else f", expected regret {outcome.regret:.3%} of TTFT"
    target = "" if outcome.target_regret is None else f" (target {outcome.target_regret:.3%})"
    return f"; threshold {outcome.threshold}{regret}{target}"


def _describe(record: ProbeRecord) -> str:
    ttft = "n/a" if record.ttft_ms is None else f"{record.ttft_ms:.1f} ms"
    moved = "" if record.bytes_moved is None else f", {record.bytes_moved / 1e6:.2f} MB moved"
    state = "" if record.valid else f"  INVALID: {safe_line(record.invalid_reason)}"
    if record.source_waiting is not None or record.computing_waiting is not None:  # loaded sweeps
        moved += f", {record.load_state}, waiting {record.source_waiting}/{record.computing_waiting}"
    return f"{record.prefix_tokens:>7} tok {record.leg.value:<9} rep {record.rep}  {ttft}{moved}{state}"


class PlainProgress:
    """One line per event on stderr, for logs and CI."""

    def __init__(self) -> None:
        self._start = time.monotonic()
        self._done_at_start = 0

    def on_phase(self, message: str) -> None:
        print(f"kvcal: {safe_line(message)}...", file=sys.stderr, flush=True)

    def on_start(self, total: int, already_done: int) -> None:
        self._start, self._done_at_start = time.monotonic(), already_done
        resumed = f" ({already_done} already done)" if already_done else ""
        print(f"kvcal: {total} probes planned{resumed}", file=sys.stderr, flush=True)

    def on_probe(self, record: ProbeRecord, done: int, total: int) -> None:
        elapsed = time.monotonic() - self._start
        fresh = max(done - self._done_at_start, 1)
        eta = elapsed / fresh * (total - done)
        print(f"[{done}/{total}] {_describe(record)}  eta {eta:.0f}s", file=sys.stderr, flush=True)

    def on_complete(self, done: int, total: int) -> None:
        print(f"kvcal: {done}/{total} probes on disk", file=sys.stderr, flush=True)

    def on_round(self, view) -> None:
        print(f"kvcal: {round_line(view)}", file=sys.stderr, flush=True)


class RichProgress:
    """A live bar with the current probe, last TTFTs and ETA."""

    def __init__(self, file: TextIO | None = None) -> None:
        # markup off: probe errors and paths print as they are ("[/x]" would stop a sweep)
        self._console = Console(stderr=file is None, file=file, markup=False)
        self._bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[last]}", markup=False),
            console=self._console,
            transient=False,
        )
        self._task: TaskID | None = None

    def on_phase(self, message: str) -> None:
        self._console.log(f"{safe_line(message)}...")

    def on_start(self, total: int, already_done: int) -> None:
        self._bar.start()
        self._task = self._bar.add_task("sweep", total=total, completed=already_done, last="")

    def on_probe(self, record: ProbeRecord, done: int, total: int) -> None:
        if self._task is None:
            return
        if not record.valid:
            self._console.log(f"[yellow]invalid probe[/]: {escape(_describe(record))}", markup=True)
        self._bar.update(self._task, completed=done, total=total, last=_describe(record))

    def on_round(self, view) -> None:
        self._console.log(round_line(view))
        if self._task is not None:
            width = "" if view.width is None else f" {view.width:.1%}"
            self._bar.update(
                self._task, description=f"round {view.round}{width}", total=view.n_probes + view.next_probes
            )

    def on_complete(self, done: int, total: int) -> None:
        if self._task is not None:
            self._bar.update(self._task, completed=done)
        self._bar.stop()
