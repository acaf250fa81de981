"""Writing ``fit.json`` (reading it is :func:`kvcal.records.fit.load_fit`, beside the record), and the one rule for
"is this file JSON"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kvcal.errors import InputError
from kvcal.files.reading import is_stdin_copy
from kvcal.files.writing import write_file, writer_lock
from kvcal.records.fit import FitResult


def looks_like_json(path: Path) -> bool:
    """A file whose first non-blank character is '{' (a fit.json); anything else is read as a probe table."""
    with path.open("rb") as handle:
        head = handle.read(256)
    return head.removeprefix(b"\xef\xbb\xbf").lstrip().startswith(b"{")


def default_output(path: str | Path) -> Path:
    """Where ``kvcal fit`` writes without --output: ``<run>/fit.json``, else ``<input stem>.fit.json`` beside it."""
    p = Path(path)
    if is_stdin_copy(p):
        raise InputError("the probes came from standard input: give --output for fit.json (- for stdout)")
    return p / "fit.json" if p.is_dir() else p.with_name(f"{p.stem}.fit.json")


def write_fit(result: FitResult, path: str | Path) -> Path:
    """Write fit.json (key ``schema`` by alias) whole or not at all; InputError when the place cannot be written."""
    p = Path(path)
    with writer_lock(p, str(p)):  # two fits of one target: the second waits (kvcal/files/writing.py)
        return write_file(p, dumps(result) + "\n", str(p))


def dumps(result: FitResult) -> str:
    """fit.json text: indented, but each list of bootstrap samples on one line (14,000 numbers stay readable)."""
    data = json.loads(result.model_dump_json(by_alias=True))
    boot = data.get("bootstrap", {})
    compact: dict[str, str] = {}

    def park(holder: dict[str, Any], key: str) -> None:
        marker = f"@@samples{len(compact)}@@"
        compact[marker] = json.dumps(holder[key], separators=(",", ":"))
        holder[key] = marker

    if isinstance(boot.get("break_even_samples"), list):
        park(boot, "break_even_samples")
    for name in ("recompute_samples", "pull_samples"):
        for key in list(boot.get(name) or {}):
            park(boot[name], key)
    text = json.dumps(data, indent=1)
    for marker, values in compact.items():
        text = text.replace(f'"{marker}"', values)
    return text
