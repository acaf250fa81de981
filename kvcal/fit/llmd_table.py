"""Reading the llm-d calibration Job's table (its log): one row of 5-rep medians a length.

Rows are ``tokens recompute_ms pull_ms [delta[%]] [pulled_MB]``; the header and ``kubectl logs
--timestamps`` stamps are optional; a line not starting with an integer is chatter and skipped,
one that does must parse in full. A row whose pulls moved 0 MB timed recompute twice and is left
out, as the recipe counts it out. :mod:`kvcal.fit.tables` turns the rows into a table.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from kvcal.errors import InputError
from kvcal.fit.fields import MAX_INT, ParsedRows, int_field, parse_number, time_field
from kvcal.fit.hygiene import duplicate_warning
from kvcal.fit.recipe import check_verdict, unstamped

MB = 1_000_000  # the llm-d Job divides byte deltas by 1e6 for its pulled_MB column
TABLE_HEADER = re.compile(r"^\s*tokens\s+recompute_ms\s+pull_ms\b", re.IGNORECASE)
_INT = re.compile(r"^[+]?\d+$")


def looks_like_row(line: str) -> bool:
    """A line of the table: at least three fields, the first an integer (chatter starts otherwise)."""
    fields = unstamped(line).split()
    return len(fields) >= 3 and bool(_INT.match(fields[0]))


def read_llmd_table(path: Path, text: str) -> ParsedRows:
    """The rows of the llm-d calibration Job's table (two a length: recompute and pull), with its notes."""
    verdict = check_verdict(path, text)  # the recipe's failure lines refuse the log before any row is read
    rows: list[dict[str, Any]] = []
    headers = 0
    notes: list[str] = []
    seen_lines: set[tuple[str, ...]] = set()
    n_zero = n_repeated = 0
    for number, line in enumerate(text.splitlines(), start=1):
        line = unstamped(line)
        if TABLE_HEADER.match(line):
            headers += 1
            if headers > 1 and not rows:
                continue
            if headers > 1:
                raise InputError(f"{path} line {number}: a second table header (two runs in one file? split them)")
            continue
        fields = line.split()
        if not fields or not _INT.match(fields[0]):
            continue  # log chatter: src=..., mesh warm: ..., MIN_CACHED_TOKEN_DELTA=...
        tokens, recompute, pull, moved = _row(fields, f"{path} line {number}", number, notes)
        if moved == 0:
            n_zero += 1  # the recipe counts a length only when its pulls moved bytes: this row timed recompute twice
            continue
        if tuple(fields) in seen_lines:
            n_repeated += 1
            continue
        seen_lines.add(tuple(fields))
        rep = sum(1 for r in rows if r["prefix_tokens"] == tokens and r["leg"] == "recompute")
        rows.append(
            {"prefix_tokens": tokens, "leg": "recompute", "ttft_ms": recompute, "rep": rep, "bytes_moved": None}
        )
        rows.append({"prefix_tokens": tokens, "leg": "pull", "ttft_ms": pull, "rep": rep, "bytes_moved": moved})
    if n_zero:
        notes.append(
            f"{n_zero} row(s) whose pulls moved 0 MB excluded as non-pulls (they timed recompute against "
            "recompute; the recipe counts them out too): check the P2P tier and PYTHONHASHSEED"
        )
    if n_repeated:
        notes.append(duplicate_warning(n_repeated))
    if not rows:
        raise InputError(
            f"{path}: the llm-d table has a header but no rows"
            if not n_zero
            else f"{path}: every row of the llm-d table moved 0 MB: no pull fired; check the P2P tier"
        )
    if verdict:
        notes.append(f"the recipe reported: {verdict}")
    return ParsedRows(rows, notes, n_invalid_excluded=n_zero, verdict=verdict, n_repeated=n_repeated)


def _row(fields: list[str], where: str, number: int, notes: list[str]) -> tuple[int, float, float, int | None]:
    """One table line's tokens, recompute and pull times and bytes pulled (None without the column); a delta
    column that disagrees with the times is noted."""
    if not 3 <= len(fields) <= 5:
        raise InputError(
            f"{where}: expected 'tokens recompute_ms pull_ms [delta%] [pulled_MB]', got {len(fields)} fields"
        )
    tokens = int_field(fields[0], "tokens", where, positive=True)
    recompute = time_field(fields[1], "recompute_ms", where)
    pull = time_field(fields[2], "pull_ms", where)
    if len(fields) >= 4:
        delta = parse_number(fields[3].rstrip("%"), "delta", where)
        expected = 100.0 * (pull - recompute) / recompute
        if abs(delta - expected) > 1.0:
            notes.append(
                f"line {number}: delta {delta:+.1f}% disagrees with the times ({expected:+.1f}%): columns swapped?"
            )
    moved = None
    if len(fields) == 5:
        megabytes = parse_number(fields[4], "pulled_MB", where)
        if megabytes < 0 or megabytes * MB > MAX_INT:
            raise InputError(f"{where}: pulled_MB must be non-negative and plausible, got {fields[4]}")
        moved = int(round(megabytes * MB))
    return tokens, recompute, pull, moved
