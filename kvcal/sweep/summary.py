"""summary.csv: per (length, leg) statistics a sweep derives from its probe log, replaced whole.

The run folder itself (its files, run.json, the append-only probes.jsonl, the
interchange CSV ``kvcal export`` writes) is :mod:`kvcal.records.run_folder`; probe lines are
never rewritten.
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from kvcal.records.run import ProbeRecord
from kvcal.records.run_folder import RunFolder, atomic_write


def write_summary(run: RunFolder, records: Iterable[ProbeRecord] | None = None) -> None:
    """summary.csv of the run's probes (``records``: those already read), replaced whole."""
    records = list(run.read_probes() if records is None else records)
    atomic_write(run.summary_path, summarize(records).to_csv(index=False))


def summarize(records: Iterable[ProbeRecord]) -> pd.DataFrame:
    """Per (prefix_tokens, leg): counts, TTFT statistics, median bytes moved, and the valid probes
    counted by the counter that proved their bytes (``pull_proofs``: ``counter=n; ...``)."""
    records = [r for r in records if r.session != "cold"]  # cold pulls: the session cost, not the warm curve
    columns = [
        "prefix_tokens",
        "leg",
        "n_valid",
        "n_invalid",
        "median_ttft_ms",
        "mean_ttft_ms",
        "std_ttft_ms",
        "min_ttft_ms",
        "max_ttft_ms",
        "median_bytes_moved",
        "pull_proofs",
    ]
    if not records:
        return pd.DataFrame(columns=columns)
    frame = pd.DataFrame(
        [
            {
                "prefix_tokens": r.prefix_tokens,
                "leg": r.leg.value,
                "valid": r.valid,
                "ttft_ms": r.ttft_ms,
                "bytes_moved": r.bytes_moved,
                "bytes_metric": r.bytes_metric,
            }
            for r in records
        ]
    )
    rows = []
    for (n, leg), group in frame.groupby(["prefix_tokens", "leg"], sort=True):
        good = group[group["valid"]]
        ttft = good["ttft_ms"].astype(float)
        moved = good["bytes_moved"].dropna()
        rows.append(
            {
                "prefix_tokens": int(n),
                "leg": leg,
                "n_valid": len(good),
                "n_invalid": int((~group["valid"]).sum()),
                "median_ttft_ms": ttft.median() if len(ttft) else None,
                "mean_ttft_ms": ttft.mean() if len(ttft) else None,
                "std_ttft_ms": ttft.std() if len(ttft) > 1 else None,
                "min_ttft_ms": ttft.min() if len(ttft) else None,
                "max_ttft_ms": ttft.max() if len(ttft) else None,
                "median_bytes_moved": int(moved.median()) if len(moved) else None,
                "pull_proofs": "; ".join(
                    f"{k}={v}" for k, v in sorted(good["bytes_metric"].dropna().value_counts().items())
                ),
            }
        )
    return pd.DataFrame(rows, columns=columns)
