"""Sweep progress for people: a rich live display on a terminal, plain lines otherwise."""

from __future__ import annotations

import sys
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from kvcal.records import ProbeRecord


def progress_for_terminal() -> "RichProgress | PlainProgress":
    return RichProgress() if sys.stderr.isatty() else PlainProgress()


def _describe(record: ProbeRecord) -> str:
    ttft = "n/a" if record.ttft_ms is None else f"{record.ttft_ms:.1f} ms"
    moved = "" if record.bytes_moved is None else f", {record.bytes_moved / 1e6:.2f} MB moved"
    state = "" if record.valid else f"  INVALID: {record.invalid_reason}"
    if record.source_waiting is not None or record.computing_waiting is not None:  # loaded sweeps
        moved += f", {record.load_state}, waiting {record.source_waiting}/{record.computing_waiting}"
    return f"{record.prefix_tokens:>7} tok {record.leg.value:<9} rep {record.rep}  {ttft}{moved}{state}"


class PlainProgress:
    """One line per event on stderr, for logs and CI."""

    def __init__(self) -> None:
        self._start = time.monotonic()
        self._done_at_start = 0

    def on_phase(self, message: str) -> None:
        print(f"kvcal: {message}...", file=sys.stderr, flush=True)

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


class RichProgress:
    """A live bar with the current probe, last TTFTs and ETA."""

    def __init__(self) -> None:
        self._console = Console(stderr=True)
        self._bar = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.fields[last]}"),
            console=self._console, transient=False,
        )
        self._task = None

    def on_phase(self, message: str) -> None:
        self._console.log(f"{message}...")

    def on_start(self, total: int, already_done: int) -> None:
        self._bar.start()
        self._task = self._bar.add_task("sweep", total=total, completed=already_done, last="")

    def on_probe(self, record: ProbeRecord, done: int, total: int) -> None:
        if self._task is None:
            return
        if not record.valid:
            self._console.log(f"[yellow]invalid probe[/]: {_describe(record)}")
        self._bar.update(self._task, completed=done, last=_describe(record))

    def on_complete(self, done: int, total: int) -> None:
        if self._task is not None:
            self._bar.update(self._task, completed=done)
        self._bar.stop()
