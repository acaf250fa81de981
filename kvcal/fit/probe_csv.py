"""Reading a probe CSV, the interchange format: a header row, then one row per probe.

Columns ``prefix_tokens`` (int), ``leg`` (``recompute``|``pull``) and ``ttft_ms`` (float) are
required; ``rep`` (int), ``bytes_moved`` (int), ``valid`` (bool; rows with false are excluded and
counted) and the time order, ``order`` (an integer rank in time) or ``started_at`` (ISO 8601, or
epoch seconds), in every row or none, are optional; so are ``pair`` and ``link_class``, a campaign
over pairs' tags (``kvcal export`` writes them), ``link_class`` in every row or none (the fit is
then made per class, as a run folder's is). A mistake is an InputError naming the row.
:mod:`kvcal.fit.tables` turns the rows into a table.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pandas as pd

from kvcal.errors import InputError
from kvcal.fit.fields import TAG_COLUMNS, ParsedRows, int_field, leg_field, tags, time_field, time_order

CSV_REQUIRED = ("prefix_tokens", "leg", "ttft_ms")
CSV_OPTIONAL = ("rep", "bytes_moved", "valid", "order", "started_at", *TAG_COLUMNS)


def read_probe_csv(path: Path, text: str) -> ParsedRows:
    """The rows of a probe CSV (the interchange format), with its notes, invalid count and time order's source."""
    header = _checked_header(path, text)
    frame = pd.read_csv(
        io.StringIO(text), dtype=str, keep_default_na=False, skipinitialspace=True
    )  # rows checked above
    frame.columns = header
    extra = [c for c in header if c not in CSV_REQUIRED + CSV_OPTIONAL]
    notes = [f"ignored unknown column(s): {', '.join(extra)}"] if extra else []
    repeated_header = (frame["prefix_tokens"].str.strip() == "prefix_tokens").to_numpy()
    if repeated_header.any():  # files concatenated with their headers: the rows below are checked as duplicates
        frame = frame[~repeated_header]
    if frame.empty:
        raise InputError(f"{path}: header only, no probe rows")
    n_invalid = 0
    if "valid" in frame.columns:
        flags = frame["valid"].str.strip().str.lower()
        bad = ~flags.isin(["true", "false", "1", "0", "yes", "no"])
        if bad.any():
            line = int(np.argmax(bad.to_numpy())) + 2
            raise InputError(f"{path} row {line}: valid must be true or false, got '{frame['valid'].iloc[line - 2]}'")
        keep = flags.isin(["true", "1", "yes"]).to_numpy()
        n_invalid = int((~keep).sum())
        frame = frame[keep]
        if frame.empty:
            raise InputError(f"{path}: no valid probes ({n_invalid} invalid excluded)")
    rows = []
    # Plain column lists, not iterrows: a Series per row was most of a million-row table's load time.
    blank = [""] * len(frame)
    columns = [
        frame[c].tolist() if c in frame.columns else blank
        for c in ("prefix_tokens", "leg", "ttft_ms", "rep", "bytes_moved")
    ]
    for index, tokens, leg, ttft, rep, moved in zip(frame.index.tolist(), *columns):
        where = f"{path} row {int(index) + 2}"  # the header is row 1
        rep, moved = rep.strip(), moved.strip()
        rows.append(
            {
                "prefix_tokens": int_field(tokens, "prefix_tokens", where, positive=True),
                "leg": leg_field(leg, where),
                "ttft_ms": time_field(ttft, "ttft_ms", where),
                "rep": int_field(rep, "rep", where) if rep else None,
                "bytes_moved": int_field(moved, "bytes_moved", where) if moved else None,
            }
        )
    source = time_order(path, frame, rows)
    tags(path, frame, rows)
    if n_invalid:
        notes.append(f"{n_invalid} row(s) with valid=false excluded")
    return ParsedRows(rows, notes, n_invalid_excluded=n_invalid, order_source=source)


def _checked_header(path: Path, text: str) -> list[str]:
    """The header's column names, once each with the required ones, every row as long as it (before pandas reads
    the file, whose own errors would not name the row)."""
    reader = csv.reader(io.StringIO(text))
    header = [h.strip() for h in next(reader)]
    seen: set[str] = set()
    for name in header:
        if name in seen:
            raise InputError(f"{path}: duplicate column '{name}' in the header")
        seen.add(name)
    missing = [c for c in CSV_REQUIRED if c not in header]
    if missing:
        raise InputError(f"{path}: missing column(s) {', '.join(missing)} (need prefix_tokens, leg, ttft_ms)")
    for number, row in enumerate(reader, start=2):
        if row and len(row) != len(header):
            raise InputError(f"{path} row {number}: {len(row)} fields, the header has {len(header)}")
    return header
