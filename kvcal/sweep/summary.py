"""What a sweep derives from its probe log: summary.csv, and the interchange CSV that ``kvcal export`` writes.

The run folder itself (its files, run.json, the append-only probes.jsonl) is
:mod:`kvcal.runfolder`; probe lines are never rewritten, and these files are derived
from them whole.
"""

from __future__ import annotations

import csv
import io
import logging
import sys
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from kvcal.errors import InputError
from kvcal.outputs import write_file
from kvcal.records import ProbeRecord
from kvcal.runfolder import RunFolder, atomic_write, probe_counts_as_idle

log = logging.getLogger(__name__)

INTERCHANGE_COLUMNS = ["prefix_tokens", "leg", "ttft_ms", "rep", "bytes_moved", "started_at"]  # started_at: time order


def write_summary(run: RunFolder, records: Iterable[ProbeRecord] | None = None) -> None:
    """summary.csv of the run's probes (``records``: those already read), replaced whole."""
    records = list(run.read_probes() if records is None else records)
    atomic_write(run.summary_path, summarize(records).to_csv(index=False))


def valid_probes(records: Iterable[ProbeRecord]) -> list[ProbeRecord]:
    return [r for r in records if r.valid and r.ttft_ms is not None]


def summarize(records: Iterable[ProbeRecord]) -> pd.DataFrame:
    """Per (prefix_tokens, leg): counts, TTFT statistics, median bytes moved, and the valid probes
    counted by the counter that proved their bytes (``pull_proofs``: ``counter=n; ...``)."""
    records = list(records)
    columns = ["prefix_tokens", "leg", "n_valid", "n_invalid", "median_ttft_ms", "mean_ttft_ms",
               "std_ttft_ms", "min_ttft_ms", "max_ttft_ms", "median_bytes_moved", "pull_proofs"]
    if not records:
        return pd.DataFrame(columns=columns)
    frame = pd.DataFrame(
        [{"prefix_tokens": r.prefix_tokens, "leg": r.leg.value, "valid": r.valid,
          "ttft_ms": r.ttft_ms, "bytes_moved": r.bytes_moved, "bytes_metric": r.bytes_metric} for r in records]
    )
    rows = []
    for (n, leg), group in frame.groupby(["prefix_tokens", "leg"], sort=True):
        good = group[group["valid"]]
        ttft = good["ttft_ms"].astype(float)
        moved = good["bytes_moved"].dropna()
        rows.append({
            "prefix_tokens": int(n), "leg": leg, "n_valid": len(good), "n_invalid": int((~group["valid"]).sum()),
            "median_ttft_ms": ttft.median() if len(ttft) else None, "mean_ttft_ms": ttft.mean() if len(ttft) else None,
            "std_ttft_ms": ttft.std() if len(ttft) > 1 else None, "min_ttft_ms": ttft.min() if len(ttft) else None,
            "max_ttft_ms": ttft.max() if len(ttft) else None,
            "median_bytes_moved": int(moved.median()) if len(moved) else None,
            "pull_proofs": "; ".join(f"{k}={v}" for k, v in sorted(good["bytes_metric"].dropna().value_counts().items())),
        })
    return pd.DataFrame(rows, columns=columns)


def export_interchange(run: RunFolder, output: Path | None) -> int:
    """Write the valid probes as the interchange CSV (``output`` None: stdout); return the row count."""
    # One row per probe, its last valid attempt, warm-ups left out: the rows fit would use.
    valid = [r for r in valid_probes(run.read_probes()) if not r.warmup]
    rows = list({r.probe_id: r for r in valid}.values())
    if len(rows) < len(valid):
        log.info("%d repeated records of one probe collapsed to the last, as fit does", len(valid) - len(rows))
    if any(r.load_state not in (None, "idle") for r in rows):
        # The interchange format has no load columns: a loaded run exports its idle probes only.
        threshold = run.manifest().settings.busy_queue_threshold
        rows = [r for r in rows if probe_counts_as_idle(r, threshold)]
    if not rows:
        raise InputError(f"{run.path} has no valid probes to export")
    buffer = [INTERCHANGE_COLUMNS]
    for r in sorted(rows, key=lambda r: (r.prefix_tokens, r.leg.value, r.rep)):
        buffer.append([r.prefix_tokens, r.leg.value, f"{r.ttft_ms:.4f}", r.rep, "" if r.bytes_moved is None else r.bytes_moved,
                       r.started_at])
    if output is None:
        csv.writer(sys.stdout, lineterminator="\n").writerows(buffer)
        return len(rows)
    text = io.StringIO()
    csv.writer(text).writerows(buffer)
    write_file(output, text.getvalue(), f"-o {output}")
    return len(rows)
