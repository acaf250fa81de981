"""Printing helpers for the CLI: rich on a terminal, plain lines otherwise. The library never prints."""

from __future__ import annotations

import os
import sys

from rich.console import Console
from rich.markup import escape

from kvcal.files.writing import stdout_claimed
from kvcal.redact import redact_text
from kvcal.terminal_text import flattened, visible


def _on_terminal(stream) -> bool:
    try:
        return stream is not None and stream.isatty()  # None: the shell closed it (`kvcal ... >&-`)
    except ValueError:  # a closed stream
        return False


class _ReportConsole(Console):
    """The report on stdout, or on stderr when an output of the command goes to stdout (``-o -``)."""

    @property
    def file(self):
        return sys.stderr if stdout_claimed() else sys.stdout

    @file.setter
    def file(self, value) -> None:
        self._file = value

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError  # the CLI's boundary ends quietly with 141 (rich would exit 1, compare's code)


# Off a terminal (CI logs, pipes) rich would wrap tables at 80 columns; print them wide instead.
# Markup off: what kvcal prints holds paths, run names and engine errors, and rich would drop
# "[run]" from a path and fail on "[/x]"; the one styled word goes through print_warning().
stdout = _ReportConsole(soft_wrap=True, markup=False, width=None if _on_terminal(sys.stdout) else 200)
stderr = Console(stderr=True, soft_wrap=True, markup=False, width=None if _on_terminal(sys.stderr) else 200)


def print_warning(line: str) -> None:
    """A warning in a command's report on stdout: the word styled, the text as it is."""
    stdout.print(f"[yellow]warning:[/yellow] {escape(visible(line))}", markup=True, highlight=False)


def print_sanity(findings: list) -> None:
    """The sanity section of fit and compare: each check that is not plainly ok, with its advice."""
    shown = [f for f in findings if f.severity == "warning"]
    checked = [f for f in findings if f.expected is not None]
    if not checked and not shown:
        return  # no profile matched the run: nothing was compared
    stdout.print(f"sanity: {len(checked)} checks against the model and hardware profiles, {len(shown)} flagged")
    for finding in shown:
        measured = "-" if finding.measured is None else f"{finding.measured:.3g} {finding.unit}".strip()
        expected = "-" if finding.expected is None else f"{finding.expected:.3g} {finding.unit}".strip()
        stdout.print(
            f"  {finding.severity}: {finding.check}: measured {measured}, expected {expected}. {finding.advice}",
            markup=False,
            highlight=False,
        )


def safe_line(message: object) -> str:
    """A message as the CLI shows it: every URL redacted (kvcal/redact.py), on one line, control characters
    escaped (kvcal/terminal_text.py). The last guard: messages quote servers, engines and files."""
    return flattened(redact_text(str(message)))


def configure_logging(verbose: bool) -> None:
    """Library detail on stderr (INFO with --verbose), each record one safe line (they quote URLs and servers).

    logging is imported here, where a command runs: no --help configures it (kvcal/cli/app.py), and at the top of
    this module, which every command imports, it was about 3 ms of every help (benchmarks/cli_startup.py).
    """
    import logging

    class SafeLogFormatter(logging.Formatter):
        """A log record as one safe line (:func:`safe_line`): a library's log quotes URLs and what servers sent."""

        def format(self, record: logging.LogRecord) -> str:
            return safe_line(super().format(record))

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING)
    for handler in logging.getLogger().handlers:
        handler.setFormatter(SafeLogFormatter("%(levelname)s %(name)s: %(message)s"))


def error_line(message: str) -> None:
    """One line on stderr: the whole error report a user sees."""
    print(f"kvcal: error: {safe_line(message)}", file=sys.stderr)


def warn(message: str) -> None:
    print(f"kvcal: warning: {safe_line(message)}", file=sys.stderr)


def library_warning(message, category, filename, lineno, file=None, line=None) -> None:  # warnings' signature
    """A library's warning (matplotlib names a glyph it lacks, Ray advises) as one line, redacted and escaped."""
    warn(f"{category.__name__}: {message} ({os.path.basename(filename)}:{lineno})")


def warn_each(lines) -> None:
    """A --json report's warnings, also on stderr: a step that keeps stdout for the data still shows them."""
    for line in lines:
        warn(line)


def info(message: str) -> None:
    """Lines on stderr, each redacted and escaped like an error line (a report's own line breaks and spacing kept)."""
    print("\n".join(visible(redact_text(line)) for line in str(message).split("\n")), file=sys.stderr)
